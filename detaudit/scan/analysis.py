"""Cross-module analysis: names across modules, who calls what, and what each root reaches.

Calls are followed through imports, methods inherited from base classes in any scanned module,
``super()``, objects whose class the tree shows (``x = Cls(...)``, ``self.x = make_x()`` with
``make_x`` returning ``Cls(...)``, then ``x.m()``), and dynamic dispatch: a value returned by a
loader (``importlib.import_module`` + ``getattr``, ``pydoc.locate``, Hydra) and then called
reaches the tree's dotted-path strings that name a function or class and that are assigned to
the attribute (or option) the loader's argument names, or every such string not assigned to any
attribute when none is (a stated over-approximation). Processes are built in ``processes``,
findings in ``findings``.

Modules are keyed by a name unique in the scan: the dotted name, or, when several scanned files
share one (two projects, folders without ``__init__.py``), the dotted name with ``#N``; an
import of such a name resolves to the file under the importing file's own root folder.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from typing import Any

from detaudit.scan import conditions as C
from detaudit.scan.facts import LOCAL, MODULE_BODY, SUPER, TABLE
from detaudit.scan.rules import BUILTIN_LOADERS, CALLING_LOADERS, seed_like_families

_DRAW = "<draw>"  # in a summary: the function or what it reaches holds a draw
_DRAWS = frozenset({_DRAW})
_NO_MARK: frozenset[str] = frozenset()
_MARKS = _DRAWS
MAX_NAMESPACE_DEPTH = 4  # folders without __init__.py followed above a module's own name
MAX_SEED_DEPTH = 32  # calls followed with their arguments (seeds_given) before falling back to seeds
MAX_CANDIDATES_SHOWN = 4  # in text output; JSON and SARIF carry every candidate
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


class Program:
    """All scanned modules' facts, with name resolution across them.

    ``names``: module key -> (dotted import name, root folder), for every file of the scan
    (light ones too); keys that differ from their dotted name are shared names.
    """

    def __init__(self, facts: dict[str, dict[str, Any]], load_module: Callable[[str], bool] | None = None,
                 extra_strings: set[tuple[str, str]] | None = None,
                 load_mentioning: Callable[[set[str]], None] | None = None,
                 names: dict[str, tuple[str, str]] | None = None) -> None:
        self.paths: dict[str, str] = {}  # module -> path
        self.modules: dict[str, dict[str, Any]] = {}
        self.functions: dict[str, dict[str, Any]] = {}
        self.classes: dict[str, dict[str, Any]] = {}
        self.module_of: dict[str, str] = {}  # function or class -> module
        self.binds: dict[str, list[tuple[str, str, str]]] = {}  # bound name -> [(call target, code, argument)]
        self._bound_names: set[str] = set()  # the last part of every bound name
        # (module, line) -> the keys a call's result on that line is bound to (modes.py: where an
        # instance ends up)
        self.bind_lines: dict[tuple[str, int], list[str]] = {}
        self.strings: dict[str, set[str]] = {"": set()}  # attribute ('' none) -> dotted strings assigned to it
        for text, attr in extra_strings or ():
            self.strings.setdefault(attr, set()).add(text)
        self.fixtures: dict[str, list[dict[str, Any]]] = {}  # module -> its pytest fixtures
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
        for path, f in facts.items():
            self.add(path, f)
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

    def add(self, path: str, f: dict[str, Any]) -> None:
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

    def _index_calls(self, functions: dict[str, dict[str, Any]]) -> None:
        """Add ``functions`` to the index: the short name of each callee -> the functions that call it."""
        index = self._calls_by_short_name
        assert index is not None
        for caller, info in functions.items():
            for name in info["calls"]:
                index.setdefault(name.rpartition(".")[2], set()).add(caller)

    # -- names ----------------------------------------------------------------------------

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
        for base in self.classes.get(cls, {}).get("bases", ()):
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

    # -- calls ----------------------------------------------------------------------------

    def is_loader(self, name: str, depth: int = 0, root: str | None = None) -> bool:
        if name in BUILTIN_LOADERS:
            return True
        target = self.canonical(name, root=root)
        info = self.functions.get(target) if target else None
        if target is None or info is None or depth > 4:
            return False
        return info.get("loader", False) or any(self.is_loader(r, depth + 1, self.root(target))
                                                for r in info.get("returns", ()) if r != target)

    def candidates(self, argument: str = "", attr: str = "", root: str | None = None) -> list[str]:
        """Functions and classes that dotted-path strings of the tree name, for a loader whose argument
        names ``argument`` ('=pkg.mod.fn': that string only; '[pkg.mod.TABLE': the dotted strings of
        that dict; an attribute: the strings assigned to it; else, or when the dict holds none, every
        string assigned to none). ``attr``: the strings name modules, ``attr`` is taken from each."""
        key = (argument, attr, root)
        cached = self._candidates.get(key)
        if cached is not None:
            return cached
        texts: set[str] = set()
        if argument.startswith("="):
            texts = {argument[1:]}
        elif argument.startswith("["):  # MODULES[key]: the dotted strings of that dict, when the tree shows them
            owner, _, table = argument[1:].rpartition(".")
            module = self._module(owner, root, True)
            if module is not None:
                texts = set(self.modules[module].get("string_tables", {}).get(table, ()))
            if not texts:
                texts = self.strings.get("", set())
        else:
            texts = self.strings.get(argument, set()) if argument else set()
            if not texts:
                texts = self.strings.get("", set())
        out = set()
        for text in texts:
            name = text.replace(":", ".")
            if attr:
                if self._module(name, root, True) is None:
                    continue
                name = f"{self._module(name, root, True)}.{attr}"
            target = self.canonical(name, root=root)
            if target is not None:
                out.add(target)
        result = sorted(out)
        self._candidates[key] = result
        return result

    def _bound(self, owner: str) -> list[tuple[str, str, str]]:
        """What ``owner`` (a bound name, or ``Cls.x``) was bound to, here or in a base class of ``Cls``."""
        found = list(self.binds.get(owner, ()))
        cls, _, attr = owner.rpartition(".")
        if cls in self.classes:
            for klass in self.mro(cls)[1:]:
                found += self.binds.get(f"{klass}.{attr}", ())
        return found

    def instance_classes(self, made_by: str, root: str | None, depth: int = 0) -> list[str]:
        """Classes of the tree whose instance a call of ``made_by`` returns: the class itself, or what
        a factory function of the tree returns (``return Cls(...)``)."""
        target = self.canonical(made_by, root=root)
        if target is None or depth > 3:
            return []
        if target in self.classes:
            return [target]
        out: list[str] = []
        for made in self.functions[target].get("makes", ()):
            if made.endswith(TABLE):  # return REGISTRY[key](...)
                out += [c for c, _ in self.table_values(made, self.root(target)) if c in self.classes and c not in out]
            else:
                out += [c for c in self.instance_classes(made, self.root(target), depth + 1) if c not in out]
        return out

    def yielded(self, function: str, root: str | None) -> list[str]:
        """What calling the value ``function`` returns can run, when it returns an entry of a
        registry (``return REGISTRY[name]``): the registry's functions, and its classes' ``__init__``."""
        target = self.canonical(function, root=root)
        info = self.functions.get(target) if target else None
        if target is None or not info or not info.get("yields"):
            return []
        out: list[str] = []
        for value in info["yields"]:
            pairs = self.table_values(value, self.root(target)) if value.endswith(TABLE) else [(value, self.root(target))]
            for name, value_root in pairs:
                found = self.canonical(name, root=value_root)
                if found in self.classes:
                    found = self.lookup_attr(found, "__init__")
                if found and found not in out:
                    out.append(found)
        return out

    def table_values(self, table: str, root: str | None) -> list[tuple[str, str | None]]:
        """(name, root folder it is written under) of each value of a module-level dict ``table``
        (``pkg.mod.LOSSES<table>``): the functions and classes of its dict literal, and those a
        registering decorator of the tree adds to it (``@register_loss("x")`` storing into it)."""
        owner, _, name = table[: -len(TABLE)].rpartition(".")
        module = self._module(owner, root, True)
        if module is None:
            return []
        module_root = self.root_of.get(module, root)
        out = [(value, module_root) for value in self.modules[module].get("tables", {}).get(name, ())]
        out += [(value, self.root(value)) for value in self.registered().get(f"{module}.{name}", ())]
        return out

    def registered(self) -> dict[str, list[str]]:
        """Dict (``module key.NAME``) -> the functions and classes that registering decorators add to it."""
        if self._registered is None:
            self._registered = {}
            for module in list(self.modules):  # a module added meanwhile adds its own (see add)
                self._register_from(module)
        return self._registered

    def _register_from(self, module: str) -> None:
        registered, tables = self._registered, self._registrar_tables
        assert registered is not None
        facts, root = self.modules[module], self.root_of.get(module)
        for kind in ("functions", "classes"):
            for name, info in facts[kind].items():
                for decorator in info.get("decorators", ()):
                    registrar = self.canonical(decorator, root=root) if decorator != "?" else None
                    if registrar not in self.registrars:
                        continue
                    if registrar not in tables:
                        owner, _, table = self.registrars[registrar].rpartition(".")
                        key = self._module(owner, self.root(registrar), True)
                        tables[registrar] = f"{key}.{table}" if key else None
                    table_key = tables[registrar]
                    if table_key and name not in registered.get(table_key, ()):
                        registered.setdefault(table_key, []).append(name)

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

    def _dispatch(self, key: str, function: str, root: str | None) -> list[tuple[list[str], str]]:
        """(targets, how) for a call of a bound value: a loaded function (how: the loader call) or
        a method of an object whose class the tree shows (how: '')."""
        owner_key, _, last = key.rpartition(".")
        if last not in self._bound_names and owner_key.rpartition(".")[2] not in self._bound_names:
            return []  # nothing of that name is bound anywhere
        cached = self._dispatched.get((key, root))
        if cached is None:
            cached = self._dispatched[(key, root)] = self._dispatch_uncached(key, function, root)
        return cached

    def _dispatch_uncached(self, key: str, function: str, root: str | None) -> list[tuple[list[str], str]]:
        keys = [key]
        _, sep, rest = key.partition(LOCAL)
        if sep:  # a local name may be a module-level one
            keys.append(f"{self.module_of.get(function, '')}.{rest}")
        cls, _, attr = key.rpartition(".")
        if cls in self.classes:  # self.fn bound in a base class
            keys += [f"{klass}.{attr}" for klass in self.mro(cls)[1:]]
        found: list[tuple[list[str], str]] = []
        for candidate in keys:
            owner, _, method = candidate.rpartition(".")
            for bound, attr_part, binds in ((candidate, "", self.binds.get(candidate, ())),
                                            (owner, method, self._bound(owner))):
                for loader, code, argument in binds:
                    if attr_part and loader == "importlib.import_module":
                        targets = self.candidates(argument, attr_part, root)
                    elif not attr_part and loader != "importlib.import_module" and self.is_loader(loader, root=root):
                        targets = self.candidates(argument, "", root)
                    elif not attr_part and self.yielded(loader, root):  # fn = get_loss(name): a registry's values
                        targets = self.yielded(loader, root)
                        code = ""
                    else:
                        methods = [attr_part] if attr_part else ["__call__", "forward"]
                        targets = []
                        for klass in self.instance_classes(loader, self.root(bound) or root):
                            target = next((t for t in (self.lookup_attr(klass, m) for m in methods) if t), None)
                            if target is not None and target not in targets:
                                targets.append(target)
                        code = ""
                    if targets:
                        found.append((targets, code))
            if found:
                return found
        return found

    def callees(self, function: str) -> list[tuple[str, str]]:
        """(callee, how a dynamic call reached it or '') for each call ``function`` makes."""
        cached = self._callees.get(function)
        if cached is not None:
            return cached
        out: list[tuple[str, str]] = []
        info = self.functions.get(function)
        if info:
            root = self.root(function)
            for name in info["calls"]:
                self._edge(function, name, out, root)
        self._callees[function] = out
        return out

    def callees_within(self, function: str, within: set[str]) -> list[tuple[str, str]]:
        """The callees of ``function`` in the modules ``within`` (one set per Program: the test
        modules), found without resolving the calls that name anything else."""
        cached = self._callees_within.get(function)
        if cached is not None:
            return cached
        heads = self._within_heads
        if heads is None:
            heads = self._within_heads = {m.partition(".")[0] for m in within}
        out: list[tuple[str, str]] = []
        info = self.functions.get(function)
        if info:
            root = self.root(function)
            for name in info["calls"]:
                if name.partition(".")[0] in heads:
                    self._edge(function, name, out, root)
        out = [e for e in out if self.module_of.get(e[0]) in within]
        self._callees_within[function] = out
        return out

    def call_targets(self, function: str, index: int) -> list[str]:
        """The functions the ``index``-th call of ``function`` reaches."""
        out: list[tuple[str, str]] = []
        self._edge(function, self.functions[function]["calls"][index], out, self.root(function))
        return [callee for callee, _ in out]

    def edge_guards(self, caller: str, callee: str) -> tuple[list[str], int]:
        """The `if` conditions in ``caller`` that hold at every call it makes to ``callee``, and the
        line of such a call (0 when there is no condition)."""
        if caller not in self._guarded_callers:
            self._guarded_callers.add(caller)
            info = self.functions.get(caller) or {}
            guarded = {index: (conditions, line) for index, conditions, line in info.get("guarded_calls", ())}
            for index in range(len(info.get("calls", ()))):
                conditions, line = guarded.get(index, ([], 0))
                for target in self.call_targets(caller, index):
                    key = (caller, target)
                    # several calls of one callee: only conditions that hold at every one of them
                    known = self._edge_guards.get(key)
                    self._edge_guards[key] = (conditions, line) if known is None else (
                        [c for c in known[0] if c in conditions], known[1])
        return self._edge_guards.get((caller, callee), ([], 0))

    def _edge(self, function: str, name: str, out: list[tuple[str, str]], root: str | None) -> None:
        """Append the callees (and how dynamic dispatch reached them) of one call ``name`` in ``function``
        (a file under ``root``)."""
        if name.partition(".")[0] not in self._heads and name not in CALLING_LOADERS:
            return  # torch.tensor, os.path.join: not the tree's
        if SUPER in name:
            cls, _, attr = name.partition(SUPER)
            target = self.lookup_attr(cls, attr, skip_own=True)
            if target is not None:
                out.append((target, ""))
            return
        if name.endswith(TABLE):  # REGISTRY[key](...) with REGISTRY a dict of another module, or a registry
            for value, value_root in self.table_values(name, root):
                self._edge(function, value, out, value_root)
            return
        target = self.canonical(name, root=root) if LOCAL not in name and "@" not in name else None
        if target is not None:
            if target in self.classes:
                out.extend((method, "") for method in self._protocol(target))
            else:
                out.append((target, ""))
                owner, _, attr = name.rpartition(".")
                if owner in self.classes:  # self.m(): what a subclass defines for m runs when self is one
                    out.extend((method, "") for method in self.overrides(owner, attr))
            return
        if name in CALLING_LOADERS:
            argument = "_target_" if self.strings.get("_target_") else ""
            dispatched = [(self.candidates(argument, "", root), f"{name}(...)")]
        else:
            dispatched = self._dispatch(name, function, root)
        for targets, code in dispatched:
            via = f"reached via {code}: candidates {', '.join(display_name(t) for t in targets)}" if code else ""
            for target in targets:
                out.append((self.lookup_attr(target, "__init__") or target if target in self.classes else target, via))

    def seeds(self, function: str) -> frozenset[str]:
        """RNG families a call of ``function`` seeds, directly or through callees."""
        return self._summary(function) - _MARKS

    def seeds_given(self, function: str, env: dict[str, Any] | None = None) -> frozenset[str]:
        """RNG families a call of ``function`` seeds when its parameters have the values ``env``
        gives (the others unknown): ``seeds`` less the seeding that a condition on the parameters
        switches off for certain (``if seed_rngs:``, ``enable(seed, seed_rngs=not skip)``), with the
        constants each call passes carried into its callee. A condition the scan cannot decide
        keeps the seeding (as ``seeds`` does)."""
        if not self.seeds(function):
            return _NO_MARK
        key = (function, tuple(sorted(env.items())) if env else ())
        known = self._seeds_given.get(key)
        if known is not None:
            return known
        if key in self._seeds_active or len(self._seeds_active) > MAX_SEED_DEPTH:
            return self.seeds(function)  # a cycle, or a long chain: what it may seed
        self._seeds_active.add(key)
        families: set[str] = set()
        for index in range(len(self.functions.get(function, {}).get("calls", ()))):
            families |= self.call_seeds(function, index, env or {})
        self._seeds_active.discard(key)
        result = self._seeds_given[key] = frozenset(families)
        return result

    def call_seeds(self, function: str, index: int, env: dict[str, Any]) -> frozenset[str]:
        """RNG families the ``index``-th call of ``function`` seeds, its parameters as ``env`` gives."""
        info = self.functions[function]
        condition = info.get("seed_conds", {}).get(index)
        if condition is not None and C.false_for(condition, env):
            return _NO_MARK
        families = set(info.get("seed_at", {}).get(index, ()))
        passed = info.get("call_args", {}).get(index, {})
        for callee in self.call_targets(function, index):
            if not self.seeds(callee):
                continue
            callee_env: dict[str, Any] = {}
            if passed:
                params = self.functions.get(callee, {}).get("params", ())
                for where, expr in passed.items():
                    name = where if isinstance(where, str) else params[where] if where < len(params) else None
                    v = C.value(expr, env)
                    if name is not None and v is not C.UNKNOWN:
                        callee_env[name] = v
            families |= self.seeds_given(callee, callee_env)
        return frozenset(families)

    def seed_call(self, roots: list[str], family: str) -> tuple[str, str, int] | None:
        """(the call as written, the function making it, its line) of a seed of ``family`` that a
        process with these roots makes, the nearest to a root first; None when none is seen."""
        seen = set(roots)
        queue = deque(r for r in roots if family in self.seeds(r))
        while queue:
            function = queue.popleft()
            info = self.functions.get(function, {})
            for index, families in sorted(info.get("seed_at", {}).items()):
                if family in families:
                    return info["calls"][index], function, info["sites"][index][0]
            for callee, _ in self.callees(function):
                if callee not in seen and family in self.seeds(callee):
                    seen.add(callee)
                    queue.append(callee)
        return None

    def unresolved_seeding(self, reach: set[str], family: str) -> tuple[str, str, int] | None:
        """A call that may seed ``family`` (a seed-like name: ``set_random_seed``, ``strategy.init_seed``;
        see rules.seed_like_families) made by one of the functions ``reach`` holds, that the scan
        cannot follow: (as written, caller, line), the first in name order; None when every such
        call was followed (or there is none)."""
        key = (id(reach), family)
        if key in self._unresolved_seeding:
            return self._unresolved_seeding[key]
        found = None
        for function in reach:
            info = self.functions.get(function, {})
            for written, index, line in info.get("maybe_seed", ()):
                if family not in seed_like_families(written):
                    continue
                if index >= 0 and (self.call_targets(function, index) or self.canonical(
                        info["calls"][index], root=self.root(function)) is not None):
                    continue  # the tree's own function or class: its seeding (or none) is counted
                if found is None or (function, line) < (found[1], found[2]):
                    found = (written, function, line)
        self._unresolved_seeding[key] = found
        return found

    def reaches_draw(self, function: str, in_tests: bool = False) -> bool:
        """Whether a call of ``function`` can run a draw: one in a function it reaches, or import-time
        code of a module it reaches (``in_tests``: a draw in test code, reached through test code)."""
        if not in_tests:
            return _DRAW in self._summary(function)
        self._summary_setup()
        assert self._drawing is not None  # _summary_setup filled it
        drawing, at_import, tests, module_of = self._drawing, self._drawing_at_import, self.test_modules, self.module_of

        def own(name: str) -> frozenset[str]:
            module = module_of.get(name)
            return _DRAWS if module in tests and (name in drawing or module in at_import) else _NO_MARK

        return bool(self._closure(function, self._test_draws, own, tests))

    def _summary_setup(self) -> None:
        if self._drawing is None:
            self._drawing = {d["function"] for f in self.modules.values() for d in f["draws"]}
            self._drawing_at_import = {self.module_of.get(d, "") for d in self._drawing
                                       if d.endswith(MODULE_BODY) or d in self.classes}

    def _summary(self, function: str) -> frozenset[str]:
        """The families that ``function`` and what it reaches seed, and _DRAW when they hold a draw."""
        self._summary_setup()
        assert self._drawing is not None
        drawing, at_import, functions, module_of = self._drawing, self._drawing_at_import, self.functions, self.module_of

        def own(name: str) -> frozenset[str]:
            seeds = frozenset(functions.get(name, {}).get("seeds", ()))
            return seeds | _DRAWS if name in drawing or module_of.get(name) in at_import else seeds

        return self._closure(function, self._summaries, own)

    def _closure(self, function: str, cache: dict[str, frozenset[str]], own: Callable[[str], frozenset[str]],
                 within: set[str] | None = None) -> frozenset[str]:
        """The union of ``own(f)`` over every ``f`` that ``function`` reaches (through functions of the
        modules ``within`` only, when given), memoised in ``cache``.

        One depth-first pass (Tarjan's strongly connected components) answers ``function`` and
        everything it reaches: a component holds what its members hold and what the components
        they call hold.
        """
        known = cache.get(function)
        if known is not None:
            return known
        index: dict[str, int] = {function: 0}
        low: dict[str, int] = {function: 0}
        stack: list[str] = [function]
        on_stack: set[str] = {function}
        def edges_of(name: str) -> list[tuple[str, str]]:
            return self.callees(name) if within is None else self.callees_within(name, within)

        work = [(function, iter(edges_of(function)))]
        while work:
            node, edges = work[-1]
            pushed = False
            for callee, _ in edges:
                if callee in cache:
                    continue
                if callee not in index:
                    index[callee] = low[callee] = len(index)
                    stack.append(callee)
                    on_stack.add(callee)
                    work.append((callee, iter(edges_of(callee))))
                    pushed = True
                    break
                if callee in on_stack:
                    low[node] = min(low[node], index[callee])
            if pushed:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:  # node roots a component: pop it, every member holds the same
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                held: set[str] = set()
                inside = set(members)
                for member in members:
                    held |= own(member)
                    for callee, _ in edges_of(member):
                        if callee not in inside:
                            held |= cache[callee]
                result = frozenset(held)
                for member in members:
                    cache[member] = result
        return cache[function]

    def reach(self, roots: list[str], within: set[str] | None = None) -> tuple[set[str], dict[str, str]]:
        """Functions reachable from ``roots`` (only through functions of the modules ``within``, when
        given), and for those reached by dynamic dispatch, how."""
        seen = set(roots)
        via: dict[str, str] = {}
        queue = deque(roots)
        while queue:
            current = queue.popleft()
            for callee, how in self.callees(current) if within is None else self.callees_within(current, within):
                if callee not in seen:
                    seen.add(callee)
                    if how or current in via:
                        via[callee] = how or via[current]
                    queue.append(callee)
        return seen, via

    def import_time(self, functions: set[str]) -> set[str]:
        """Module bodies and class bodies of the modules that hold ``functions`` (they ran at import)."""
        modules = {self.module_of[f] for f in functions if f in self.module_of}
        out = set()
        for module in modules:
            facts = self.modules[module]
            out.add(f"{module}.{MODULE_BODY}")
            out.update(facts["classes"])
        return out

    def callers(self, function: str) -> list[tuple[str, tuple[Any, ...]]]:
        """(caller, call site) for each call of ``function`` in the tree (skipped files that
        mention its name are parsed first); a call site is (callee as written, line, positional
        count, keywords passed). For a class: the calls that build one."""
        cached = self._callers.get(function)
        if cached is not None:
            return cached
        is_class = function in self.classes  # calls that build an instance of it
        short = function.rpartition(".")[2]
        if self.load_mentioning is not None:
            self.load_mentioning({short})
        if self._calls_by_short_name is None:
            self._calls_by_short_name = {}
            self._index_calls(self.functions)
        found = []
        for caller in sorted(self._calls_by_short_name.get(short, ())):
            info = self.functions[caller]  # the index holds only functions added with their module
            for name, site in zip(info["calls"], info["sites"], strict=False):
                if name.rpartition(".")[2] != short:
                    continue
                if SUPER in name:
                    cls, _, attr = name.partition(SUPER)
                    target = self.lookup_attr(cls, attr, skip_own=True)
                elif LOCAL in name or "@" in name:
                    continue
                else:
                    target = self.canonical(name, load=False, root=self.root(caller))
                    if target in self.classes and not is_class:
                        target = self.lookup_attr(target, "__init__")
                if target == function:
                    found.append((caller, (name, *site)))
        self._callers[function] = found
        return found

    def unguarded_sites(self, function: str, param: str, seen: set[str] | None = None) -> list[tuple[str, int]]:
        """Call sites (caller, line) of ``function`` that leave its None-default ``param`` unset."""
        seen = seen if seen is not None else set()
        if function in seen:
            return []
        seen.add(function)
        index = self.functions[function].get("none_params", {}).get(param, -1)
        out: list[tuple[str, int]] = []
        for caller, (_, line, npos, passed) in self.callers(function):
            if index >= 0 and npos > index:
                continue
            given = {p.partition("<")[0]: p.partition("<")[2] for p in passed}
            if param not in given:
                out.append((caller, line))
            elif given[param]:  # forwards the caller's own None-default parameter
                out += self.unguarded_sites(caller, given[param], seen)
        return out

    def seeded_before(self, draw: dict[str, Any]) -> set[str]:
        """RNG families seeded in the draw's own function before it, on every path to it."""
        families = set(draw.get("seeded_here", ()))
        function = draw["function"]
        for index in draw.get("before", ()):
            families |= self.call_seeds(function, index, {})
        return families
