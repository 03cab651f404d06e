"""The scan-rng per-file facts cache, keyed by content hash (a stat check skips re-reading)."""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

from detaudit.scan.facts import FACTS_VERSION

OUTCOME_KINDS = ("facts", "light", "skip")
FACT_FIELDS = {"module": str, "imports": dict, "functions": dict, "classes": dict, "draws": list, "entries": list,
               "hooks": list, "suppress": dict, "strings": list, "binds": list}


def _valid_outcome(value: Any) -> bool:
    if not (isinstance(value, tuple) and len(value) == 2 and value[0] in OUTCOME_KINDS):
        return False
    if value[0] == "facts":
        facts = value[1]
        return isinstance(facts, dict) and facts.get("version") == FACTS_VERSION and all(
            isinstance(facts.get(key), kind) for key, kind in FACT_FIELDS.items())
    if value[0] == "skip":
        return isinstance(value[1], str)
    return value[1] is None or isinstance(value[1], tuple)


class FactsCache:
    """Per-file facts keyed by content hash; a stat (size, mtime) check skips re-reading.

    A cache file that cannot be read, or holds anything but what this version writes, is
    ignored (and rebuilt): a cache only ever costs or saves time.
    """

    def __init__(self, enabled: bool) -> None:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        self.path = base / "detaudit" / f"scan-rng-v{FACTS_VERSION}.pickle"
        self.enabled = enabled
        self.stats: dict[str, tuple[int, int, str]] = {}
        self.facts: dict[str, Any] = {}
        self.sites: dict[str, dict[str, list[tuple[Any, ...]]]] = {}  # digest -> a module's call-site details
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
                self.facts = {k: v for k, v in data["facts"].items() if isinstance(k, str) and _valid_outcome(v)}
                sites = data.get("sites")
                if isinstance(sites, dict):
                    self.sites = {k: v for k, v in sites.items() if isinstance(k, str) and isinstance(v, dict)
                                  and all(isinstance(c, list) for c in v.values())}

    def lookup_stat(self, path: str, st: os.stat_result) -> str | None:
        entry = self.stats.get(path)
        if entry and entry[0] == st.st_size and entry[1] == st.st_mtime_ns:
            return entry[2]
        return None

    def remember(self, path: str, st: os.stat_result, digest: str, facts: Any) -> None:
        self.stats[path] = (st.st_size, st.st_mtime_ns, digest)
        self.facts[digest] = facts
        self.dirty = True

    def digest_of(self, path: str) -> str | None:
        entry = self.stats.get(path)
        return entry[2] if entry else None

    def remember_sites(self, digest: str, sites: dict[str, list[tuple[Any, ...]]]) -> None:
        self.sites[digest] = sites
        self.dirty = True

    def save(self) -> None:
        if not (self.enabled and self.dirty):
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".scan-rng.", suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                # pickle (not marshal or JSON): it memoises the many repeated name strings,
                # which halves the load time of a warm rescan.
                pickle.dump({"stats": self.stats, "facts": self.facts, "sites": self.sites}, fh,
                            protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, self.path)
        except OSError:
            pass  # a cache that cannot be written only costs time
