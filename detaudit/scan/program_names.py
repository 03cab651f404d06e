"""Name resolution across the scanned modules (the first layer of ``analysis.Program``).

Modules are keyed by a name unique in the scan: the dotted name, or, when several scanned files
share one (two projects, folders without ``__init__.py``), the dotted name with ``#N``; an
import of such a name resolves to the file under the importing file's own root folder. Names
resolve through imports, re-exports, folders without ``__init__.py`` (PEP 420 namespace packages)
and base classes. This layer also holds the analysis's state: the facts of every module added.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from detaudit.scan.schema import NO_CLASS, ClassFacts, Facts, FixtureFacts, FunctionFacts

MAX_NAMESPACE_DEPTH = 4  # folders without __init__.py followed above a module's own name
# Methods that library code calls on an object the tree builds (a DataLoader iterates a dataset,
# `with` enters a context manager): building an instance reaches them.
PROTOCOL_METHODS = ("__init__", "__iter__", "__next__", "__getitem__", "__call__", "__enter__", "__exit__",
                    "__aenter__", "__aexit__", "__aiter__", "__anext__")


def display_name(name: str) -> str:
    """A function's or module's name as a reader knows it: without the ``#N`` of a shared module name."""
    if "#" not in name:
        return name
    head, _, rest = name.partition("#")
    return head + rest[len(rest) - len(rest.lstrip("0123456789")):]


class ProgramNames:
    """The modules' facts and name resolution across them.

    ``names``: module key -> (dotted import name, root folder), for every file of the scan
    (light ones too); keys that differ from their dotted name are shared names.
    """

    def __init__(self, load_module: Callable[[str], bool] | None = None,
                 extra_strings: set[tuple[str, str]] | None = None,
                 load_mentioning: Callable[[set[str]], None] | None = None,
                 names: dict[str, tuple[str, str]] | None = None) -> None:
        self.paths: dict[str, str] = {}  # module -> path
        self.modules: dict[str, Facts] = {}
        self.functions: dict[str, FunctionFacts] = {}
        self.classes: dict[str, ClassFacts] = {}
        self.module_of: dict[str, str] = {}  # function or class -> module
        self.binds: dict[str, list[tuple[str, str, str]]] = {}  # bound name -> [(call target, code, argument)]
        self._bound_names: set[str] = set()  # the last part of every bound name
        # (module, line) -> the keys a call's result on that line is bound to (modes.py: where an
        # instance ends up)
        self.bind_lines: dict[tuple[str, int], list[str]] = {}
        self.strings: dict[str, set[str]] = {"": set()}  # attribute ('' none) -> dotted strings assigned to it
        for text, attr in extra_strings or ():
            self.strings.setdefault(attr, set()).add(text)
        self.fixtures: dict[str, list[FixtureFacts]] = {}  # module -> its pytest fixtures
        self.registrars: dict[str, str] = {}  # function that registers what it is given -> the dict it fills
        self._registered: dict[str, list[str]] | None = None  # see registered
        self._registrar_tables: dict[str, str | None] = {}  # registrar -> its dict as a module key + name
        self._subclasses: dict[str, list[str]] | None = None  # see overrides
        self._overrides: dict[tuple[str, str], list[str]] = {}
        self.load_module = load_module
        # Parses the skipped files whose text mentions one of these names (callers of a function).
        self.load_mentioning = load_mentioning
        self.root_of: dict[str, str] = {}  # module key -> its root folder
        self.shared: dict[str, list[str]] = {}  # dotted name shared by several files -> their module keys
        for key, (dotted_name, root) in sorted((names or {}).items()):
            self.root_of[key] = root
            if key != dotted_name:
                self.shared.setdefault(dotted_name, []).append(key)
        self.unresolved_shared: set[tuple[str, str]] = set()  # (shared name, root of the importer)
        self._names = names or {}
        # First parts of every name that can lead into the tree: module names, and the folders a
        # namespace import may start from. A call whose name starts otherwise is a library's.
        self._heads: set[str] = set()
        for key, (dotted_name, module_root) in self._names.items():
            self._heads.add(dotted_name.partition(".")[0])
            self._heads.add(key.partition(".")[0])
            self._heads.update(module_root.strip(os.sep).split(os.sep)[-MAX_NAMESPACE_DEPTH:])
        self._namespace: dict[str, list[str]] | None = None  # see _namespace_module
        self._module_keys: dict[tuple[str, str | None], str | None] = {}  # see module_key
        self._mro: dict[str, list[str]] = {}
        self._canonical: dict[tuple[str, str | None], str | None] = {}
        self._protocols: dict[str, list[str]] = {}
        self._dispatched: dict[tuple[str, str | None], list[tuple[list[str], str]]] = {}
        # short name of a callee -> the functions that call it (built on first use, then kept up to date)
        self._calls_by_short_name: dict[str, set[str]] | None = None
        self._summaries: dict[str, frozenset[str]] = {}  # see _summary
        self._seeds_given: dict[tuple[str, tuple[tuple[str, Any], ...]], frozenset[str]] = {}  # see seeds_given
        self._seeds_active: set[tuple[str, tuple[tuple[str, Any], ...]]] = set()
        self.test_modules: set[str] = set()  # modules of test code
        self._test_draws: dict[str, frozenset[str]] = {}  # see reaches_draw
        self._callees_within: dict[str, list[tuple[str, str]]] = {}
        self._within_heads: set[str] | None = None
        self._drawing: set[str] | None = None
        self._drawing_at_import: set[str] = set()
        self._callees: dict[str, list[tuple[str, str]]] = {}
        self._candidates: dict[tuple[str, str, str | None], list[str]] = {}
        self._callers: dict[str, list[tuple[str, tuple[Any, ...]]]] = {}
        self._edge_guards: dict[tuple[str, str], tuple[list[str], int]] = {}  # (conditions, line of a call)
        self._guarded_callers: set[str] = set()  # callers whose _edge_guards are known
        # id of a process's reach -> its first unresolved seed-like call (see unresolved_seeding)
        self._unresolved_seeding: dict[tuple[int, str], tuple[str, str, int] | None] = {}

    def _index_calls(self, functions: dict[str, FunctionFacts]) -> None:
        """Add ``functions`` to the index: the short name of each callee -> the functions that call it."""
        index = self._calls_by_short_name
        assert index is not None
        for caller, info in functions.items():
            for name in info["calls"]:
                index.setdefault(name.rpartition(".")[2], set()).add(caller)

    def root(self, name: str) -> str | None:
        """The root folder of the module that holds function or class ``name`` (or of module ``name``)."""
        return self.root_of.get(self.module_of.get(name, name))

    def _module(self, dotted_name: str, root: str | None, load: bool) -> str | None:
        """The module key a dotted module name denotes, seen from a file under ``root``, or None."""
        if dotted_name in self.modules:
            return dotted_name
        keys = self.shared.get(dotted_name)
        if keys is not None:
            mine = [k for k in keys if self.root_of.get(k) == root]
            if len(mine) != 1:
                self.unresolved_shared.add((dotted_name, root or ""))
                return None
            key = mine[0]
            if key in self.modules or (load and self.load_module is not None and self.load_module(key)):
                return key
            return None
        if load and self.load_module is not None and self.load_module(dotted_name):
            return dotted_name if dotted_name in self.modules else None
        if dotted_name in self.root_of:
            return None  # a file the prefilter set aside that could not be added
        return self._namespace_module(dotted_name, root, load)

    def _namespace_module(self, dotted_name: str, root: str | None, load: bool) -> str | None:
        """A module imported through folders without ``__init__.py`` (PEP 420 namespace packages):
        ``flow_grpo.diffusers_patch.sd3`` names the file whose own dotted name is ``sd3`` under the
        folders flow_grpo/diffusers_patch. Several such files: the one under ``root``, else none."""
        if self._namespace is None:
            self._namespace = {}
            for key, (name, module_root) in self._names.items():
                folders = module_root.strip(os.sep).split(os.sep)
                for depth in range(1, min(len(folders), MAX_NAMESPACE_DEPTH) + 1):
                    alias = ".".join([*folders[-depth:], name])
                    self._namespace.setdefault(alias, []).append(key)
        keys = self._namespace.get(dotted_name)
        if not keys:
            return None
        if len(keys) > 1:
            keys = [k for k in keys if self.root_of.get(k) == root]
            if len(keys) != 1:
                return None
        key = keys[0]
        if key in self.modules or (load and self.load_module is not None and self.load_module(key)):
            return key
        return None

    def may_name_module(self, name: str) -> bool:
        """Whether a dotted name can lead into the tree (its first part is one a scanned module's
        name, or a namespace import of one, starts with)."""
        return name.partition(".")[0] in self._heads

    def dotted_name(self, module: str) -> str:
        """The dotted import name of module key ``module``."""
        return self._names.get(module, (module, ""))[0]

    def module_key(self, dotted_name: str, root: str | None) -> str | None:
        """The key of the scanned file a dotted module name denotes from a file under ``root``,
        whether or not its facts joined the analysis (None: no scanned file, or several)."""
        key = (dotted_name, root)
        if key in self._module_keys:
            return self._module_keys[key]
        found: str | None = None
        if self._names.get(dotted_name, ("", ""))[0] == dotted_name:
            found = dotted_name
        elif dotted_name in self.shared:
            mine = [k for k in self.shared[dotted_name] if self.root_of.get(k) == root]
            found = mine[0] if len(mine) == 1 else None
        else:
            if self._namespace is None:
                self._namespace_module("", None, False)  # builds the map
            keys = (self._namespace or {}).get(dotted_name, [])
            if len(keys) > 1:
                keys = [k for k in keys if self.root_of.get(k) == root]
            found = keys[0] if len(keys) == 1 else None
        self._module_keys[key] = found
        return found

    def canonical(self, name: str, depth: int = 0, load: bool = True, root: str | None = None) -> str | None:
        """The function or class a qualified name denotes (through re-exports and base classes), or None.

        ``load``: parse a skipped module on the way when the name leads into it; ``root``: the
        root folder of the file the name is written in (it picks among files sharing a name).
        """
        if name in self.functions or name in self.classes:
            return name
        if depth > 8:
            return None
        if depth == 0 and load:  # the same names (torch.tensor, self.x.append) are asked for again and again
            key = (name, root)
            if key in self._canonical:
                return self._canonical[key]
            found = self._canonical[key] = self._resolve(name, depth, load, root)
            return found
        return self._resolve(name, depth, load, root)

    def _resolve(self, name: str, depth: int, load: bool, root: str | None) -> str | None:
        parts = name.split(".")
        for i in range(len(parts) - 1, 0, -1):
            prefix = ".".join(parts[:i])
            if prefix in self.classes:  # Cls.attr: look in the base classes
                found = self.lookup_attr(prefix, parts[i], depth + 1)
                return found if i == len(parts) - 1 else None
            module = self._module(prefix, root, load)
            if module is None:
                continue
            if module != prefix:  # a shared name: the importer's own file
                return self.canonical(".".join([module, *parts[i:]]), depth + 1, load, root)
            if name in self.functions or name in self.classes:
                return name
            target = self.modules[module]["imports"].get(parts[i])
            if target is not None and target != name:
                rest = parts[i + 1 :]
                return self.canonical(".".join([target, *rest]), depth + 1, load, self.root_of.get(module, root))
            return None
        return None

    def mro(self, cls: str, depth: int = 0) -> list[str]:
        """``cls`` and its base classes found in the tree, depth first (close enough to C3 here)."""
        cached = self._mro.get(cls)
        if cached is not None:
            return cached
        out = [cls]
        if depth > 16:
            return out
        for base in self.classes.get(cls, NO_CLASS).get("bases", ()):
            target = self.canonical(base, depth + 1, root=self.root(cls))
            if target in self.classes and target not in out:
                out += [c for c in self.mro(target, depth + 1) if c not in out]
        self._mro[cls] = out
        return out

    def lookup_attr(self, cls: str, attr: str, depth: int = 0, skip_own: bool = False) -> str | None:
        for klass in self.mro(cls, depth)[1 if skip_own else 0:]:
            name = f"{klass}.{attr}"
            if name in self.functions:
                return name
        return None

    def _protocol(self, cls: str) -> list[str]:
        """The methods that building an instance of ``cls`` reaches (see PROTOCOL_METHODS)."""
        known = self._protocols.get(cls)
        if known is None:
            known = self._protocols[cls] = [m for m in (self.lookup_attr(cls, name) for name in PROTOCOL_METHODS) if m]
        return known

    def class_methods(self, cls: str) -> list[str]:
        """Every method an instance has, inherited ones included (the nearest definition wins)."""
        found: dict[str, str] = {}
        for klass in self.mro(cls):
            for method in self.classes[klass]["methods"]:
                found.setdefault(method.rpartition(".")[2], method)
        return sorted(found.values())

    def subclasses(self, cls: str) -> list[str]:
        """The classes of the tree that derive from ``cls``, directly or not."""
        if self._subclasses is None:
            self._subclasses = {}
            for module in list(self.modules):  # a module added meanwhile adds its own (see add)
                self._subclasses_from(module)
        return list(self._subclasses.get(cls, ()))

    def overrides(self, cls: str, attr: str) -> list[str]:
        """The methods named ``attr`` that subclasses of ``cls`` in the tree define: a call ``self.attr()``
        in ``cls`` runs one of them when ``self`` is an instance of that subclass."""
        key = (cls, attr)
        known = self._overrides.get(key)
        if known is None:
            if self._subclasses is None:
                self._subclasses = {}
                for module in list(self.modules):  # a module added meanwhile adds its own (see add)
                    self._subclasses_from(module)
            known = self._overrides[key] = sorted(f"{sub}.{attr}" for sub in self._subclasses.get(cls, ())
                                                  if f"{sub}.{attr}" in self.functions)
        return known

    def _subclasses_from(self, module: str) -> None:
        subclasses = self._subclasses
        assert subclasses is not None
        for klass in self.modules[module]["classes"]:
            for base in self.mro(klass)[1:]:
                if klass not in subclasses.setdefault(base, []):
                    subclasses[base].append(klass)
