"""What a call names (``facts.FileFacts``, the call layer): its callee as a qualified name or a
dispatch key (a bound value, a loader's result, a registry entry), the values bound to names that
later calls use, loaders and their arguments, names built at run time, and the kind of object a
call is made on (a diffusers pipeline, a process or thread pool)."""

from __future__ import annotations

import ast
import re
from typing import Any

from detaudit.scan import entries as E
from detaudit.scan.facts_base import MAIN_BLOCK, MODULE_BODY, FactsBase, _Ctx, _dotted_string, dotted
from detaudit.scan.rules import DIFFUSERS_PIPELINE
from detaudit.scan.schema import LOCAL, SUPER, TABLE

# A diffusers pipeline class in a qualified name: StableDiffusion3Pipeline, AutoPipelineForText2Image.
_PIPELINE_CLASS = re.compile(r"(?:^|\.)(?:[A-Za-z0-9_]*Pipeline|AutoPipeline[A-Za-z0-9_]*)(?:\.|$)")

# Methods of a module or pipeline that return the object itself.
_SAME_OBJECT = frozenset({"to", "cuda", "cpu", "half", "float", "bfloat16", "eval", "train", "requires_grad_"})


class FactsCalls(FactsBase):
    """The call layer of a file's walk (see the module doc)."""

    def call_name(self, call: ast.Call, ctx: _Ctx) -> tuple[str | None, str | None]:
        """(dotted name as written, what the call denotes: a qualified name or a dispatch key)."""
        func = call.func
        if isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "getattr" \
                and len(func.args) >= 2 and isinstance(func.args[1], ast.Constant) and isinstance(func.args[1].value, str):
            owner = dotted(func.args[0])  # getattr(module, "fn")(...) is module.fn(...)
            if owner is not None:
                written = f"{owner}.{func.args[1].value}"
                return written, self.resolve(written, ctx)
        name = dotted(func)
        resolved = self.resolve(name, ctx)
        if resolved is not None or ctx.function == MODULE_BODY:
            return name, resolved
        if name is not None:
            # A name bound to a call's result (maybe a loaded function): keep it as a dispatch key.
            head, _, rest = name.partition(".")
            if head in ("self", "cls"):
                return name, None
            tail = f".{rest}" if rest else ""
            module_key = f"{self.module}.{head}"
            if ctx.function == MAIN_BLOCK:
                return name, (module_key + tail if module_key in self.bound else None)
            local_key = f"{self.module}.{ctx.function}{LOCAL}{head}"
            if local_key in self.bound or module_key in self.bound:
                return name, local_key + tail
            return name, None
        # super().m(...) inside a class
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call) and ctx.cls is not None \
                and isinstance(func.value.func, ast.Name) and func.value.func.id == "super":
            return None, f"{self.module}.{ctx.cls}{SUPER}{func.attr}"
        # load(path)(...) and import_module(m).f(...): the result of a call, called
        inner = func.value if isinstance(func, ast.Attribute) else func
        if isinstance(inner, ast.Call):
            key = f"{self.module}.{ctx.function}@{inner.lineno}:{inner.col_offset}"
            self.binds.append((key, inner, ctx))
            return None, key + (f".{func.attr}" if isinstance(func, ast.Attribute) else "")
        return None, None

    def _targets(self, node: ast.expr, ctx: _Ctx, depth: int = 0) -> list[str]:
        """What an entry point's argument names: a function or class, through local aliases
        (``impl = FSDPActor`` ... ``ray.remote(impl)``), conditional ones and ``functools.partial``."""
        resolved = self.resolve(dotted(node), ctx)
        if resolved is not None:
            return [resolved]
        if depth > 3:
            return []
        if isinstance(node, ast.IfExp):
            return self._targets(node.body, ctx, depth + 1) + self._targets(node.orelse, ctx, depth + 1)
        if isinstance(node, ast.Call) and node.args and (self.resolve(dotted(node.func), ctx) or "") == "functools.partial":
            return self._targets(node.args[0], ctx, depth + 1)
        out: list[str] = []
        registry = node.value if isinstance(node, ast.Subscript) else node.func.value if (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get") else None
        if registry is not None:  # REGISTRY[name] or REGISTRY.get(name): every function of a dict literal
            for table in self._values_of(registry, ctx):
                if isinstance(table, ast.Dict):
                    for value in table.values:
                        out += [t for t in self._targets(value, ctx, depth + 1) if t not in out]
            if not out:  # a table of another module, or one filled by a registering decorator: resolved by the analysis
                qualified = self.resolve(dotted(registry), ctx)
                if qualified is None and isinstance(registry, ast.Name) and (MODULE_BODY, registry.id) in self.values \
                        and (ctx.function, registry.id) not in self.values:
                    qualified = f"{self.module}.{registry.id}"
                if qualified is not None:
                    out.append(qualified + TABLE)
            return out
        for value in self._values_of(node, ctx):
            out += [t for t in self._targets(value, ctx, depth + 1) if t not in out]
        return out

    def _bind_facts(self) -> list[list[Any]]:
        """[key, what the call denotes, its code, what its first argument names] for each bound call
        result that a call of this file uses (a loaded function, an object whose methods are called).

        The argument: "=pkg.mod.fn" for a dotted-string constant, else the last name of an
        attribute chain or a name ("expand_path" for ``args.expand_path``), else ''.
        """
        binds: list[list[Any]] = []
        called = {c for f in self.functions.values() for c in f["calls"]}
        owners = {c.rpartition(".")[0] for c in called}
        heads = {c.partition(LOCAL)[2].split(".")[0] for c in called if LOCAL in c}
        seen: set[tuple[str, int]] = set()
        for key, call, ctx in self.binds:
            name = key.partition(LOCAL)[2] if LOCAL in key else key[len(self.module) + 1 :]
            is_attr = LOCAL not in key and "@" not in key and name.partition(".")[0] in self.classes
            if key not in called and key not in owners and "@" not in key and name not in heads and not is_attr:
                continue
            if (key, id(call)) in seen:
                continue
            seen.add((key, id(call)))
            _, resolved = self.call_name(call, ctx) if not isinstance(call.func, ast.Call) else (None, None)
            if resolved is None:
                continue
            binds.append([key, resolved, self._source_of(call), self._loader_argument(call, ctx), call.lineno])
        for key, cls_name in dict.fromkeys(self.typed):  # an annotation: an object of that class
            name = key.partition(LOCAL)[2] if LOCAL in key else key[len(self.module) + 1 :]
            if key in called or key in owners or name in heads:
                binds.append([key, cls_name, f"(annotated {cls_name.rpartition('.')[2]})", "", 0])
        return binds

    def _loader_argument(self, call: ast.Call, ctx: _Ctx) -> str:
        """What a loader call's first argument names (see _argument_name), or, for a lookup in a
        dict (``MODULES[key]``, ``MODULES.get(key)``) of this module or one it imports,
        ``[pkg.mod.MODULES``: the loader gets one of that dict's values."""
        arg = call.args[0] if call.args else None
        table = arg.value if isinstance(arg, ast.Subscript) and not (
            isinstance(arg.slice, ast.Constant) and isinstance(arg.slice.value, str)) else (
            arg.func.value if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute)
            and arg.func.attr == "get" else None)
        if table is not None:
            qualified = self.resolve(dotted(table), ctx)
            if qualified is None and isinstance(table, ast.Name) and (MODULE_BODY, table.id) in self.values \
                    and (ctx.function, table.id) not in self.values:
                qualified = f"{self.module}.{table.id}"
            if qualified is not None:
                return "[" + qualified
        return _argument_name(call)

    def _listed_owner(self, listed: ast.expr | None, ctx: _Ctx) -> str | None:
        """What a listing of attributes (``vars(x)``, ``x.__dict__``, ``getmembers(x)``) can reach, as
        a qualified module or class ('' any module: ``sys.modules[name]``), or None: locals, or an
        object the file cannot place (``vars(args)``: a namespace, not code of the tree)."""
        if listed is None:
            return self.module if ctx.function in (MODULE_BODY, MAIN_BLOCK) else None
        if isinstance(listed, ast.Subscript) and dotted(listed.value) == "sys.modules" and \
                self.resolve("sys", ctx) == "sys":
            index = listed.slice
            return self.module if isinstance(index, ast.Name) and index.id == "__name__" else ""
        written = dotted(listed)
        if written in ("self", "cls") and ctx.cls:
            return f"{self.module}.{ctx.cls}"
        return self.resolve(written, ctx)

    def _built_name(self, node: ast.expr, ctx: _Ctx) -> str:
        """A regex of the attribute names ``getattr(x, node)`` can look up, when the code builds the
        name at run time: ``f"w13_{x}"`` -> ``w13_.*``; in a function that lists an object's
        attributes (``dir(x)``, ``vars(x)``, ``__dict__``, ``inspect.getmembers``): ``.*``. '' for
        a constant, or a value taken from elsewhere (a variable, a parameter, ``cfg.method``): it is
        one of the tree's strings (which count as names themselves) or of its config files, the
        over-approximation dynamic dispatch makes too."""
        if isinstance(node, ast.Constant):
            return ""
        return _name_regex(node) or (".*" if ctx.function in self.reflecting else "")

    def _object_kind(self, node: ast.expr, ctx: _Ctx, depth: int = 0) -> str:
        """The kind of object (rules.OBJECT_KINDS) a name or ``self.x`` is bound to in this file, or ''.
        A diffusers pipeline: made by a diffusers ``*Pipeline`` class, its ``from_pretrained``, or a
        class of this file that derives from one; ``.to(...)``, ``.cuda()`` of one is one."""
        if depth > 3 or (type(node) is ast.Attribute and not (
                isinstance(node.value, ast.Name) and node.value.id == "self")):
            return ""
        for value in self._values_of(node, ctx):
            kind = self._made_kind(value, ctx, depth)
            if kind:
                return kind
        return ""

    def _made_kind(self, value: ast.expr, ctx: _Ctx, depth: int) -> str:
        """The kind of object an expression makes: ``FluxPipeline.from_pretrained(p)``, ``.to("cuda")``
        of one, or a name bound to one (see _object_kind)."""
        if not isinstance(value, ast.Call) or depth > 3:
            return ""
        made = self.resolve(dotted(value.func), ctx) or ""
        if (made.startswith("diffusers.") and _PIPELINE_CLASS.search(made)) or self._derives_from_pipeline(made):
            return DIFFUSERS_PIPELINE
        func = value.func
        if isinstance(func, ast.Attribute) and func.attr in _SAME_OBJECT:  # X.to("cuda") is X
            if isinstance(func.value, ast.Call):
                return self._made_kind(func.value, ctx, depth + 1)
            if isinstance(func.value, (ast.Name, ast.Attribute)):
                return self._object_kind(func.value, ctx, depth + 1)
        return ""

    def _derives_from_pipeline(self, made: str) -> bool:
        """``made`` (a qualified name) is, or is a method of, a class of this file that derives from a
        diffusers pipeline class."""
        local = made[len(self.module) + 1:] if made.startswith(self.module + ".") else ""
        cls = self.classes.get(local) or self.classes.get(local.rpartition(".")[0])
        return cls is not None and any(b.startswith("diffusers.") and _PIPELINE_CLASS.search(b) for b in cls["bases"])

    def _pool_kind(self, receiver: ast.expr, ctx: _Ctx) -> str:
        """"process" when ``receiver`` is a process pool (``Pool(4)``, ``ProcessPoolExecutor()``, a
        context's ``ctx.Pool()``, or a name or ``self.x`` assigned one, ``with ... as`` too),
        "thread" for a thread pool, else ''."""
        for value in [receiver] if isinstance(receiver, ast.Call) else self._values_of(receiver, ctx):
            if not isinstance(value, ast.Call):
                continue
            made = self.resolve(dotted(value.func), ctx) or ""
            if made in E.PROCESS_POOLS or (isinstance(value.func, ast.Attribute) and value.func.attr == "Pool"
                                           and made not in E.THREAD_POOLS):
                return "process"
            if made in E.THREAD_POOLS:
                return "thread"
        return ""


def _option_attr(call: ast.Call, keyword: str) -> str:
    """The attribute a keyword's value ends up in: ``add_argument("--expand-path", default=...)``
    sets ``args.expand_path`` (or its ``dest=``); any other keyword names itself."""
    func = call.func
    if keyword == "default" and isinstance(func, ast.Attribute) and func.attr == "add_argument":
        for k in call.keywords:
            if k.arg == "dest" and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str):
                return k.value.value
        options = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        long = [o for o in options if o.startswith("--")] or options
        if long:
            return long[0].lstrip("-").replace("-", "_")
    return keyword


def _argument_name(call: ast.Call) -> str:
    """What a loader call's first argument names: '=dotted.string', 'attr' of ``x.attr``, 'name', or ''."""
    arg = call.args[0] if call.args else next((k.value for k in call.keywords), None)
    if arg is None:
        return ""
    if isinstance(arg, ast.Constant):
        text = _dotted_string(arg.value)
        return f"={text}" if text else ""
    if isinstance(arg, ast.Attribute):
        return arg.attr
    if isinstance(arg, ast.Name):
        return arg.id
    if isinstance(arg, ast.Subscript) and isinstance(arg.slice, ast.Constant) and isinstance(arg.slice.value, str):
        return arg.slice.value  # cfg["expand_path"]
    return ""


def _none_params(args: ast.arguments, is_method: bool) -> dict[str, int]:
    """Parameters that default to None -> positional index (self/cls not counted; -1: keyword-only)."""
    positional = args.posonlyargs + args.args
    if is_method and positional:
        positional = positional[1:]
    out: dict[str, int] = {}
    defaults = args.defaults
    for i, (arg, default) in enumerate(zip(positional[len(positional) - len(defaults):], defaults, strict=False)):
        if isinstance(default, ast.Constant) and default.value is None:
            out[arg.arg] = len(positional) - len(defaults) + i
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=False):
        if isinstance(kw_default, ast.Constant) and kw_default.value is None:
            out[arg.arg] = -1
    return out


def _call_site(call: ast.Call, none_params: dict[str, int]) -> tuple[int, int, tuple[str, ...]]:
    """A call's details as stored: (line, positional count, keywords passed a value other than None).

    A ``generator=None`` guard needs these to tell call sites that pass a generator from those that don't.
    """
    starred = False
    for a in call.args:  # a loop, not any() over a generator: this runs for every resolved call
        if type(a) is ast.Starred:
            starred = True
            break
    passed = []
    for k in call.keywords:
        if k.arg is None:
            passed.append("**")  # **kwargs: any parameter may be given
            continue
        if isinstance(k.value, ast.Constant) and k.value.value is None:
            continue
        # forwarding our own None-default parameter: "kw<param" (passes only if our caller passes)
        passed.append(f"{k.arg}<{k.value.id}" if isinstance(k.value, ast.Name) and k.value.id in none_params else k.arg)
    return (call.lineno, 99 if starred else len(call.args), tuple(passed))


def _name_regex(node: ast.expr, depth: int = 0) -> str:
    """A regex of the strings an f-string or a ``+`` / ``%`` / ``.format`` of string constants and
    values can make (a value: ``.*``); '' when the expression is none of those."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.escape(node.value)
    if depth > 8:
        return ""
    if isinstance(node, ast.JoinedStr):
        return "".join(re.escape(v.value) if isinstance(v, ast.Constant) and isinstance(v.value, str) else ".*"
                       for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return (_name_regex(node.left, depth + 1) or ".*") + (_name_regex(node.right, depth + 1) or ".*")
    template = None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        template, holes = node.left, r"%[^a-zA-Z%]*[a-zA-Z%]"
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        template, holes = node.func.value, r"\{[^{}]*\}"
    if isinstance(template, ast.Constant) and isinstance(template.value, str):
        return ".*".join(re.escape(part) for part in re.split(holes, template.value))
    return ""
