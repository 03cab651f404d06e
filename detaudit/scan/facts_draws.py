"""Draws and entry points (``facts.FileFacts``, the draw layer): which calls the rules find
(``rules.RULE_LIST``), each draw's guards, the calls made before it and whether its value matters
(``impact``), the module whose training mode gates it (``modes``), and the entry points that
calls and decorators declare (``entries``)."""

from __future__ import annotations

import ast

from detaudit.scan import entries as E
from detaudit.scan.facts_base import MODULE_BODY, _Ctx, dotted
from detaudit.scan.facts_seeding import FactsSeeding
from detaudit.scan.impact import Scope, impact
from detaudit.scan.rules import CallSite, Rule
from detaudit.scan.schema import DrawFacts, EntryFacts, FunctionFacts

# Decorators that leave a function callable only through its own name (they wrap it, or mark it):
# a function decorated otherwise may be registered somewhere (``@register("x")``, ``@app.route``).
# Decorators that leave a function callable only through its own name (they wrap it, or mark it):
# a function decorated otherwise may be registered somewhere (``@register("x")``, ``@app.route``).
PLAIN_DECORATORS = frozenset({
    "staticmethod", "classmethod", "property", "abc.abstractmethod", "functools.cache", "functools.lru_cache",
    "functools.cached_property", "functools.wraps", "contextlib.contextmanager", "contextlib.asynccontextmanager",
    "torch.no_grad", "torch.inference_mode", "torch.enable_grad", "torch.compile", "torch.jit.script",
    "torch.jit.ignore", "torch.jit.unused", "typing.override", "typing_extensions.override", "typing.overload",
    "typing.final", "dataclasses.dataclass", "override", "overload",
})

PLAIN_DECORATOR_NAMES = frozenset({"setter", "getter", "deleter"})  # @x.setter of a property


class FactsDraws(FactsSeeding):
    """The draw layer of a file's walk (see the module doc)."""

    def _site(self, call: ast.Call, resolved: str | None, attr: str | None, ctx: _Ctx,
              function: FunctionFacts) -> CallSite:
        return CallSite(call, resolved, attr, lambda node: self.entropy_of(node, ctx), function.get("none_params", {}),
                        self._scopes.get(ctx.function))

    def _draw(self, rule: Rule, message: str, site: CallSite, ctx: _Ctx, stmt: ast.stmt | None,
              made: list[tuple[tuple[int, ...], int, tuple[str, ...]]]) -> DrawFacts:
        call = site.node
        line = call.lineno
        code = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        param = site.generator_param(rule.generator_index(site)) if rule.guardable else ""
        # Calls made before the draw, in its function, that run whenever it runs (not in a branch,
        # loop or try body that the draw is outside of): seeding there covers the draw.
        depth = len(ctx.block)
        before = [(index, families) for block, index, families in made
                  if len(block) <= depth and ctx.block[: len(block)] == block]
        seeded_here = sorted({f for _, families in before for f in families})

        def resolve(node: ast.expr) -> str:
            written = dotted(node)
            return self.resolve(written, ctx) or written or ""

        scope = self._walked.get(ctx.function)
        if scope is None and ctx.function in self._scopes:
            scope = self._walked[ctx.function] = Scope(self._scopes[ctx.function])
        inert, by_name = impact(call, stmt, ctx.function, resolve, scope)
        draw: DrawFacts = {"rule": rule.code, "message": message, "line": line, "end_line": call.end_lineno or line,
                           "col": call.col_offset + 1, "function": f"{self.module}.{ctx.function}",
                           "guards": self._guard_texts(ctx), "code": code, "param": param, "impact": inert}
        if by_name:
            draw["impact_by_name"] = by_name
        if before:
            draw["before"] = [index for index, _ in before]
        if seeded_here:
            draw["seeded_here"] = seeded_here
        if rule.library:
            draw["callee"] = site.name or ""
        switch = self._switched_by_params(ctx)
        if switch is not None:
            draw["switch"] = switch
        if rule.family == "torch":
            mode_class = self._mode_class(rule, site, ctx)
            if mode_class:
                draw["mode_class"] = mode_class
        return draw

    def _mode_call(self, receiver: ast.expr, attr: str, call: ast.Call, ctx: _Ctx, function: FunctionFacts) -> None:
        """``model.eval()``, ``self.model.train()``: [the receiver's bind key, "eval" or "train"] in the
        function's "modes" (modes.py). ``train(False)`` is ``eval()``; ``X(...).eval()`` assigned to a
        name puts that name's object in eval mode; a receiver with no key (``self``, a call's result)
        is kept as '' (an unknown object)."""
        mode = attr
        if attr == "train" and call.args and isinstance(call.args[0], ast.Constant) and call.args[0].value is False:
            mode = "eval"
        key = ""
        if isinstance(receiver, ast.Name) and receiver.id == "self" and ctx.cls is not None:
            key = f"{self.module}.{ctx.cls}"  # the class's own instances (a module putting itself in a mode)
        elif isinstance(receiver, (ast.Name, ast.Attribute)):
            key = self._bind_key(receiver, ctx) or ""
        elif isinstance(receiver, ast.Call) and mode == "eval":
            stmt = self._stmt  # model = Cls(...).eval(): the bound name is in eval mode
            if isinstance(stmt, ast.Assign) and stmt.value is call and len(stmt.targets) == 1:
                key = self._bind_key(stmt.targets[0], ctx) or ""
        function.setdefault("modes", []).append([key, mode])

    def _mode_class(self, rule: Rule, site: CallSite, ctx: _Ctx) -> str:
        """The class whose instances' training mode decides whether a draw happens: the module an
        ``nn.Dropout`` is built in (a submodule), the module a ``F.dropout(..., training=self.training)``
        or a draw under ``if self.training:`` runs in; '' for others."""
        if ctx.cls is None:
            return ""
        owner = f"{self.module}.{ctx.cls}"
        if rule.callees & {"torch.nn.Dropout"} and site.last[:1].isupper():
            return owner  # self.drop = nn.Dropout(p): a submodule of the class being built
        training = site.argument("training", 2) if site.last[:1].islower() and "dropout" in site.last else None
        if training is not None and dotted(training) == "self.training":
            return owner
        if any(taken and dotted(test) == "self.training" for test, taken in ctx.guards):
            return owner
        return ""

    def _entry(self, call: ast.Call, resolved: str | None, ctx: _Ctx) -> list[EntryFacts]:
        target: ast.expr | None = None
        kind = ""
        func = call.func
        if resolved == E.RAY_REMOTE and call.args and not call.keywords:
            target, kind = call.args[0], "ray"
        elif isinstance(func, ast.Call) and self.resolve(dotted(func.func), ctx) == E.RAY_REMOTE and call.args:
            target, kind = call.args[0], "ray"  # ray.remote(num_gpus=1)(Cls)
        elif resolved is not None and resolved.endswith(".Process") and resolved.startswith(E.MP_MODULES):
            target = next((k.value for k in call.keywords if k.arg == "target"), None)
            kind = "multiprocessing"
        elif resolved in E.MP_SPAWN and call.args:
            target, kind = call.args[0], "multiprocessing"
        elif resolved in E.RUNNERS:
            target = call.args[0] if call.args else next((k.value for k in call.keywords), None)
            kind = "cli"
            if target is None and resolved == "fire.Fire":  # fire.Fire(): every function of the module
                return [{"kind": kind, "target": f"{self.module}.{name}", "line": call.lineno}
                        for name in sorted(self.top_level) if name in self.functions]
        else:
            target = next((k.value for k in call.keywords if k.arg == "worker_init_fn"), None)
            kind = "worker-init"
        if target is None:
            return []
        return [{"kind": kind, "target": qualified, "line": call.lineno} for qualified in self._targets(target, ctx)]

    def _decorator(self, dec: ast.expr, qual: str, node: ast.FunctionDef | ast.AsyncFunctionDef, uses: list[str],
                   cls: str | None, ctx: _Ctx) -> None:
        """Entry points and pytest fixtures that a function's decorator declares."""
        func = dec.func if isinstance(dec, ast.Call) else dec
        written = dotted(func)
        name = self.resolve(written, _Ctx(MODULE_BODY, None, ())) or ""
        if name == E.RAY_REMOTE:
            self.entries.append({"kind": "ray-task", "target": f"{self.module}.{qual}", "line": node.lineno})
        elif name in E.PYTEST_FIXTURES:
            keywords = {k.arg: k.value for k in dec.keywords} if isinstance(dec, ast.Call) else {}
            autouse = keywords.get("autouse")
            alias = keywords.get("name")
            self.fixtures.append({
                "name": alias.value if isinstance(alias, ast.Constant) and isinstance(alias.value, str) else node.name,
                "target": f"{self.module}.{qual}", "uses": uses, "cls": f"{self.module}.{cls}" if cls else "",
                "autouse": isinstance(autouse, ast.Constant) and autouse.value is True})
        elif self._is_cli_decorator(written, name):
            self.entries.append({"kind": "cli", "target": f"{self.module}.{qual}", "line": node.lineno})

    def _decorators(self, decorators: list[ast.expr]) -> list[str]:
        """What each decorator that may register or replace the function calls ('?': not a name),
        leaving out those that keep it callable by its own name only (see PLAIN_DECORATORS)."""
        out = []
        for dec in decorators:
            written = dotted(dec.func if isinstance(dec, ast.Call) else dec)
            name = (self.resolve(written, _Ctx(MODULE_BODY, None, ())) or written) if written else "?"
            if name not in PLAIN_DECORATORS and name.rpartition(".")[2] not in PLAIN_DECORATOR_NAMES:
                out.append(name)
        return out

    def _is_cli_decorator(self, written: str | None, name: str) -> bool:
        """``@click.command()``, ``@click.group()``, ``@typer_app.command()``, ``@cli.command()``."""
        if written is None or written.rpartition(".")[2] not in E.CLI_DECORATOR_METHODS:
            return False
        if name.split(".")[0] in E.CLI_DECORATOR_MODULES:
            return True
        owner = written.rpartition(".")[0]
        # a click group or typer app of this module, in a module that imports click or typer
        return "." not in owner and (owner in self.top_level or (MODULE_BODY, owner) in self.values) and any(
            v.split(".")[0] in E.CLI_DECORATOR_MODULES for v in self.imports.values())
