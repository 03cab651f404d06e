"""Which files scan-rng reads, their module names, and their text (PEP 263 encodings honoured)."""

from __future__ import annotations

import io
import os
import tokenize
from dataclasses import dataclass
from pathlib import Path

from detaudit.errors import InputError
from detaudit.scan.config import ScanConfig
from detaudit.scan.entries import is_test_path

MAX_FILE_BYTES = 4 * 1024 * 1024
# Config files that may name a function or method for the code to call (a Hydra `_target_`, a method
# name, a command-line override in a launch script); larger ones are data.
CONFIG_SUFFIXES = (".yaml", ".yml", ".json", ".toml", ".cfg", ".ini", ".sh")
MAX_CONFIG_BYTES = 1024 * 1024
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", "node_modules", ".mypy_cache",
                       ".pytest_cache", ".ruff_cache", "build", "dist", ".eggs"})
# Of those, folders a project may also keep its own launchers in (`deploy/build/run.sh`): their Python
# is a packaging copy, not scanned, but their other files are read for launches, like an excluded folder's.
LAUNCH_DIRS = frozenset({"build", "dist"})


@dataclass
class Skipped:
    path: str
    reason: str


def collect_files(paths: list[str | Path], config: ScanConfig, config_files: list[str] | None = None,
                  launch_files: list[str] | None = None) -> tuple[list[str], list[Skipped]]:
    """Python files under ``paths`` and the folders that could not be read; the config files
    (``CONFIG_SUFFIXES``) found below the named folders are appended to ``config_files``, the docs
    and every other file that is not Python, which may launch a script (excluded folders included),
    to ``launch_files`` (``outside.launch_file_stats`` keeps the text files among them).

    No symlink loops; tool folders and ``exclude`` globs are left out below the named paths.
    A path named here is scanned even when ``exclude`` matches it, unless ``config.force_exclude``.
    Paths are strings (a rescan walks every file of the tree: a Path object each cost more than
    the rest of a cached scan), absolute below a named folder, as named for a named file.
    """
    files: list[str] = []
    skipped: list[Skipped] = []
    seen_dirs: set[tuple[int, int]] = set()
    pruned: list[str] = []  # excluded folders, walked for launch files only

    def unreadable(exc: OSError) -> None:
        skipped.append(Skipped(os.path.relpath(exc.filename or "?"), f"cannot read folder: {exc.strerror}"))

    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise InputError(path, "no such file or directory")
        if config.force_exclude and config.excluded(path):
            continue
        if path.is_file():
            files.append(str(path))
            continue
        globs = config.excludes_below(path)
        for folder, dirs, names in os.walk(path, followlinks=True, onerror=unreadable):
            try:
                st = os.stat(folder)
            except OSError:
                dirs[:] = []
                continue
            if (st.st_dev, st.st_ino) in seen_dirs:  # a symlink loop, or a folder seen already
                dirs[:] = []
                continue
            seen_dirs.add((st.st_dev, st.st_ino))
            if launch_files is not None:
                pruned += [os.path.join(folder, d) for d in sorted(dirs) if d in LAUNCH_DIRS]
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info"))
            real = os.path.realpath(folder)
            join = os.path.join
            for name in sorted(names):
                if name.endswith(".py"):
                    file = join(real, name)
                    if not globs or not config.excluded(file, globs, resolved=True):
                        files.append(file)
                elif config_files is not None and name.endswith(CONFIG_SUFFIXES):
                    file = join(real, name)
                    if not globs or not config.excluded(file, globs, resolved=True):
                        config_files.append(file)
                if launch_files is not None and not name.endswith(".py"):
                    launch_files.append(join(real, name))  # excluded or not: a launch there still runs
            if globs:
                kept = [d for d in dirs if not config.excluded(_resolved(join(real, d)), globs, resolved=True)]
                if launch_files is not None:
                    pruned += [os.path.join(folder, d) for d in dirs if d not in kept]
                dirs[:] = kept
    launch_below = launch_files if launch_files is not None else []
    for folder in pruned:  # only the files that may launch a script, below the excluded folders
        for below, dirs, names in os.walk(folder, followlinks=True):
            try:
                st = os.stat(below)
            except OSError:
                dirs[:] = []
                continue
            if (st.st_dev, st.st_ino) in seen_dirs:
                dirs[:] = []
                continue
            seen_dirs.add((st.st_dev, st.st_ino))
            dirs[:] = sorted(d for d in dirs if (d not in SKIP_DIRS or d in LAUNCH_DIRS) and not d.endswith(".egg-info"))
            real = os.path.realpath(below)
            launch_below.extend(os.path.join(real, n) for n in sorted(names) if not n.endswith(".py"))
    return list(dict.fromkeys(files)), skipped


def _resolved(below: str) -> str:
    """``below`` (an entry of a resolved folder) with its own symlink resolved, as Path.resolve() gives it."""
    return os.path.realpath(below) if os.path.islink(below) else below


_PACKAGE_OF: dict[str, str] = {}  # folder -> its dotted package ('' outside packages)


def _package(folder: str) -> str:
    cached = _PACKAGE_OF.get(folder)
    if cached is None:
        if os.path.exists(os.path.join(folder, "__init__.py")):
            parent = _package(os.path.dirname(folder)) if os.path.dirname(folder) != folder else ""
            name = os.path.basename(folder)
            cached = f"{parent}.{name}" if parent else name
        else:
            cached = ""
        _PACKAGE_OF[folder] = cached
    return cached


def module_name(path: str | Path) -> tuple[str, bool]:
    """Dotted module name from the package folders (those with __init__.py) around ``path``."""
    text = str(path)
    if not os.path.isabs(text):
        text = os.path.realpath(text)
    folder, name = os.path.split(text)
    package = _package(folder)
    if name == "__init__.py":
        return package or os.path.basename(folder), True
    stem = name.removesuffix(".py")
    return (f"{package}.{stem}" if package else stem), False


def module_root(path: str, name: str, is_package: bool) -> str:
    """The folder a module's dotted name starts from (the sys.path entry that imports it by that name)."""
    folder = os.path.dirname(path)
    for _ in range(name.count(".") + (1 if is_package else 0)):
        folder = os.path.dirname(folder)
    return folder


def module_keys(paths: list[str]) -> dict[str, tuple[str, str, bool, str]]:
    """path -> (module key, dotted name, is package, root folder) for absolute ``paths``.

    The key is the dotted name, unique in the scan; files that share a dotted name (folders
    without ``__init__.py``, several projects scanned at once) get ``name#1``, ``name#2``, ...
    in path order, so that none replaces another.
    """
    named = {path: module_name(path) for path in paths}
    groups: dict[str, list[str]] = {}
    for path, (name, _) in named.items():
        groups.setdefault(name, []).append(path)
    out = {}
    for name, group in groups.items():
        for number, path in enumerate(sorted(group), 1):
            is_package = named[path][1]
            key = name if len(group) == 1 else f"{name}#{number}"
            out[path] = (key, name, is_package, module_root(path, name, is_package))
    return out


def test_files(paths: list[str], named: list[str | Path]) -> set[str]:
    """The absolute ``paths`` that are test code, judged from their path from the named path that
    holds them (its own name included): a project scanned from inside a tests/fixtures folder is
    not a test, `scan-rng tests` scans tests."""
    bases = sorted((os.path.realpath(n) for n in named), key=len, reverse=True)
    out = set()
    for path in paths:
        base = next((b for b in bases if path == b or path.startswith(b.rstrip(os.sep) + os.sep)), None)
        relative = os.path.basename(path) if base is None or base == path else os.path.join(
            os.path.basename(base), path[len(base.rstrip(os.sep)) + 1:])
        if is_test_path(relative):
            out.add(path)
    return out


def decode_source(data: bytes) -> str:
    """The text of a Python file: its PEP 263 coding cookie (or BOM) honoured, else UTF-8.

    Raises UnicodeDecodeError (text not in its encoding) or SyntaxError (unknown encoding).
    """
    if b"coding" not in data[:400] and not data.startswith(b"\xef\xbb\xbf"):
        return data.decode("utf-8")
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)
