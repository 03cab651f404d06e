"""The scan-rng caches: per-file facts keyed by content hash (a stat check skips re-reading), and
whole results keyed by everything a scan reads (so a rescan of an unchanged tree does no analysis)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

from detaudit.fileio import user_cache_dir
from detaudit.scan.schema import FACT_KINDS, FACTS_VERSION

OUTCOME_KINDS = ("facts", "light", "skip")
_SCANNER_DIGEST: str | None = None


def scanner_digest(folder: Path | None = None) -> str:
    """A digest of the scanner's own source (every module of ``detaudit/scan``): both caches are
    keyed by it, so facts or results computed by other scanner code are never reused (an upgrade,
    or a checkout of another commit, would otherwise get stale findings from an unchanged tree)."""
    global _SCANNER_DIGEST
    if folder is None and _SCANNER_DIGEST is not None:
        return _SCANNER_DIGEST
    source = folder or Path(__file__).resolve().parent
    digest = hashlib.sha1()
    for path in sorted(source.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    value = digest.hexdigest()[:16]
    if folder is None:
        _SCANNER_DIGEST = value
    return value


def _valid_outcome(value: Any) -> bool:
    if not (isinstance(value, tuple) and len(value) == 2 and value[0] in OUTCOME_KINDS):
        return False
    if value[0] == "facts":
        facts = value[1]
        return isinstance(facts, dict) and facts.get("version") == FACTS_VERSION and all(
            isinstance(facts.get(key), kind) for key, kind in FACT_KINDS.items())
    if value[0] == "skip":
        return isinstance(value[1], str)
    # light: (dotted strings, the file's own facts or skip outcome)
    return isinstance(value[1], tuple) and len(value[1]) == 2 and isinstance(value[1][0], tuple) \
        and value[1][1][0] != "light" and _valid_outcome(value[1][1])


class FactsCache:
    """Per-file facts keyed by content hash; a stat (size, mtime) check skips re-reading.

    Each file's outcome is stored as its own pickle, the bytes the parser process sent: saving
    writes them as they are (no second pickling of ~100 MB of facts at the end of a cold scan),
    and a rescan unpickles only what it looks up.
    A cache file that cannot be read, or holds anything but what this version writes, is
    ignored (and rebuilt): a cache only ever costs or saves time.
    """

    def __init__(self, enabled: bool) -> None:
        self.path = user_cache_dir() / f"scan-rng-v{FACTS_VERSION}-{scanner_digest()}.pickle"
        self.enabled = enabled
        self.stats: dict[str, tuple[int, int, str]] = {}
        self.blobs: dict[str, bytes] = {}  # digest -> the pickled outcome
        self.dirty = False
        if enabled:
            try:
                with open(self.path, "rb") as fh:
                    data = pickle.load(fh)
            except Exception:  # noqa: BLE001 - any unpickling failure means "no cache"
                return
            if isinstance(data, dict) and isinstance(data.get("stats"), dict) and isinstance(data.get("facts"), dict):
                self.stats = {k: v for k, v in data["stats"].items() if isinstance(k, str) and isinstance(v, tuple)
                              and len(v) == 3 and isinstance(v[0], int) and isinstance(v[1], int) and isinstance(v[2], str)}
                self.blobs = {k: v for k, v in data["facts"].items() if isinstance(k, str) and isinstance(v, bytes)}

    def lookup_stat(self, path: str, st: os.stat_result) -> str | None:
        entry = self.stats.get(path)
        if entry and entry[0] == st.st_size and entry[1] == st.st_mtime_ns:
            return entry[2]
        return None

    def outcome(self, digest: str) -> Any:
        """The stored outcome of the file with this content, or None (none stored, or not one this version writes)."""
        blob = self.blobs.get(digest)
        if blob is None:
            return None
        try:
            value = pickle.loads(blob)
        except Exception:  # noqa: BLE001 - any unpickling failure means "not cached"
            return None
        return value if _valid_outcome(value) else None

    def remember(self, path: str, st: os.stat_result, digest: str, blob: bytes) -> None:
        self.stats[path] = (st.st_size, st.st_mtime_ns, digest)
        self.blobs[digest] = blob
        self.dirty = True

    def save(self) -> None:
        if not (self.enabled and self.dirty):
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".scan-rng.", suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                pickle.dump({"stats": self.stats, "facts": self.blobs}, fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, self.path)
            for stale in self.path.parent.glob("scan-rng-v*.pickle"):  # another scanner's facts: never read again
                if stale != self.path:
                    stale.unlink(missing_ok=True)
        except OSError:
            pass  # a cache that cannot be written only costs time


RESULT_VERSION = 1
MAX_RESULTS = 8  # results kept (one per tree and settings scanned), the most recent first


def result_key(config: Any, paths: list[str], cwd: str, skipped: list[Any],
               files: list[tuple[Any, ...]]) -> str:
    """A digest of everything a scan's result depends on besides file contents, which the files'
    (path, size, mtime, module name, is package) stand for, as they do for the facts cache."""
    # Every setting (a field added later is in the key too), except where they were read from.
    settings = [(f.name, getattr(config, f.name)) for f in dataclasses.fields(config) if f.name != "source"]
    parts = (RESULT_VERSION, FACTS_VERSION, scanner_digest(), settings, paths, cwd,
             [(s.path, s.reason) for s in skipped], files)
    return hashlib.sha1(repr(parts).encode("utf-8", "surrogateescape")).hexdigest()


class ResultCache:
    """Whole scan results by ``result_key``, one small file each next to the facts cache (the
    ``MAX_RESULTS`` most recent are kept). Like the facts cache, a file that cannot be read is ignored."""

    def __init__(self, enabled: bool) -> None:
        self.folder = user_cache_dir() / f"scan-rng-results-v{RESULT_VERSION}-{FACTS_VERSION}"
        self.enabled = enabled

    def lookup(self, key: str) -> Any:
        """The result stored under ``key`` (the caller checks its type), or None."""
        if not self.enabled:
            return None
        try:
            with open(self.folder / f"{key}.pickle", "rb") as fh:
                return pickle.load(fh)
        except Exception:  # noqa: BLE001 - any unpickling failure means "no cache"
            return None

    def store(self, key: str, result: Any) -> None:
        if not self.enabled:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".result.", suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, self.folder / f"{key}.pickle")
            stored = sorted(self.folder.glob("*.pickle"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
            for old in stored[MAX_RESULTS:]:
                old.unlink(missing_ok=True)
        except OSError:
            pass  # a cache that cannot be written only costs time
