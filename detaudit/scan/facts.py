"""Per-file facts for scan-rng, from Python's ``ast`` (the scanned code is never imported or run).

A file's facts are plain data (dicts, lists, strings), so they can be cached by content:
its functions and the calls each makes (names resolved through imports and aliases),
the seeds each makes, the global-RNG draws (with their guard conditions and the calls made
before them in their function), the process entry points it declares (see ``entries``),
pytest fixtures, Ray worker setup hooks, dotted-path strings (with the attribute or option
each is assigned to), and suppression comments.

``FileFacts`` is built in layers, one module each: ``facts_base`` (the walk's state, name
resolution), ``facts_calls`` (what a call names, binds, loaders, object kinds), ``facts_seeding``
(what seeding depends on), ``facts_draws`` (draws and entry points), ``facts_walk`` (the
traversal); this module turns what they collected into the facts. Which calls are draws is the
rules' business (``rules.RULE_LIST``), which are entry points is ``entries``'.
"""

from __future__ import annotations

import ast
import re

from detaudit.scan import conditions as C
from detaudit.scan import entries as E
from detaudit.scan.facts_base import MAIN_BLOCK, MODULE_BODY, _Ctx, _dotted_string, dotted
from detaudit.scan.facts_calls import _call_site
from detaudit.scan.facts_walk import FactsWalk
from detaudit.scan.rules import (
    BUILTIN_LOADERS,
    CALLING_LOADERS,
    RULES_BY_CALLEE,
    RULES_BY_METHOD,
    RULES_BY_OBJECT,
    CallSite,
    seed_families,
)
from detaudit.scan.schema import FACTS_VERSION, DrawFacts, Facts, FunctionFacts
from detaudit.scan.seeds import SEED_CALLS, SEED_FLAGS, seed_like

__all__ = ["FileFacts", "file_facts"]

_SUPPRESS = re.compile(r"#\s*detaudit:\s*ignore(?:\[([A-Za-z0-9_,\s]+)\])?")
# What _lookups_of acts on: the names as written, the callees as resolved (checked first, per call).
_LOOKUP_NAMES = frozenset({"getattr", "globals"})
_LOOKUP_CALLEES = frozenset({"operator.methodcaller", "operator.attrgetter", "importlib.import_module"})


class FileFacts(FactsWalk):
    """Walks one module; ``facts()`` returns its plain-data facts.

    ``module``: the name its functions are keyed by (unique in a scan); ``name``: its dotted
    import name (relative imports resolve from it; default ``module``).
    """

    def facts(self) -> Facts:
        """The file's facts (the walk has run): each call judged once, then the rest assembled."""
        for returned, at in self.returned_names:  # x = Cls(...); return x: a factory of Cls
            self.returns.extend((v, at) for v in self.values.get((at.function, returned), ()) if isinstance(v, ast.Call))
        self.bound = {key for key, _, _ in self.binds} | {key for key, _ in self.typed}
        dynamic = self._listings()
        draws = self._call_facts(dynamic)
        self._return_facts()
        self._main_entry()
        return {
            "version": FACTS_VERSION,
            "module": self.module,
            "imports": self.imports,
            "functions": {f"{self.module}.{q}": v for q, v in self.functions.items()},
            "classes": {f"{self.module}.{q}": {**v, "methods": [f"{self.module}.{m}" for m in v["methods"]]}
                        for q, v in self.classes.items()},
            "draws": draws,
            "entries": self.entries,
            "fixtures": self.fixtures,
            "hooks": self._hooks(),
            "suppress": self._suppressions(),
            "strings": [[text, attr] for text in sorted(self.strings) for attr in sorted(self.string_attrs.get(text) or {""})],
            "tables": self._tables(),
            "string_tables": self._string_tables(),
            "binds": self._bind_facts(),
            "names": sorted(self.names),
            "imported": sorted(self.imported),
            "dynamic": sorted(dynamic),
            "string_names": sorted(self.string_names),
            "local_uses": {name: sorted(users) for name, users in sorted(self.local_uses.items())},
            "script_strings": sorted(self.script_strings),
            "lookups": sorted(self.lookups),
            "registrars": {f"{self.module}.{q}": table for q, table in sorted(self.registrars.items())},
        }

    def _listings(self) -> list[list[str]]:
        """Attribute names the code builds at run time, begun with what listings reach: [what owns
        them (qualified, '' unknown), a regex of the names it can build] (see _built_name)."""
        dynamic: list[list[str]] = []
        for call, ctx, _ in self.calls:  # functions that list an object's attributes: dir(x), vars(x)
            func = call.func
            if (isinstance(func, ast.Name) and func.id in ("dir", "vars", "getmembers") and func.id not in self.imports) \
                    or (isinstance(func, ast.Attribute) and func.attr == "getmembers"):
                self.reflecting.add(ctx.function)
                if not (isinstance(func, ast.Name) and func.id == "dir"):  # dir() gives names only: see _built_name
                    self._listed.append((call.args[0] if call.args else None, ctx))
        for listed, ctx in self._listed:  # what is listed can be called: every attribute of it counts as named
            holder = self._listed_owner(listed, ctx)
            if holder is not None and not self._no_names:
                dynamic.append([holder, ".*"])
        return dynamic

    def _call_facts(self, dynamic: list[list[str]]) -> list[DrawFacts]:
        """Each call, in order: what it names and seeds, the draws it is, the entries it declares;
        marks the loaders. Returns the draws."""
        draws: list[DrawFacts] = []
        loads: dict[str, set[str]] = {}  # function -> what it calls that marks a loader
        # function -> (block, index in its "calls", families it seeds) of each call so far, in order
        made: dict[str, list[tuple[tuple[int, ...], int, tuple[str, ...]]]] = {}
        for call, ctx, stmt in self.calls:
            name, resolved = self.call_name(call, ctx)
            function = self.functions[ctx.function]
            if name in _LOOKUP_NAMES or resolved in _LOOKUP_CALLEES:  # the few calls _lookups_of acts on
                resolved = self._lookups_of(call, ctx, name, resolved, loads, dynamic)
            func = call.func
            attr = func.attr if type(func) is ast.Attribute else None
            site: CallSite | None = None
            if (resolved is None or "@" in resolved) and isinstance(func, (ast.Name, ast.Subscript, ast.Call)):
                # fn = REGISTRY[name]; fn(x) / REGISTRY[name](x) / REGISTRY.get(name)(x): each function of the table
                for target in self._targets(func, ctx) if ctx.function != MODULE_BODY else ():
                    function["calls"].append(target)
                    function["sites"].append(_call_site(call, function.get("none_params", {})))
            if resolved is not None:
                site = self._record_call(call, ctx, resolved, attr, function, made)
                if resolved in ("importlib.import_module", "getattr") or resolved in BUILTIN_LOADERS \
                        or resolved in CALLING_LOADERS:
                    loads.setdefault(ctx.function, set()).add(resolved)
            if name is not None and "eed" in name and not self._no_names and seed_like(resolved or name) \
                    and not self._holds_generator(name.rpartition(".")[0], ctx):
                # a seed the scan may not follow (a library's, an unknown object's): see Program.unresolved_seeding
                function.setdefault("maybe_seed", []).append(
                    [name, len(function["calls"]) - 1 if resolved is not None else -1, call.lineno])
            # the rules that may find this call (inlined: this runs for every call of the file)
            rules = RULES_BY_CALLEE.get(resolved, ()) if resolved is not None else ()
            by_method = RULES_BY_METHOD.get(attr, ()) if attr is not None else ()
            if by_method:
                rules = rules + tuple(r for r in by_method if r not in rules)
            if self._objects and (type(func) is ast.Name or type(func) is ast.Attribute):  # pipe(prompt): an object
                kind = self._object_kind(func, ctx)
                if kind:
                    rules = rules + RULES_BY_OBJECT[kind]
            for rule in rules:
                site = site or self._site(call, resolved, attr, ctx, function)
                message = rule.find(site)
                if message is not None:
                    prior = made.get(ctx.function, [])
                    if resolved is not None:
                        prior = prior[:-1]  # not the draw's own call
                    draws.append(self._draw(rule, message, site, ctx, stmt, prior))
            self._process_calls(call, ctx, resolved, attr, function)
        for qual, used in loads.items():
            # load_function(path): import_module + getattr, or a library loader, on its argument
            if ("importlib.import_module" in used and "getattr" in used) or used & (BUILTIN_LOADERS - {"importlib.import_module"}):
                self.functions[qual]["loader"] = True
        return draws

    def _lookups_of(self, call: ast.Call, ctx: _Ctx, name: str | None, resolved: str | None,
                    loads: dict[str, set[str]], dynamic: list[list[str]]) -> str | None:
        """Lookups by a name taken at run time (``getattr(x, name)``, ``methodcaller``, ``globals()``)
        and modules imported by a constant name; returns the call's target (None for getattr)."""
        if name == "getattr" and "getattr" not in self.imports:
            loads.setdefault(ctx.function, set()).add("getattr")
            if len(call.args) >= 2:
                pattern = self._built_name(call.args[1], ctx)
                if pattern or not isinstance(call.args[1], ast.Constant):
                    owner = dotted(call.args[0])
                    owner = f"{self.module}.{ctx.cls}" if owner in ("self", "cls") and ctx.cls else \
                        self.resolve(owner, ctx) or ""
                    if pattern:
                        dynamic.append([owner, pattern])
                    elif not self._no_names:
                        self.lookups.add(owner)
            return None
        if resolved in ("operator.methodcaller", "operator.attrgetter") and call.args \
                and not isinstance(call.args[0], ast.Constant) and not self._no_names:
            self.lookups.add("")  # methodcaller(cfg.method)(obj): any object's attribute
        elif name == "globals" and "globals" not in self.imports:  # globals()[name]: any function here
            dynamic.append([self.module, ".*"])
        elif resolved == "importlib.import_module" and call.args and isinstance(call.args[0], ast.Constant) \
                and isinstance(call.args[0].value, str):
            self.imported.add(call.args[0].value)
        return resolved

    def _record_call(self, call: ast.Call, ctx: _Ctx, resolved: str, attr: str | None, function: FunctionFacts,
                     made: dict[str, list[tuple[tuple[int, ...], int, tuple[str, ...]]]]) -> CallSite | None:
        """A resolved call into its function's facts: the call, its site, the `if` conditions around
        it, the families it seeds and what that seeding depends on. Returns its CallSite when made."""
        site: CallSite | None = None
        index = len(function["calls"])
        function["calls"].append(resolved)
        function["sites"].append(_call_site(call, function.get("none_params", {})))
        if ctx.guards:  # a call under `if`: what it reaches runs only when the condition holds
            shared = self._shared_guards.get(id(ctx))
            if shared is None:  # one list per `if` body (pickled once), kept with its ctx alive
                shared = self._shared_guards[id(ctx)] = (ctx, self._guard_texts(ctx))
            function.setdefault("guarded_calls", []).append([index, shared[1], call.lineno])
        families: tuple[str, ...] = ()
        flag: C.Expr | None = None
        if resolved in SEED_CALLS:
            site = self._site(call, resolved, attr, ctx, function)
            families = seed_families(site)
            given = site.argument(SEED_FLAGS[resolved]) if resolved in SEED_FLAGS else None
            if given is not None:
                flag = self._condition(given, ctx)
                if C.known(flag) and C.false_for(flag, {}):
                    families = ()  # enable(seed, seed_rngs=False)
            if families:
                function["seeds"].extend(f for f in families if f not in function["seeds"])
                function.setdefault("seed_at", {})[index] = list(families)
        if ctx.function != MODULE_BODY and not self._no_names:  # a test's seeding counts whole
            self._seed_condition(call, ctx, function, index, flag)
        made.setdefault(ctx.function, []).append((ctx.block, index, families))
        return site

    def _process_calls(self, call: ast.Call, ctx: _Ctx, resolved: str | None, attr: str | None,
                       function: FunctionFacts) -> None:
        """What a call says about processes: a module put in eval or training mode, a pool that runs a
        function in a worker (or a thread: a call), an entry point it declares."""
        func = call.func
        if (attr == "eval" or attr == "train") and isinstance(func, ast.Attribute) and not self._no_names:
            self._mode_call(func.value, attr, call, ctx, function)
        if attr in E.POOL_METHODS and call.args and isinstance(func, ast.Attribute):
            pool = self._pool_kind(func.value, ctx)
            if pool == "process":  # pool.map(fn, items): fn runs in a worker process
                self.entries.extend({"kind": "pool", "target": t, "line": call.lineno}
                                    for t in self._targets(call.args[0], ctx))
            elif pool == "thread" and ctx.function != MODULE_BODY:  # in this process: a call of fn
                for target in self._targets(call.args[0], ctx):
                    function["calls"].append(target)
                    function["sites"].append(_call_site(call, function.get("none_params", {})))
        # every entry form needs keywords (Process(target=...), worker_init_fn=), a call of a
        # call's result (ray.remote(num_gpus=1)(Cls)), or one of these callee names
        if call.keywords or type(func) is ast.Call or (
                resolved is not None and resolved.rpartition(".")[2] in E.CALL_NAMES):
            self.entries.extend(self._entry(call, resolved, ctx))

    def _return_facts(self) -> None:
        """What functions return: a registry entry (calling the result runs a value of the table), a
        class (a factory), a loader's result on their own argument (a loader)."""
        for node, ctx in self.table_returns:  # return TABLE[key]: calling the result runs a value of TABLE
            yields = self._targets(node, ctx)
            if yields:
                self.functions[ctx.function].setdefault("yields", []).extend(yields)
        for call, ctx in self.returns:
            _, resolved = self.call_name(call, ctx)
            if resolved is None:
                func = call.func
                if isinstance(func, ast.Subscript) or (isinstance(func, ast.Call) and isinstance(func.func, ast.Attribute)
                                                       and func.func.attr == "get"):
                    made_here = self._targets(func, ctx)  # return TABLE[key](...): a factory of the table's classes
                    if made_here:
                        self.functions[ctx.function].setdefault("makes", []).extend(made_here)
                elif isinstance(func, ast.Attribute) and func.attr == "get":  # return TABLE.get(key)
                    yields = self._targets(call, ctx)
                    if yields:
                        self.functions[ctx.function].setdefault("yields", []).extend(yields)
                continue
            info = self.functions[ctx.function]
            info.setdefault("makes", []).append(resolved)  # what it returns: a factory's class
            params = self.params.get(ctx.function, ())
            # a function returning a loader's result on its own argument is a loader
            if any(isinstance(a, ast.Name) and a.id in params for a in call.args):
                info.setdefault("returns", []).append(resolved)

    def _main_entry(self) -> None:
        """The module's own entry: its `__main__` block, a package's __main__.py, a script's body."""
        if MAIN_BLOCK in self.functions:
            self.entries.append({"kind": "main", "target": f"{self.module}.{MAIN_BLOCK}",
                                 "line": self.functions[MAIN_BLOCK]["line"]})
        elif self.module.rpartition(".")[2].partition("#")[0] == "__main__" or (self._top and self.script):
            # `python -m pkg` runs __main__.py's body; `python script.py` a script's
            self.entries.append({"kind": "main", "target": f"{self.module}.{MODULE_BODY}", "line": 1})

    def _hooks(self) -> list[str]:
        """Ray worker setup hooks, as qualified names or dotted-path strings."""
        hooks = []
        for value in self.hooks:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                hooks.append(value.value)
            else:
                hook = self.resolve(dotted(value), _Ctx(MODULE_BODY, None, ()))
                if hook:
                    hooks.append(hook)
        return hooks

    def _suppressions(self) -> dict[int, list[str]]:
        """Line -> the rules a `# detaudit: ignore[...]` comment there suppresses ("*": all)."""
        suppress: dict[int, list[str]] = {}
        for number, text in enumerate(self.lines if self._suppresses else (), 1):
            if "detaudit" in text:
                match = _SUPPRESS.search(text)
                if match:
                    rules_text = match.group(1)
                    suppress[number] = [r.strip() for r in rules_text.split(",") if r.strip()] if rules_text else ["*"]
        return suppress

    def _tables(self) -> dict[str, list[str]]:
        """Module-level dicts of functions or classes: NAME -> what each value names."""
        tables = {}
        for (scope, name), values in self.values.items():
            if scope == MODULE_BODY:
                names = [t for v in values if isinstance(v, ast.Dict) for item in v.values if item is not None
                         for t in self._targets(item, _Ctx(MODULE_BODY, None, ()), 4)]
                if names:
                    tables[name] = names
        return tables

    def _string_tables(self) -> dict[str, list[str]]:
        """Module-level dicts of dotted-path strings: NAME -> the strings (a loader's argument
        ``import_module(MODULES[key])`` picks one of them)."""
        string_tables = {}
        for (scope, name), values in self.values.items():
            if scope == MODULE_BODY:
                texts = sorted({t for v in values if isinstance(v, ast.Dict) for item in v.values
                                if isinstance(item, ast.Constant) and (t := _dotted_string(item.value)) is not None})
                if texts:
                    string_tables[name] = texts
        return string_tables


def file_facts(module: str, source: str, is_package: bool = False, name: str | None = None) -> Facts:
    """Parse ``source`` (raises SyntaxError) and return its facts (``name``: its dotted import
    name when ``module``, the key its functions are stored under, differs)."""
    tree = ast.parse(source)
    walker = FileFacts(module, source, is_package, name)
    try:
        return walker.run(tree).facts()
    finally:
        # The walker refers to itself (its handler table holds its bound methods) and holds the
        # tree: cleared, both are freed now by reference counting. Left to the cyclic collector,
        # which the scan turns off, every file's tree lived to the scan's end and one collection
        # then walked them all (a quarter of a large tree's scan time).
        walker.__dict__.clear()
