"""What the tree shows about code no pipeline process is seen to run (docs/scan-rng.md, "Verdicts").

Two questions, each answered from the whole scanned tree:

- **Does a pipeline process load the module?** ``loaded_modules``: the modules that hold code the
  pipeline's processes run (dotted-path dispatch included), and every module those import,
  transitively (imports inside functions too: the function may run).
- **Can anything but tests call the function?** ``Naming``: code calls a function or method through
  its name. One that no non-test code of the tree names (as an attribute, a name it uses or
  imports, a string passed to a call: ``getattr(actor, "m")``, ``group.run_all("m")``, or a dotted
  path ``"pkg.mod.fn"``), that no name the code builds at run time can match
  (``getattr(x, f"w13_{k}")`` matches ``w13_*``; a name taken from ``dir(x)`` matches all), and that
  no other string or config word names where a lookup by a run-time name could reach it
  (``getattr(x, cfg.fn)`` on an unknown object, on its module or on its class: a string that is only
  assigned or compared, ``config.prompt_fn = "imagenet_animals"``, calls nothing), and that no code
  of its own module that can run uses by bare name (a helper only dead functions call is dead
  too: flow_grpo's ``from_file``, called only by prompt functions nothing names), is called by
  nothing but tests, as long as only a name can reach it: a module-level function or a method
  of a class whose bases are all the tree's own, not decorated (a decorator may register it) and
  not a dunder (the language calls those).

Ray actor methods are process entry points only when named (``processes``); a draw no pipeline
process runs is judged with both answers (``findings``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from detaudit.scan.analysis import Program, display_name
from detaudit.scan.schema import MAIN_BLOCK, MODULE_BODY, NO_CLASS, NO_FUNCTION

# Bases that call none of a class's own methods by name (only dunders, which always count as called).
PLAIN_BASES = frozenset({"object", "abc.ABC", "typing.Generic", "typing.Protocol", "typing_extensions.Protocol",
                         "Exception", "BaseException"})


@dataclass
class Mentions:
    """What the tree's non-test code mentions, gathered by the scanner from every file (those set
    aside by the prefilter too)."""

    names: set[str] = field(default_factory=set)  # identifiers it uses: attributes, names, strings passed to calls
    string_names: set[str] = field(default_factory=set)  # identifier strings elsewhere (assigned, listed, compared)
    # bare-name uses of a file's own top-level defs: (module key, name) -> qualnames of the code using it
    local_uses: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    script_strings: set[str] = field(default_factory=set)  # strings naming a .py file ("python pkg/train.py")
    # lookups by a name taken from a value: (module key of the file, what owns the attribute: a
    # qualified name as written there or '' when unknown)
    lookups: list[tuple[str, str]] = field(default_factory=list)
    # names it builds at run time: (module key of the file, what owns the attribute: a qualified name
    # as written there or '' when unknown, a regex of the names it can build)
    built: list[tuple[str, str, str]] = field(default_factory=list)
    imported: dict[str, list[str]] = field(default_factory=dict)  # module key -> what its imports name (set-aside files)
    # which of the given names a config file of the tree (YAML, JSON, TOML, shell) holds as a word
    in_config: Callable[[set[str]], set[str]] | None = None
    # the dotted names (pkg.mod, pkg.mod.fn, pkg.mod:fn) the config files hold
    dotted_in_config: Callable[[], set[str]] | None = None


def is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def loaded_modules(program: Program, running: set[str], imported: dict[str, list[str]]) -> set[str]:
    """The module keys that processes running code of the modules ``running`` load: those modules,
    their packages, and every module they import, transitively (``imported``: the import lists of
    the files that did not join the analysis)."""
    out: set[str] = set()
    todo = list(running)
    while todo:
        module = todo.pop()
        if module in out:
            continue
        out.add(module)
        facts = program.modules.get(module)
        names = facts.get("imported", ()) if facts is not None else imported.get(module, ())
        root = program.root_of.get(module)
        dotted_name = program.dotted_name(module)
        for name in [*names, dotted_name.rpartition(".")[0]]:  # `import a.b.c` runs a, a.b and a.b.c
            if not program.may_name_module(name):
                continue  # torch, os.path: not the tree's
            parts = name.split(".")
            for end in range(1, len(parts) + 1):
                key = program.module_key(".".join(parts[:end]), root)
                if key is not None and key not in out:
                    todo.append(key)
    return out


class Naming:
    """Whether the tree's non-test code names a function (see the module doc)."""

    def __init__(self, program: Program, mentions: Mentions) -> None:
        self.program = program
        self.mentions = mentions
        self._built: list[tuple[str, str, re.Pattern[str]]] | None = None  # (kind, owner key, regex)
        self._in_config: dict[str, bool] = {}
        self._callable: dict[str, bool] = {}
        self._dotted: set[str] | None = None  # see dotted_names
        self._lookups: list[tuple[str, str]] | None = None  # (kind, owner key) of each lookup: see looked_up
        self._live_uses: dict[str, set[str]] = {}  # module -> its defs live code of it uses (_module_live_uses)
        self._uses_by_module: dict[str, list[tuple[str, set[str]]]] | None = None

    def named(self, function: str) -> bool:
        """Non-test code names ``function`` (its last name: a use, an import, a string passed to a
        call, a dotted path in code or config), or a name built at run time can be it, or a string
        or config word names it where a lookup by a run-time name can reach it; a dunder always
        counts as named."""
        short = function.rpartition(".")[2]
        if is_dunder(short) or short in self.mentions.names or self._used_by_live_code(function):
            return True
        return self.named_otherwise(function)

    def named_otherwise(self, function: str) -> bool:
        """A name built at run time can be ``function``, or a string or config word names it where a
        lookup by a run-time name can reach it."""
        short = function.rpartition(".")[2]
        if any(regex.fullmatch(short) and self._owns(kind, owner, function) for kind, owner, regex in self._matchers()):
            return True
        program = self.program
        module = program.module_of.get(function, "")
        if function.startswith(f"{module}.") and \
                f"{program.dotted_name(module)}{function[len(module):]}" in self.dotted_names():
            return True  # a dotted path in code or config (Hydra `_target_`, an entry point) names it
        if not self.looked_up(function):
            return False  # a string alone calls nothing: `config.prompt_fn = "imagenet_animals"` compared, never looked up
        if short in self.mentions.string_names:
            return True
        known = self._in_config.get(short)
        if known is None:
            found = self.mentions.in_config({short}) if self.mentions.in_config is not None else set()
            known = self._in_config[short] = short in found
        return known

    def _used_by_live_code(self, function: str) -> bool:
        """A top-level def that code of its own module that can run uses by bare name."""
        module = self.program.module_of.get(function, "")
        if function != f"{module}.{function.rpartition('.')[2]}":
            return False
        live = self._live_uses.get(module)
        if live is None:
            live = self._live_uses[module] = self._module_live_uses(module)
        return function in live

    def _module_live_uses(self, module: str) -> set[str]:
        """The top-level defs of ``module`` that live code of the module uses by bare name: one
        pass over its uses (a fixpoint: a def that live code uses is live, and so is what it uses;
        calls among dead functions alone keep them dead)."""
        if self._uses_by_module is None:
            self._uses_by_module = {}
            for (owner, name), users in self.mentions.local_uses.items():
                self._uses_by_module.setdefault(owner, []).append((name, users))
        uses_of: dict[str, list[str]] = {}  # code -> the module's defs it uses
        for name, users in self._uses_by_module.get(module, ()):
            for user in users:
                uses_of.setdefault(user, []).append(f"{module}.{name}")
        todo = [user for user in sorted(uses_of) if self._runs_anyway(user)]
        seen = set(todo)
        live: set[str] = set()
        while todo:
            for used in uses_of.get(todo.pop(), ()):
                live.add(used)
                if used not in seen:
                    seen.add(used)
                    todo.append(used)
        return live

    def _runs_anyway(self, code: str) -> bool:
        """Code can run whatever its module's own uses say: module-level code, a class body, a
        method, a nested function, or a function named by more than a bare name of its module."""
        program = self.program
        if code not in program.functions or code in program.classes or code.endswith((MODULE_BODY, MAIN_BLOCK)):
            return True
        if program.functions[code].get("cls") is not None or not self.only_by_name(code):
            return True  # a method: its object may reach code outside the tree (an env a library steps)
        short = code.rpartition(".")[2]
        return is_dunder(short) or short in self.mentions.names or self.named_otherwise(code)

    def looked_up(self, function: str) -> bool:
        """Some lookup by a name taken from a value (``getattr(x, cfg.fn)``, ``methodcaller(name)``)
        can reach ``function``: its owner is unknown, or is the function's module or a class of its."""
        if self._lookups is None:
            program = self.program
            owners: set[tuple[str, str]] = set()
            for module, owner in self.mentions.lookups:
                if not owner:
                    owners.add(("", ""))
                    continue
                root = program.root_of.get(module)
                cls = program.canonical(owner, root=root)
                key = program.module_key(owner, root)
                if cls in program.classes:
                    owners.add(("class", cls))
                elif key is not None:
                    owners.add(("module", key))
                # else a library's object (getattr(torch.optim, cfg.name)): none of the tree's functions
            self._lookups = sorted(owners)
        return any(self._owns(kind, owner, function) for kind, owner in self._lookups)

    def dotted_names(self) -> set[str]:
        """Every module a dotted string of the tree's code or config files names, or names a function
        or class of (``pkg.mod.fn`` -> ``pkg.mod.fn``, ``pkg.mod``, ``pkg``): what a loader may load."""
        if self._dotted is None:
            texts = {t for strings in self.program.strings.values() for t in strings}
            if self.mentions.dotted_in_config is not None:
                texts |= self.mentions.dotted_in_config()
            out: set[str] = set()
            for text in texts:
                parts = text.replace(":", ".").split(".")
                out.update(".".join(parts[:end]) for end in range(1, len(parts) + 1))
            self._dotted = out
        return self._dotted

    def only_by_name(self, function: str) -> bool:
        """Only a call through its own name can run ``function``: a module-level function or a
        method of a top-level class whose bases are all the tree's own, neither decorated (nor the
        class)."""
        program = self.program
        info = program.functions.get(function)
        module = program.module_of.get(function)
        if info is None or module is None or info.get("decorators") or function.endswith((MODULE_BODY, MAIN_BLOCK)):
            return False
        short = function.rpartition(".")[2]
        if is_dunder(short):
            return False
        cls = info.get("cls")
        if cls is None:
            return function == f"{module}.{short}"  # not a function nested in another
        klass = f"{module}.{cls}"
        if any(d != "ray.remote" for d in program.classes.get(klass, NO_CLASS).get("decorators", ())):
            return False  # a class decorator may register the class (a Ray actor's methods are judged by name)
        return "." not in cls and self.plain_class(klass) and not self.handed_over(klass)

    def handed_over(self, cls: str) -> bool:
        """A dotted path of the tree's code or config files names ``cls`` or a class it inherits from
        (``worker_extension_cls="pkg.mod.Ext"``): code outside the tree may build it and call its methods."""
        program, paths = self.program, self.dotted_names()
        return any(f"{program.dotted_name(program.module_of.get(k, ''))}.{k.rpartition('.')[2]}" in paths
                   for k in program.mro(cls))

    def plain_class(self, cls: str) -> bool:
        """Every class ``cls`` inherits from is the tree's own (or a plain ``object``/``ABC``/``Protocol``):
        no library code calls its methods by their names (overrides of a library's methods)."""
        known = self._callable.get(cls)
        if known is None:
            program = self.program
            known = True
            for klass in program.mro(cls):
                info = program.classes.get(klass, NO_CLASS)
                root = program.root(klass)
                if info.get("opaque_bases") or any(
                        base not in PLAIN_BASES and program.canonical(base, root=root) not in program.classes
                        for base in info.get("bases", ())):
                    known = False
                    break
            self._callable[cls] = known
        return known

    def unnamed(self, function: str) -> bool:
        """Nothing but tests can call ``function``: only its name reaches it, and no non-test code names it."""
        return self.only_by_name(function) and not self.named(function)

    def _matchers(self) -> list[tuple[str, str, re.Pattern[str]]]:
        """(what the owner is: '' any object, 'module', 'class'; its key; regex) for each built name."""
        if self._built is None:
            program = self.program
            built: dict[tuple[str, str], set[str]] = {}
            for module, owner, regex in self.mentions.built:
                root = program.root_of.get(module)
                if not owner:
                    built.setdefault(("", ""), set()).add(regex)
                    continue
                cls = program.canonical(owner, root=root)
                key = program.module_key(owner, root)
                if cls in program.classes:
                    built.setdefault(("class", cls), set()).add(regex)
                elif key is not None:
                    built.setdefault(("module", key), set()).add(regex)
                # else a library's object (getattr(torch, name)): none of the tree's functions
            self._built = [(kind, owner, re.compile("|".join(f"(?:{r})" for r in sorted(regexes))))
                           for (kind, owner), regexes in sorted(built.items())]
        return self._built

    def _owns(self, kind: str, owner: str, function: str) -> bool:
        if not kind:
            return True
        program = self.program
        info = program.functions.get(function, NO_FUNCTION)
        if kind == "module":
            return info.get("cls") is None and program.module_of.get(function) == owner
        cls = f"{program.module_of.get(function, '')}.{info.get('cls')}" if info.get("cls") else ""
        return bool(cls) and (owner in program.mro(cls) or cls in program.mro(owner))

    def reason(self, function: str) -> str:
        short = display_name(function).rpartition(".")[2]
        module = self.program.module_of.get(function, "")
        users = sorted(self.mentions.local_uses.get((module, short), ()))
        if users:
            shown = ", ".join(u.rpartition(".")[2] for u in users[:3]) + (f" and {len(users) - 3} more" if len(users) > 3 else "")
            return (f"only {shown} of its own module use {short}, and nothing outside tests can call them; "
                    f"only a call by name can run it")
        return f"nothing outside tests names {short}, which only a call by that name can run"
