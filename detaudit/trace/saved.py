"""Saved traces: a folder with ``meta.json`` (schema, card, mode, command, machine) and a run's
``trace/*.jsonl``, written to a temporary sibling and renamed into place. ``detaudit trace
--save`` writes one anywhere; ``detaudit record --trace`` writes one next to the standard
(``<standard stem>.trace/``) so that ``verify`` can name the first draw or module that differs
from the standard's run.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detaudit.env.probes.envprobe import cpu_info
from detaudit.errors import InputError, UsageError
from detaudit.fileio import read_bounded_text, replace_folder, umask
from detaudit.trace import MODES

if TYPE_CHECKING:
    from detaudit.trace.files import RunTrace

# The trace reader (``trace.files``, with the trace model: ~9 ms) is imported by ``read_saved``: a record
# or verify of a standard that carries no trace only asks where a trace would be.

SAVED_SCHEMA = "detaudit/trace/1"
MAX_META_BYTES = 1 << 20


def trace_meta(card: str, mode: str, command: list[str], packages: dict[str, str] | None = None,
               **extra: Any) -> dict[str, Any]:
    """The ``meta.json`` of a saved trace: what ran, in which mode, on which machine, and (when
    known) the environment's package versions."""
    meta = {"schema": SAVED_SCHEMA, "card": card, "mode": mode, "command": command, "machine": machine(), **extra}
    if packages:
        meta["packages"] = dict(sorted(packages.items()))
    return meta


def standard_trace_dir(standard_path: Path) -> Path:
    """Where a standard's trace lives: ``x.cpu-intel.json`` -> ``x.cpu-intel.trace/``."""
    return standard_path.with_name(standard_path.stem + ".trace")


def carries_trace(standard_path: Path) -> bool:
    """Whether a standard carries a saved trace: anything named ``meta.json`` in its trace
    folder (a device or a broken link there is read, and refused, rather than passed over)."""
    meta = standard_trace_dir(standard_path) / "meta.json"
    return meta.exists() or meta.is_symlink()


def check_saved_card(meta: dict[str, Any], card: str, directory: Path) -> None:
    """Raise a UsageError when a saved trace names a card other than ``card`` (``--against``)."""
    saved = meta.get("card")
    if saved is not None and saved != card:
        raise UsageError(f"a trace of card {saved!r}, not of {card!r}: compare traces of one card", directory)


def read_saved(directory: str | Path) -> tuple[dict[str, Any], RunTrace]:
    """A trace saved with ``--save`` (or the one a standard carries): its meta and its
    processes. The trace carries the card and mode its meta names; a meta that disagrees with
    the ledgers makes the trace incomplete."""
    from detaudit.trace.files import read_trace, regular_file

    directory = Path(directory)
    meta_path = directory / "meta.json"
    if not meta_path.exists() and not meta_path.is_symlink():
        raise InputError(meta_path, "not a saved trace (no meta.json; save one with `detaudit trace CARD --save DIR`)")
    regular_file(meta_path, "a saved trace's meta.json", MAX_META_BYTES)
    text = read_bounded_text(meta_path, "saved trace's meta.json", MAX_META_BYTES)
    try:
        meta = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InputError(meta_path, f"cannot read saved trace: {exc}") from None
    if not isinstance(meta, dict) or meta.get("schema") != SAVED_SCHEMA:
        raise InputError(meta_path, f"not a saved trace (schema is not {SAVED_SCHEMA})")
    card, mode = meta.get("card"), meta.get("mode")
    if card is not None and type(card) is not str:
        raise InputError(meta_path, f"not a saved trace ('card' is not a string: {card!r})"[:300])
    if mode not in MODES:
        raise InputError(meta_path, f"not a saved trace ('mode' is not one of {', '.join(MODES)}: {mode!r})"[:300])
    run = read_trace(directory / "trace", card=card)
    run.packages = _saved_packages(meta, directory, meta_path)
    if run.processes and run.mode is not None and run.mode != mode:
        run.errors.append(f"its meta.json says mode {mode}, its ledgers {run.mode}")
    if run.mode is None:
        run.mode = mode if not run.processes else None
    return meta, run


def _saved_packages(meta: dict[str, Any], directory: Path, meta_path: Path) -> dict[str, str] | None:
    """The package versions of a saved trace's environment: its meta's, else (a trace saved by
    ``record --trace`` before meta.json carried them) those of the standard it was saved with."""
    packages = meta.get("packages")
    if packages is not None:
        if not isinstance(packages, dict) or not all(type(k) is str and type(v) is str for k, v in packages.items()):
            raise InputError(meta_path, "not a saved trace ('packages' is not a table of versions)")
        return packages
    standard = meta.get("standard")
    if type(standard) is not str or "/" in standard or not standard.endswith(".json"):
        return None
    path = directory.parent / standard
    try:
        doc = json.loads(read_bounded_text(path, "a standard", 64 << 20))
    except (InputError, ValueError, RecursionError):
        return None
    found = doc.get("runner", {}).get("packages") if isinstance(doc, dict) and isinstance(doc.get("runner"), dict) \
        else None
    return found if isinstance(found, dict) and all(type(v) is str for v in found.values()) else None


def check_save_destination(destination: Path) -> None:
    """Raise a UsageError unless ``--save`` may write a new saved trace at ``destination``:
    nothing there, or an empty folder (never a symlink, whose target would be written)."""
    if destination.is_symlink():
        raise UsageError("is a symbolic link; give --save a new folder", destination)
    if destination.exists() and (not destination.is_dir() or any(destination.iterdir())):
        raise UsageError("exists; give --save a new folder", destination)


def machine() -> dict[str, str]:
    """Enough to tell two machines apart in a saved trace."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    cpu = cpu_info(text, platform.machine())["model_name"]
    return {"host": platform.node(), "machine": platform.machine(), "cpu": cpu, "python": platform.python_version()}


def save_trace(trace_dir: Path, destination: Path, meta: dict[str, Any]) -> Path:
    check_save_destination(destination)
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(destination, f"cannot create {destination.parent}: {exc.strerror or exc}") from None
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
    except OSError as exc:
        raise InputError(destination, f"cannot write the saved trace: {exc.strerror or exc}") from None
    try:
        shutil.copytree(trace_dir, staging / "trace")
        (staging / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.chmod(staging, 0o777 & ~umask())
        if destination.is_dir() and not destination.is_symlink():
            destination.rmdir()  # the empty folder --save was given
        os.rename(staging, destination)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, (OSError, shutil.Error)):
            raise InputError(destination, f"cannot write the saved trace: {getattr(exc, 'strerror', None) or exc}") \
                from None
        raise
    return destination


def check_replaceable(destination: Path) -> None:
    """Raise a UsageError unless a saved trace may be written at ``destination``: nothing is
    there, or a saved trace is (which it would replace). ``record`` asks before writing the
    standard, so that a folder in the way never leaves a standard without its trace."""
    if destination.is_symlink() or (destination.exists() and not (destination / "meta.json").is_file()):
        raise UsageError("exists and is not a saved trace; move it away", destination)


def replace_saved_trace(trace_dir: Path, destination: Path, meta: dict[str, Any]) -> Path:
    """Like ``save_trace``, but an existing saved trace at ``destination`` is replaced (the
    new one is complete before the old one goes)."""
    if not destination.exists():
        return save_trace(trace_dir, destination, meta)
    check_replaceable(destination)
    staging = destination.with_name(f".{destination.name}.new")
    shutil.rmtree(staging, ignore_errors=True)
    save_trace(trace_dir, staging, meta)
    replace_folder(staging, destination)
    return destination
