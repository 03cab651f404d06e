"""The call graph (the third layer of ``analysis.Program``): who calls what, what each root reaches,
and the call sites of a function.

Calls are followed through imports, methods inherited from base classes in any scanned module,
``super()``, the overrides of subclasses for ``self.m()``, and dynamic dispatch
(``program_dispatch``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from detaudit.scan.program_dispatch import ProgramDispatch
from detaudit.scan.program_names import display_name
from detaudit.scan.rules import CALLING_LOADERS
from detaudit.scan.schema import LOCAL, MODULE_BODY, NO_FUNCTION, SUPER, TABLE


class ProgramCalls(ProgramDispatch):
    """Edges of the call graph and what they reach (see the module doc)."""

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
            info = self.functions.get(caller, NO_FUNCTION)
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
