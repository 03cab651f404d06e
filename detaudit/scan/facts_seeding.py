"""What seeding depends on (``facts.FileFacts``, the seeding layer): the per-run sources a seed is
taken from, the `if` conditions around a call and the flags and constants it passes on, as
conditions over the function's parameters (``conditions``), so that the analysis can judge each
call with its caller's constants."""

from __future__ import annotations

import ast

from detaudit.scan import conditions as C
from detaudit.scan.facts_base import MAIN_BLOCK, MODULE_BODY, _Ctx, dotted
from detaudit.scan.facts_calls import FactsCalls
from detaudit.scan.schema import FunctionFacts
from detaudit.scan.seeds import ENTROPY_CALLS

# Argument expressions that can be a constant or come from a parameter (see conditions.encode).
# Argument expressions that can be a constant or come from a parameter (see conditions.encode).
_CONDITION_NODES = frozenset({ast.Name, ast.UnaryOp, ast.BoolOp, ast.Compare})

MAX_FLAG_STRING = 64  # longer string arguments (messages, paths) are no flags: not carried


class FactsSeeding(FactsCalls):
    """The seeding layer of a file's walk (see the module doc)."""

    def entropy_of(self, node: ast.expr, ctx: _Ctx, depth: int = 0) -> str | None:
        """The per-run source (``time.time``) that ``node``'s value comes from, through locals, or None."""
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                written = dotted(sub.func)
                resolved = self.resolve(written, _Ctx(MODULE_BODY, None, ())) or written
                if resolved in ENTROPY_CALLS:
                    return resolved
            elif depth < 2 and isinstance(sub, (ast.Name, ast.Attribute)):
                for value in self._values_of(sub, ctx):
                    source = self.entropy_of(value, ctx, depth + 1)
                    if source:
                        return source
        return None

    def _guard_condition(self, ctx: _Ctx) -> tuple[C.Expr, bool]:
        """The `if` conditions around code as one condition over its function's parameters, and
        whether it uses one (else its value is the same at every call)."""
        known = self._guard_conditions.get(id(ctx))
        if known is None:  # every call under one `if` shares its ctx (kept alive by _shared_guards and calls)
            parts = [e if taken else ["not", e] for e, taken in
                     ((self._condition(test, ctx), taken) for test, taken in ctx.guards)]
            guard = parts[0] if len(parts) == 1 else ["and", *parts]
            known = self._guard_conditions[id(ctx)] = (guard, C.uses_param(guard))
        return known

    def _switched_by_params(self, ctx: _Ctx) -> C.Expr | None:
        """For a draw under `if` conditions on its function's parameters: the condition, with the
        function's parameters and their constant defaults written into its facts (so that the
        analysis can tell which calls switch the draw off); else None."""
        if not ctx.guards or ctx.function in (MODULE_BODY, MAIN_BLOCK) or self._no_names:
            return None
        condition, uses = self._guard_condition(ctx)
        if not uses:
            return None
        function = self.functions[ctx.function]
        if "params" not in function:
            params = self._positional.get(ctx.function, [])
            function["params"] = params[1:] if function.get("cls") and params[:1] in (["self"], ["cls"]) else params
        node = self._scopes.get(ctx.function)
        defaults: dict[str, C.Expr] = {}  # parameter -> its constant default
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            positional = (*node.args.posonlyargs, *node.args.args)
            pairs = [*zip(positional[len(positional) - len(node.args.defaults):], node.args.defaults, strict=True),
                     *zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True)]
            for arg, default in pairs:
                flag = self._passed(default, ctx) if type(default) is ast.Constant else None
                if flag is not None:
                    defaults[arg.arg] = flag
        function["defaults"] = defaults
        return condition

    def _seed_condition(self, call: ast.Call, ctx: _Ctx, function: FunctionFacts, index: int,
                        flag: C.Expr | None) -> None:
        """What seeding through the ``index``-th call depends on: the `if` conditions around it and
        a seeding flag it passes (as conditions over the function's parameters: "seed_conds"), and
        the constants and parameter-derived values it passes on ("call_args": position or keyword
        -> condition), so that a caller's constants reach the callee's conditions."""
        if not (call.args or call.keywords or ctx.guards or flag):
            return
        condition: C.Expr | None = None
        uses = False
        if ctx.guards:
            condition, uses = self._guard_condition(ctx)
        if flag is not None:
            condition = flag if condition is None else ["and", condition, flag]
            uses = C.uses_param(condition)
        forwards = False
        if condition is not None and uses:
            function.setdefault("seed_conds", {})[index] = condition
            forwards = True
        passed: dict[int | str, C.Expr] = {}
        for position, arg in enumerate(call.args):
            expr = self._passed(arg, ctx)
            if expr is not None:
                passed[position] = expr
        for keyword in call.keywords:
            if keyword.arg:
                expr = self._passed(keyword.value, ctx)
                if expr is not None:
                    passed[keyword.arg] = expr
        if passed:
            function.setdefault("call_args", {})[index] = passed
            forwards = forwards or any(C.uses_param(e) for e in passed.values())
        if forwards and "params" not in function:
            params = self._positional.get(ctx.function, [])
            function["params"] = params[1:] if function.get("cls") and params[:1] in (["self"], ["cls"]) else params

    def _passed(self, arg: ast.expr, ctx: _Ctx) -> C.Expr | None:
        """An argument worth carrying into the callee: a flag-like constant (a bool, None, a short
        string without spaces: a role, a mode) or a value that comes from the caller's parameters."""
        kind = type(arg)
        if kind is ast.Constant:
            value = arg.value  # type: ignore[attr-defined]
            if value is None or type(value) is bool or (type(value) is str and len(value) <= MAX_FLAG_STRING
                                                         and " " not in value):
                return ["c", value]
            return None
        if kind is ast.Name:  # the commonest argument: a parameter, or a local that may hold one
            is_param, value_of = self._readers.get(ctx.function) or self._make_readers(ctx.function)
            name = arg.id  # type: ignore[attr-defined]
            if is_param(name):
                return C.param(name)
            if value_of(name) is None:
                return None  # neither a parameter nor a local assigned once: nothing to carry
        elif kind not in _CONDITION_NODES:
            return None
        expr = self._condition(arg, ctx)
        return expr if C.uses_param(expr) else None

    def _guard_texts(self, ctx: _Ctx) -> list[str]:
        """The `if` conditions around code, as source text ("not (...)" for an else branch)."""
        guards = []
        for test, taken in ctx.guards:
            # Every call under one `if` shares its test: unparse each test once (the tree outlives this).
            text = self._unparsed.get(id(test))
            if text is None:
                text = ast.unparse(test)
                if len(text) > 100:
                    text = text[:97] + "..."
                self._unparsed[id(test)] = text
            guards.append(text if taken else f"not ({text})")
        return guards
