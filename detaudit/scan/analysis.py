"""Cross-module analysis: ``Program``, all scanned modules' facts with name resolution, dynamic
dispatch, the call graph and seeding across them, one layer per module: ``program_names`` (name
resolution, the modules' state), ``program_dispatch`` (loaders, registries, objects' classes),
``program_calls`` (edges, reach, call sites), ``program_seeding`` (what a call seeds). Processes
are built in ``processes``, findings in ``findings``.
"""

from __future__ import annotations

from collections.abc import Callable

from detaudit.scan.program_names import display_name
from detaudit.scan.program_seeding import ProgramSeeding
from detaudit.scan.schema import Facts

__all__ = ["MAX_CANDIDATES_SHOWN", "Program", "display_name"]

MAX_CANDIDATES_SHOWN = 4  # in text output; JSON and SARIF carry every candidate


class Program(ProgramSeeding):
    """All scanned modules' facts, with name resolution, dispatch, calls and seeding across them.

    ``names``: module key -> (dotted import name, root folder), for every file of the scan
    (light ones too); keys that differ from their dotted name are shared names.
    """

    def __init__(self, facts: dict[str, Facts], load_module: Callable[[str], bool] | None = None,
                 extra_strings: set[tuple[str, str]] | None = None,
                 load_mentioning: Callable[[set[str]], None] | None = None,
                 names: dict[str, tuple[str, str]] | None = None) -> None:
        super().__init__(load_module, extra_strings, load_mentioning, names)
        for path, f in facts.items():
            self.add(path, f)

    def add(self, path: str, f: Facts) -> None:
        module = f["module"]
        self._heads.add(module.partition(".")[0])  # module keys: "core.run#2.main" starts with "core"
        self.paths[module] = path
        self.modules[module] = f
        self.functions.update(f["functions"])
        self.classes.update(f["classes"])
        for name in (*f["functions"], *f["classes"]):
            self.module_of[name] = module
        for key, loader, code, argument, line in f["binds"]:
            self.binds.setdefault(key, []).append((loader, code, argument))
            if line:
                self.bind_lines.setdefault((module, line), []).append(key)
            self._bound_names.add(key.rpartition(".")[2])
        for text, attr in f["strings"]:
            self.strings.setdefault(attr, set()).add(text)
        self.registrars.update(f.get("registrars", {}))
        if f["fixtures"]:
            self.fixtures[module] = f["fixtures"]
        self._candidates = {}
        self._mro = {}
        self._canonical = {}
        self._protocols = {}
        self._dispatched = {}
        if self._registered is not None:
            self._register_from(module)
        if self._subclasses is not None:
            self._subclasses_from(module)
        self._overrides = {}
        if self._calls_by_short_name is not None:
            self._index_calls(f["functions"])
        self._callers = {}
