"""Training mode: whether a module's draws can happen in a process (docs/scan-rng.md, "Draws a process does not make").

Dropout (``nn.Dropout`` built as a submodule, ``F.dropout(x, training=self.training)``) and any
draw under ``if self.training:`` draw only while their module is in training mode, the mode every
``nn.Module`` starts in. A process runs no such draw of class ``C`` when the tree shows every
instance of ``C`` that the process builds put in eval mode and never back in training mode:

- every call in the process that builds a ``C`` (or a subclass, or a factory of the tree that
  returns one) binds the result to a name or ``self.x``, and that name gets ``.eval()`` (or
  ``.train(False)``) in the process; an instance held as ``self.x`` by a module ``D`` that is
  itself eval-only counts too (``D.eval()`` sets its submodules' mode);
- no ``.train()`` in the process is called on that name, on ``self`` of such a class, or on an
  object the scan cannot place (a parameter, a call's result): that object might be a ``C``.

An instance the scan cannot follow (built inline, handed to another function, built by library
code such as ``from_pretrained``) keeps the draw: the answer only ever under-states.
"""

from __future__ import annotations

from detaudit.scan.analysis import Program
from detaudit.scan.processes import Process
from detaudit.scan.schema import NO_FUNCTION

MAX_HOLDERS = 4  # modules holding modules followed (a transformer's block's MLP's dropout)


class Modes:
    """Answers ``eval_only`` for the classes and processes of one scan (see the module doc)."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self._known: dict[tuple[str, int], str] = {}
        self._modes: dict[int, dict[str, set[str]]] = {}  # id of a reach -> bind key -> modes set there

    def _modes_in(self, process: Process) -> dict[str, set[str]]:
        """Bind key ('' unknown object) -> the modes (eval, train) the process's code sets on it."""
        known = self._modes.get(id(process.reach))
        if known is None:
            known = {}
            for function in process.reach:
                for key, mode in self.program.functions.get(function, NO_FUNCTION).get("modes", ()):
                    known.setdefault(key, set()).add(mode)
            self._modes[id(process.reach)] = known
        return known

    def eval_only(self, cls: str, process: Process, depth: int = 0) -> str:
        """Why every instance of ``cls`` that ``process`` builds is in eval mode for good, or ''."""
        cache_key = (cls, id(process.reach))
        known = self._known.get(cache_key)
        if known is not None:
            return known
        self._known[cache_key] = ""  # a cycle of holders proves nothing
        why = self._eval_only(cls, process, depth)
        self._known[cache_key] = why
        return why

    def _eval_only(self, cls: str, process: Process, depth: int) -> str:
        program = self.program
        if depth > MAX_HOLDERS:
            return ""
        classes = {cls, *program.subclasses(cls)}
        modes = self._modes_in(process)
        if "train" in modes.get("", ()):
            return ""  # .train() on an object the scan cannot place
        for key, set_modes in modes.items():
            if "train" in set_modes and key and self._may_hold(key, classes):
                return ""
        keys = self._instance_keys(classes, process, set())
        if not keys:
            return ""
        shown = []
        for key in sorted(keys):
            holder = key.rpartition(".")[0]
            if "eval" in modes.get(key, ()):
                shown.append(key)
            elif holder in program.classes and self.eval_only(holder, process, depth + 1):
                shown.append(holder)
            else:
                return ""
        names = ", ".join(sorted({k.rpartition(".")[2].rpartition(">.")[2] for k in shown}))
        return (f"every {cls.rpartition('.')[2]} this process builds is put in eval mode ({names}) and never back "
                f"in training mode")

    def _instance_keys(self, classes: set[str], process: Process, seen: set[str]) -> set[str] | None:
        """The bind keys the instances of ``classes`` built in ``process`` end up in, or None when one
        is built and not bound (or no building call is seen at all)."""
        program = self.program
        keys: set[str] = set()
        found = False
        for made in sorted(classes):
            if made not in program.functions or made in seen:
                continue
            seen.add(made)
            for caller, site in program.callers(made):
                if caller not in process.reach:
                    continue
                found = True
                bound = program.bind_lines.get((program.module_of.get(caller, ""), site[1]))
                if bound:
                    keys.update(bound)
                    continue
                factory_of = program.functions.get(caller, NO_FUNCTION).get("makes", ())
                if not any(program.canonical(m, root=program.root(caller)) in classes for m in factory_of):
                    return None  # built and handed on, or built inline
                more = self._instance_keys({caller}, process, seen)  # a factory: where its results go
                if more is None:
                    return None
                keys |= more
        return keys if found else None

    def _may_hold(self, key: str, classes: set[str]) -> bool:
        """Whether the object under bind key ``key`` may be an instance of one of ``classes``: yes
        unless the tree shows every value bound to it is of other classes."""
        program = self.program
        if key in program.classes:  # self.train() in a module class
            return key in classes or any(c in classes for c in program.mro(key))
        binds = program.binds.get(key)
        if not binds:
            return True
        for loader, _, _ in binds:
            made = program.instance_classes(loader, program.root(key.rpartition(".")[0]) or None)
            if not made or any(m in classes or classes & set(program.mro(m)) for m in made):
                return True
        return False
