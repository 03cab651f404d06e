"""Seeding (the fourth layer of ``analysis.Program``): which RNG families a call seeds, with the
constants its callers pass, which seed covers a process, and seed-like calls the scan cannot follow.

See docs/scan-rng.md, "The seeding rule".
"""

from __future__ import annotations

from collections import deque
from typing import Any

from detaudit.scan import conditions as C
from detaudit.scan.program_calls import ProgramCalls
from detaudit.scan.schema import MODULE_BODY, NO_FUNCTION, DrawFacts
from detaudit.scan.seeds import seed_like_families

_DRAW = "<draw>"  # in a summary: the function or what it reaches holds a draw
_DRAWS = frozenset({_DRAW})
_NO_MARK: frozenset[str] = frozenset()
_MARKS = _DRAWS
MAX_SEED_DEPTH = 32  # calls followed with their arguments (seeds_given) before falling back to seeds


class ProgramSeeding(ProgramCalls):
    """The seeding a call makes and what a process's roots reach (see the module doc)."""

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
        for index in range(len(self.functions.get(function, NO_FUNCTION).get("calls", ()))):
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
                params = self.functions.get(callee, NO_FUNCTION).get("params", ())
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
            info = self.functions.get(function, NO_FUNCTION)
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
        see seeds.seed_like_families) made by one of the functions ``reach`` holds, that the scan
        cannot follow: (as written, caller, line), the first in name order; None when every such
        call was followed (or there is none)."""
        key = (id(reach), family)
        if key in self._unresolved_seeding:
            return self._unresolved_seeding[key]
        found = None
        for function in reach:
            info = self.functions.get(function, NO_FUNCTION)
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
            seeds = frozenset(functions.get(name, NO_FUNCTION).get("seeds", ()))
            return seeds | _DRAWS if name in drawing or module_of.get(name) in at_import else seeds

        return self._closure(function, self._summaries, own)

    def seeded_before(self, draw: DrawFacts) -> set[str]:
        """RNG families seeded in the draw's own function before it, on every path to it."""
        families = set(draw.get("seeded_here", ()))
        function = draw["function"]
        for index in draw.get("before", ()):
            families |= self.call_seeds(function, index, {})
        return families
