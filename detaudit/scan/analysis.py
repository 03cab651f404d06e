"""Cross-module analysis: processes, what each reaches, whether it seeds, and the findings.

Processes come from entry points (Ray actors and tasks, ``__main__`` blocks, console
scripts, multiprocessing targets, DataLoader ``worker_init_fn``). Calls are followed through
imports, methods inherited from base classes in any scanned module, ``super()``, and dynamic
dispatch: a value returned by a loader (``importlib.import_module`` + ``getattr``,
``pydoc.locate``, Hydra) and then called reaches every dotted-path string in the tree that
names a function or class (a stated over-approximation). The seeding rule is in docs/scan-rng.md.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from detaudit.scan.facts import LOCAL, MAIN_BLOCK, MODULE_BODY, SUPER
from detaudit.scan.rules import BUILTIN_LOADERS, CALLING_LOADERS, FAMILY

KIND_LABEL = {
    "ray-actor": "Ray actor",
    "ray-task": "Ray task",
    "main": "__main__",
    "script": "console script",
    "multiprocessing": "multiprocessing target",
    "worker-init": "DataLoader worker_init_fn",
}
MAX_CANDIDATES_SHOWN = 4


@dataclass
class Process:
    name: str  # what a reader recognises: "RolloutManager (Ray actor)"
    kind: str
    target: str
    seeded: set[str]  # RNG families seeded at some point of the process's life
    roots: list[str]
    reach: set[str] = field(default_factory=set)
    # Code that runs before the later seeding: an actor's __init__ (and what it calls), import-time code.
    early: dict[str, set[str]] = field(default_factory=dict)  # function -> families seeded by then
    via: dict[str, str] = field(default_factory=dict)  # function -> how dynamic dispatch reached it
    callers_in: dict[str, list[str]] | None = None  # function -> its callers within this process (built on demand)
    entry_guards: dict[str, list[tuple[str, str, int]]] = field(default_factory=dict)  # see Program.entry_guards

    def seeded_at(self, function: str, family: str) -> bool:
        early = self.early.get(function)
        return family in (early if early is not None else self.seeded)


@dataclass
class Finding:
    path: str
    line: int
    col: int
    rule: str
    severity: str
    message: str
    code: str
    function: str
    guards: list[str]
    processes: list[dict[str, Any]]
    note: str = ""
    end_line: int = 0
    via: list[str] = field(default_factory=list)
    # `if` conditions at call sites on every path from the process's entry to the draw
    reached_only_when: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path, "line": self.line, "col": self.col, "rule": self.rule, "severity": self.severity,
            "message": self.message, "code": self.code, "function": self.function, "guards": self.guards,
            "processes": self.processes, "note": self.note, "via": self.via,
            "reached_only_when": self.reached_only_when,
        }


class Program:
    """All scanned modules' facts, with name resolution across them."""

    def __init__(self, facts: dict[str, dict[str, Any]], load_module: Callable[[str], bool] | None = None,
                 extra_strings: set[str] | None = None,
                 load_mentioning: Callable[[set[str]], None] | None = None) -> None:
        self.paths: dict[str, str] = {}  # module -> path
        self.modules: dict[str, dict[str, Any]] = {}
        self.functions: dict[str, dict[str, Any]] = {}
        self.classes: dict[str, dict[str, Any]] = {}
        self.module_of: dict[str, str] = {}  # function or class -> module
        self.binds: dict[str, list[tuple[str, str]]] = {}  # bound name -> [(loader call target, code)]
        self.strings: set[str] = set(extra_strings or ())
        self.load_module = load_module
        # Parses the skipped files whose text mentions one of these names (callers of a function).
        self.load_mentioning = load_mentioning
        self._mro: dict[str, list[str]] = {}
        # short name of a callee -> the functions that call it (built on first use, then kept up to date)
        self._calls_by_short_name: dict[str, set[str]] | None = None
        for path, f in facts.items():
            self.add(path, f)
        self._seeds: dict[str, frozenset[str]] = {}
        self._callees: dict[str, list[tuple[str, str]]] = {}
        self._candidates: dict[str, list[str]] = {}
        self._callers: dict[str, list[tuple[str, tuple[Any, ...]]]] = {}
        self._edge_guards: dict[tuple[str, str], tuple[list[str], int]] = {}  # (conditions, line of a call)

    def add(self, path: str, f: dict[str, Any]) -> None:
        self.paths[f["module"]] = path
        self.modules[f["module"]] = f
        self.functions.update(f["functions"])
        self.classes.update(f["classes"])
        for name in (*f["functions"], *f["classes"]):
            self.module_of[name] = f["module"]
        for key, loader, code in f["binds"]:
            self.binds.setdefault(key, []).append((loader, code))
        self.strings.update(f["strings"])
        self._candidates = {}
        self._mro = {}
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

    def canonical(self, name: str, depth: int = 0, load: bool = True) -> str | None:
        """The function or class a qualified name denotes (through re-exports and base classes), or None.

        ``load``: parse a skipped module on the way when the name leads into it.
        """
        if name in self.functions or name in self.classes:
            return name
        if depth > 8:
            return None
        parts = name.split(".")
        for i in range(len(parts) - 1, 0, -1):
            prefix = ".".join(parts[:i])
            if prefix in self.classes:  # Cls.attr: look in the base classes
                found = self.lookup_attr(prefix, parts[i], depth + 1)
                return found if i == len(parts) - 1 else None
            facts = self.modules.get(prefix)
            if facts is None and load and self.load_module is not None and self.load_module(prefix):
                facts = self.modules.get(prefix)
                if name in self.functions or name in self.classes:
                    return name
            if facts is None:
                continue
            target = facts["imports"].get(parts[i])
            if target is not None and target != name:
                rest = parts[i + 1 :]
                return self.canonical(".".join([target, *rest]), depth + 1, load)
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
            target = self.canonical(base, depth + 1)
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

    def class_methods(self, cls: str) -> list[str]:
        """Every method an instance has, inherited ones included (the nearest definition wins)."""
        found: dict[str, str] = {}
        for klass in self.mro(cls):
            for method in self.classes[klass]["methods"]:
                found.setdefault(method.rpartition(".")[2], method)
        return sorted(found.values())

    # -- calls ----------------------------------------------------------------------------

    def is_loader(self, name: str, depth: int = 0) -> bool:
        if name in BUILTIN_LOADERS:
            return True
        target = self.canonical(name)
        info = self.functions.get(target) if target else None
        if info is None or depth > 4:
            return False
        return info.get("loader", False) or any(self.is_loader(r, depth + 1) for r in info.get("returns", ()) if r != target)

    def candidates(self, attr: str = "") -> list[str]:
        """Functions and classes named by dotted-path strings in the tree (``attr``: module strings + attr)."""
        cached = self._candidates.get(attr)
        if cached is not None:
            return cached
        out = set()
        for text in self.strings:
            name = text.replace(":", ".")
            if attr:
                if name not in self.modules and not (self.load_module and self.load_module(name)):
                    continue
                name = f"{name}.{attr}"
            target = self.canonical(name)
            if target is not None:
                out.add(target)
        result = sorted(out)
        self._candidates[attr] = result
        return result

    def _dispatch(self, key: str, function: str) -> tuple[list[str], str]:
        """Targets of a call of a loaded value (and the reason), or ([], '')."""
        keys = [key]
        head, sep, rest = key.partition(LOCAL)
        if sep:  # a local name may be a module-level one
            keys.append(f"{self.module_of.get(function, '')}.{rest}")
        cls, _, attr = key.rpartition(".")
        if cls in self.classes:  # self.fn bound in a base class
            keys += [f"{klass}.{attr}" for klass in self.mro(cls)[1:]]
        for candidate in keys:
            for bound, attr_part in ((candidate, ""), (candidate.rpartition(".")[0], candidate.rpartition(".")[2])):
                for loader, code in self.binds.get(bound, ()):
                    if attr_part and loader == "importlib.import_module":
                        targets = self.candidates(attr_part)
                    elif not attr_part and loader != "importlib.import_module" and self.is_loader(loader):
                        targets = self.candidates()
                    else:
                        continue
                    return targets, code
        return [], ""

    def callees(self, function: str) -> list[tuple[str, str]]:
        """(callee, how a dynamic call reached it or '') for each call ``function`` makes."""
        cached = self._callees.get(function)
        if cached is not None:
            return cached
        out: list[tuple[str, str]] = []
        info = self.functions.get(function)
        guarded = {index: (conditions, line) for index, conditions, line in info.get("guarded_calls", ())} if info else {}
        for index, name in enumerate(info["calls"] if info else ()):
            first = len(out)
            self._edge(function, name, out)
            conditions, line = guarded.get(index, ([], 0))
            for callee, _ in out[first:]:
                key = (function, callee)
                # several calls of one callee: only conditions that hold at every one of them
                known = self._edge_guards.get(key)
                self._edge_guards[key] = (conditions, line) if known is None else (
                    [c for c in known[0] if c in conditions], known[1])
        self._callees[function] = out
        return out

    def edge_guards(self, caller: str, callee: str) -> tuple[list[str], int]:
        """The `if` conditions in ``caller`` that hold at every call it makes to ``callee``, and the
        line of such a call (0 when there is no condition)."""
        self.callees(caller)
        return self._edge_guards.get((caller, callee), ([], 0))

    def _edge(self, function: str, name: str, out: list[tuple[str, str]]) -> None:
        """Append the callees (and how dynamic dispatch reached them) of one call ``name``."""
        if SUPER in name:
            cls, _, attr = name.partition(SUPER)
            target = self.lookup_attr(cls, attr, skip_own=True)
            if target is not None:
                out.append((target, ""))
            return
        target = self.canonical(name) if LOCAL not in name and "@" not in name else None
        if target is not None:
            if target in self.classes:
                init = self.lookup_attr(target, "__init__")
                if init is not None:
                    out.append((init, ""))
            else:
                out.append((target, ""))
            return
        if name in CALLING_LOADERS:
            targets, code = self.candidates(), f"{name}(...)"
        else:
            targets, code = self._dispatch(name, function)
        if targets:
            shown = ", ".join(targets[:MAX_CANDIDATES_SHOWN]) + (", ..." if len(targets) > MAX_CANDIDATES_SHOWN else "")
            via = f"reached via {code}: candidates {shown}"
            for target in targets:
                out.append((self.lookup_attr(target, "__init__") or target if target in self.classes else target, via))

    def seeds(self, function: str) -> frozenset[str]:
        """RNG families a call of ``function`` seeds, directly or through callees."""
        if function in self._seeds:
            return self._seeds[function]
        families: set[str] = set()
        for fn in self.reach([function])[0]:
            info = self.functions.get(fn)
            if info:
                families.update(info["seeds"])
        result = frozenset(families)
        self._seeds[function] = result
        return result

    def reach(self, roots: list[str]) -> tuple[set[str], dict[str, str]]:
        """Functions reachable from ``roots``, and for those reached by dynamic dispatch, how."""
        seen = set(roots)
        via: dict[str, str] = {}
        queue = deque(roots)
        while queue:
            current = queue.popleft()
            for callee, how in self.callees(current):
                if callee not in seen:
                    seen.add(callee)
                    if how or current in via:
                        via[callee] = how or via[current]
                    queue.append(callee)
        return seen, via

    def entry_guards(self, process: Process, function: str) -> list[tuple[str, str, int]]:
        """(condition, caller, line of the call) triples that hold on every call path from ``process``'s roots to ``function``.

        E.g. ``[("algorithm == 'nft'", "pkg.actors.train_pairs", 185)]`` for a function that the process
        calls only inside ``if algorithm == 'nft':``. A root, a function reached through a cycle
        still being resolved, or a call made outside any `if` contributes no condition, so the
        answer only ever under-states: a condition listed here is one the code really requires.
        """
        if process.callers_in is None:
            callers: dict[str, list[str]] = {}
            for caller in sorted(process.reach):
                for callee, _ in self.callees(caller):
                    if callee in process.reach and callee != caller:
                        callers.setdefault(callee, []).append(caller)
            process.callers_in = callers
        return self._entry_guards(process, function, set())

    def _entry_guards(self, process: Process, function: str, active: set[str]) -> list[tuple[str, str, int]]:
        known = process.entry_guards.get(function)
        if known is not None:
            return known
        callers = (process.callers_in or {}).get(function, [])
        if function in process.roots or not callers or function in active:
            return []
        active.add(function)
        common: list[tuple[str, str, int]] | None = None
        for caller in callers:
            conditions, line = self.edge_guards(caller, function)
            path = [(c, caller, line) for c in conditions]
            path += [g for g in self._entry_guards(process, caller, active) if g not in path]
            common = path if common is None else [g for g in common if g in path]
            if not common:
                break
        active.discard(function)
        # Kept even when a cycle cut a path short: that only drops conditions, never adds one.
        result = common or []
        process.entry_guards[function] = result
        return result

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
        count, keywords passed)."""
        cached = self._callers.get(function)
        if cached is not None:
            return cached
        short = function.rpartition(".")[2]
        if self.load_mentioning is not None:
            self.load_mentioning({short})
        if self._calls_by_short_name is None:
            self._calls_by_short_name = {}
            self._index_calls(self.functions)
        found = []
        for caller in sorted(self._calls_by_short_name.get(short, ())):
            info = self.functions[caller]  # the index holds only functions added with their module
            for name, site in zip(info["calls"], info["sites"]):
                if name.rpartition(".")[2] != short:
                    continue
                if SUPER in name:
                    cls, _, attr = name.partition(SUPER)
                    target = self.lookup_attr(cls, attr, skip_own=True)
                elif LOCAL in name or "@" in name:
                    continue
                else:
                    target = self.canonical(name, load=False)
                    if target in self.classes:
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


def build_processes(program: Program, scripts: list[str]) -> list[Process]:
    hook_families: set[str] = set()
    for facts in list(program.modules.values()):
        for hook in facts["hooks"]:
            target = program.canonical(hook)
            if target is not None:
                hook_families |= program.seeds(target)
    processes: list[Process] = []
    entries = [(e, f["module"]) for f in list(program.modules.values()) for e in f["entries"]]
    entries += [({"kind": "script", "target": s, "line": 0}, "") for s in scripts]
    seen: set[tuple[str, str]] = set()
    for entry, module in sorted(entries, key=lambda em: (em[0]["target"], em[0]["kind"])):
        target = program.canonical(entry["target"])
        if target is None:
            continue
        kind = entry["kind"]
        short = target.rsplit(".", 1)[-1]
        start_seeded: set[str] = set()  # seeded before any user code runs
        early_roots: list[str] = []  # code that runs before seeds made later in the process's life
        if kind in ("ray", "ray-actor", "ray-task"):
            start_seeded = set(hook_families)
            if target in program.classes:
                kind = "ray-actor"
                roots = program.class_methods(target)
                init = program.lookup_attr(target, "__init__")
                seeded = start_seeded | set(program.seeds(init) if init else ())
                init_seeded = set(seeded)
                for method in roots:  # e.g. init(self, args) that the driver calls first
                    seeded |= program.seeds(method)
                early_roots = [init] if init else []
            else:
                kind = "ray-task"
                roots = [target]
                seeded = start_seeded | set(program.seeds(target))
        elif kind == "main":
            short = f"__main__ of {program.paths.get(target.rsplit('.', 1)[0], target)}"
            if short.startswith("__main__ of /"):
                short = "__main__ of " + target.rsplit(".", 1)[0]
            roots = [target]
            seeded = set(program.seeds(target))
        else:
            roots = [program.lookup_attr(target, "__init__") or target] if target in program.classes else [target]
            seeded = set(program.seeds(roots[0]))
            if kind == "worker-init":
                seeded.add("torch")  # DataLoader seeds each worker's torch RNG from its own base seed
                start_seeded.add("torch")
        if (kind, target) in seen:
            continue
        seen.add((kind, target))
        name = short if kind == "main" else f"{short} ({KIND_LABEL[kind]})"
        process = Process(name, kind, target, seeded, roots)
        process.reach, process.via = program.reach(roots)
        if early_roots:
            early, _ = program.reach(early_roots)
            process.early.update({f: init_seeded for f in early})
        for body in program.import_time(process.reach) - set(roots):
            process.reach.add(body)
            process.early[body] = start_seeded  # import-time code runs before any seed call
        processes.append(process)
    return processes


def findings_for(program: Program, processes: list[Process], rel: Callable[[str], str],
                 unknown_process: str = "error") -> list[Finding]:
    findings: list[Finding] = []
    if program.load_mentioning is not None:  # one pass over the skipped files for every generator=None guard
        program.load_mentioning({d["function"].rpartition(".")[2] for f in list(program.modules.values())
                                 for d in f["draws"] if d.get("param")})
    for module, facts in sorted(program.modules.items(), key=lambda mf: program.paths[mf[0]]):
        path = rel(program.paths[module])
        suppress = facts["suppress"]
        for draw in facts["draws"]:
            marks = suppress.get(draw["line"]) or suppress.get(draw["end_line"]) or []
            if "*" in marks or draw["rule"] in marks:
                continue
            finding = _finding(program, processes, draw, path, rel, unknown_process)
            if finding is not None:
                findings.append(finding)
    findings.sort(key=lambda f: (f.path, f.line, f.col, f.rule))
    return findings


def _finding(program: Program, processes: list[Process], draw: dict[str, Any], path: str,
             rel: Callable[[str], str], unknown_process: str) -> Finding | None:
    family = FAMILY[draw["rule"]]
    function = draw["function"]
    mine = [p for p in processes if function in p.reach]
    extra = ""
    if draw.get("param"):
        # generator=None: a guard only where the caller passes a generator.
        sites = program.unguarded_sites(function, draw["param"])
        roots = [p for p in mine if function in p.roots]
        if not sites and not roots:
            return None
        callers = {caller for caller, _ in sites}
        mine = [p for p in mine if p in roots or callers & p.reach]
        shown = []
        located = sorted({(rel(program.paths[program.module_of[c]]), line, c) for c, line in sites})
        for where, line, caller in located:
            names = [p.name for p in mine if caller in p.reach]
            shown.append(f"{where}:{line}" + (f" ({', '.join(names)})" if names else " (no known process)"))
        extra = (f"{draw['param']}=None by default and not passed at: " + "; ".join(shown)) if shown else \
            f"{draw['param']}=None by default: an entry point itself"
    seeded = {p.name: p.seeded_at(function, family) for p in mine} if family else {}
    if not family:
        severity, note = "error", "nondeterministic in any process"
    elif not all(seeded.values()):
        severity, note = "error", f"runs in a process that does not seed the {family} RNG before it"
    elif mine:
        severity, note = "warning", f"every process that runs it seeds the {family} RNG; reproducible only while the call order stays fixed"
    else:
        where = "module level" if function.endswith(MODULE_BODY) or function in program.classes else "no known process"
        severity = unknown_process
        note = f"{where}: cannot show that a seeded process runs it (no entry point found that runs it)"
    if draw.get("impact") and family and severity == "error":
        severity = "warning"
        note += f"; at most a warning: {draw['impact']}"
    if extra:
        note = f"{note}; {extra}"
    via = sorted({p.via[function] for p in mine if function in p.via})
    reached_only_when: list[tuple[str, str, int]] = []
    for index, process in enumerate(mine):  # conditions that hold in every process that runs it
        guards = program.entry_guards(process, function)
        reached_only_when = guards if index == 0 else [g for g in reached_only_when if g in guards]
    return Finding(
        path=path, line=draw["line"], col=draw["col"], rule=draw["rule"], severity=severity,
        message=draw["message"], code=draw["code"], function=function.replace(f".{MAIN_BLOCK}", ".__main__"),
        guards=draw["guards"],
        processes=[{"entry": p.name, "kind": p.kind, "target": p.target, "seeded": seeded.get(p.name) if family else None}
                   for p in mine],
        note=note, end_line=draw["end_line"], via=via,
        reached_only_when=[{"condition": condition, "caller": caller.replace(f".{MAIN_BLOCK}", ".__main__"), "line": line,
                            "path": rel(program.paths[program.module_of[caller]]) if caller in program.module_of else ""}
                           for condition, caller, line in reached_only_when],
    )
