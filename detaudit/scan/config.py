"""scan-rng settings: ``[tool.detaudit]`` and ``[project.scripts]`` from pyproject.toml."""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from detaudit.errors import InputError

KNOWN_KEYS = ("select", "ignore", "exclude")


@dataclass
class ScanConfig:
    select: tuple[str, ...] = ()  # rule id prefixes to report (empty: all)
    ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()  # path globs, relative to the config's folder or the cwd
    scripts: tuple[str, ...] = ()  # console entry points "pkg.mod:func"
    root: Path = field(default_factory=Path.cwd)
    source: str | None = None
    # Like ruff: a path named on the command line is scanned even when `exclude` matches it,
    # unless force_exclude is set.
    force_exclude: bool = False
    # Verdict of a draw no pipeline process is seen to run: "loaded" (unproven when a pipeline
    # process loads its module and code other than tests names it, else a warning), "error" (every
    # one, strict) or "warning" (none: library trees). docs/scan-rng.md, "Verdicts".
    unknown_process: str = "loaded"
    # pytest tests are processes of their own; by default they are not the pipeline (a draw only
    # tests run is a warning). True: judge them as the pipeline's processes.
    tests_as_pipeline: bool = False

    @classmethod
    def load(cls, path: str | Path | None = None, start: Path | None = None) -> ScanConfig:
        """``[tool.detaudit]`` (and ``[project.scripts]``) from pyproject.toml, searched upward."""
        if path is None:
            here = (start or Path.cwd()).resolve()
            for folder in (here, *here.parents):
                if (folder / "pyproject.toml").is_file():
                    path = folder / "pyproject.toml"
                    break
        if path is None:
            return cls()
        path = Path(path)
        import tomllib  # deferred: a tree with no pyproject.toml above it reads none (~5 ms of every scan's start)

        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(path, f"cannot read config: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise InputError(path, f"invalid TOML: {exc}") from None
        table = _table(_table(doc, "tool", path), "detaudit", path, "[tool]")
        for key, value in table.items():
            if key not in KNOWN_KEYS:
                raise InputError(path, f"[tool.detaudit] {key}: unknown key (known: {', '.join(KNOWN_KEYS)})")
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise InputError(path, f"[tool.detaudit] {key}: must be a list of strings")
        scripts_table = _table(_table(doc, "project", path), "scripts", path, "[project]")
        scripts = tuple(v for v in scripts_table.values() if isinstance(v, str))
        return cls(tuple(table.get("select", ())), tuple(table.get("ignore", ())), tuple(table.get("exclude", ())),
                   scripts, path.parent.resolve(), str(path))

    def wants(self, rule: str) -> bool:
        if self.select and not any(rule.startswith(s) for s in self.select):
            return False
        return not any(rule.startswith(s) for s in self.ignore)

    def excluded(self, path: str | Path, globs: tuple[str, ...] | None = None, resolved: bool = False) -> bool:
        """Whether ``path`` matches one of ``globs`` (default: ``exclude``); ``resolved``: no symlinks in it.
        A string is taken as it is (a rescan tests every file of the tree: no Path made for each)."""
        globs = self.exclude if globs is None else globs
        if not globs:
            return False
        full = os.fspath(path) if resolved and os.path.isabs(path) else str(Path(path).resolve())
        matches = _glob_matcher(globs)
        for base in (str(self.root), os.getcwd()):
            prefix = base.rstrip("/") + "/"
            if not full.startswith(prefix):
                continue
            rel = full[len(prefix):]
            if matches(rel) or matches(rel + "/"):
                return True
        return False

    def excludes_below(self, named: Path) -> tuple[str, ...]:
        """The exclude globs that apply below a path named on the command line.

        Like ruff: a glob that matches the named path itself does not apply to it or below it,
        unless force_exclude is set (then the named path is left out entirely).
        """
        return tuple(g for g in self.exclude if not self.excluded(named, (g,)))


@functools.lru_cache(maxsize=64)
def _glob_matcher(globs: tuple[str, ...]) -> Any:
    """One compiled pattern for all of ``globs`` (what fnmatch.fnmatch does for each, case-sensitive
    as on POSIX): its ``match``."""
    return re.compile("|".join(f"(?:{fnmatch.translate(os.path.normcase(g))})" for g in globs)).match


def _table(doc: dict[str, Any], key: str, path: Path, where: str = "") -> dict[str, Any]:
    value = doc.get(key, {})
    if not isinstance(value, dict):
        name = f"{where} {key}".strip()
        raise InputError(path, f"{name}: must be a table, not {type(value).__name__}")
    return value
