"""Dynamic dispatch (the second layer of ``analysis.Program``): what a call of a bound value, a
registry entry or a loaded dotted path can run.

A value returned by a loader (``importlib.import_module`` + ``getattr``, ``pydoc.locate``, Hydra)
and then called reaches the tree's dotted-path strings that name a function or class and that are
assigned to the attribute (or option) the loader's argument names, or every such string not
assigned to any attribute when none is (a stated over-approximation). Objects whose class the
tree shows (``x = Cls(...)``, a factory returning one, an annotation) reach that class's methods;
dicts of functions or classes, filled by literals or registering decorators, reach their values.
"""

from __future__ import annotations

from detaudit.scan.program_names import ProgramNames
from detaudit.scan.rules import BUILTIN_LOADERS
from detaudit.scan.schema import LOCAL, TABLE


class ProgramDispatch(ProgramNames):
    """What a dynamic call can reach (see the module doc)."""

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
