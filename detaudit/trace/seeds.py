"""Seed values (inside every traced process): the seeds the program gives to
``torch.Generator.manual_seed``, ``np.random.default_rng``, ``random.Random`` (and its
``seed``) and ``torch.manual_seed``, with the call site; and, per site, the seeds repeated
within one step.

A step is one call of the function that loops over the samples: the function at the site when
it seeds more than once per call (``for i in ...: g.manual_seed(...)``), else the function
that called it (``[initial_noise(seed, p, s) for p, s in samples]`` in ``generate``). Its seeds
are summed up when that call is over (``{"type": "seed_group"}``: how many, how many distinct,
the values given more than once); a site that seeds one sample per call of its caller, with
two or more distinct seeds in a step and some seed given twice, gave samples of that step the
same seed: they sample alike (a rollout group of identical samples has zero advantage). The
first ``keep`` seeds of each site are written whole (``{"type": "seed_value"}``).

``torch.Generator`` cannot be patched (a C type), so ``torch.Generator`` becomes a subclass
that records ``manual_seed``; ``isinstance`` with it still holds for every generator torch
makes itself (its default generators too).
"""

from __future__ import annotations

import functools
import sys
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from detaudit.trace.frames import Invocations, plain
from detaudit.trace.imports import PostImportFinder
from detaudit.trace.recorder import Recorder

MAX_VALUES = 1 << 16   # distinct seeds kept per step and site: beyond, the step is summed up as too large
MAX_SHOWN = 16         # repeated values written per step


@dataclass
class Step:
    """The seeds one site gave within one call of a function (``level`` 0: the site's own
    function, 1: its caller)."""

    where: str
    invocation: tuple[Any, int]
    values: Counter[str] = field(default_factory=Counter)
    calls: int = 0
    overflow: bool = False


@dataclass
class SiteState:
    api: str
    own: Step | None = None       # the current call of the function at the site
    caller: Step | None = None    # the current call of its caller
    loops: bool = False           # the site's function seeds more than once per call: it is the step


class SeedValues:
    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.lock = threading.RLock()
        self.sites: dict[tuple[str, str], SiteState] = {}  # by (api, site)
        self.invocations = Invocations()

    def seeded(self, api: str, value: Any, through: str | None = None) -> None:
        """``value`` was given to ``api`` (called from the hook's wrapper). Recorded only when the
        program gave it: the caller is a frame of the program (``through``: the file of a library
        function the program calls to seed, ``random.Random.__init__``), not library internals
        (``tempfile``'s own ``Random()``)."""
        frame: FrameType | None = sys._getframe(2)
        while frame is not None and (frame.f_code.co_filename == through or frame.f_code.co_filename == __file__):
            frame = frame.f_back
        if frame is None or self.rec.sites.is_library(frame.f_code.co_filename):
            return
        text = plain(value)
        with self.lock:
            site = self.rec.sites.where(frame)
            caller = frame.f_back
            while caller is not None and self.rec.sites.is_library(caller.f_code.co_filename):
                caller = caller.f_back
            self.rec.record("seed_value", {"api": api, "site": site, "value": text}, site=site,
                            item=f"{api}|{text}")
            if value is None:
                return  # a seed from the OS: never the same twice, not a sample's seed
            state = self.sites.setdefault((api, site), SiteState(api))
            own = (frame.f_code, self.invocations.number(frame))
            if state.own is None or state.own.invocation != own:
                self._close_own(site, state)
                state.own = Step(self.rec.sites.where(frame), own)
            self._add(state.own, text)
            if state.own.calls > 1:
                state.loops = True
            if caller is None:
                return
            outer = (caller.f_code, self.invocations.number(caller))
            if state.caller is None or state.caller.invocation != outer:
                self._close_caller(site, state)
                state.caller = Step(self.rec.sites.where(caller), outer)
            self._add(state.caller, text)

    @staticmethod
    def _add(step: Step, text: str) -> None:
        step.calls += 1
        if text in step.values or len(step.values) < MAX_VALUES:
            step.values[text] += 1
        else:
            step.overflow = True

    def _close_own(self, site: str, state: SiteState) -> None:
        step, state.own = state.own, None
        if step is not None and step.calls > 1:
            self._write(site, state.api, step)

    def _close_caller(self, site: str, state: SiteState) -> None:
        step, state.caller = state.caller, None
        if step is not None and not state.loops and step.calls > 1:
            self._write(site, state.api, step)

    def _write(self, site: str, api: str, step: Step) -> None:
        repeated = sorted(((v, n) for v, n in step.values.items() if n > 1), key=lambda pair: (-pair[1], pair[0]))
        fields = {"api": api, "site": site, "step": step.where, "call": step.invocation[1], "seeds": step.calls,
                  "distinct": len(step.values), "repeated": [[v, n] for v, n in repeated[:MAX_SHOWN]],
                  "repeated_values": len(repeated), "overflow": step.overflow}
        self.rec.record("seed_group", fields)

    def flush(self) -> None:
        """The ledger ends: every step still open is over (a Ray task returned, or the process exits)."""
        with self.lock:
            for (_, site), state in self.sites.items():
                self._close_own(site, state)
                self._close_caller(site, state)


def _seed_argument(args: tuple, kwargs: dict[str, Any], name: str) -> Any:
    return args[0] if args else kwargs.get(name)


def install_torch(values: SeedValues, torch: Any) -> None:
    base = torch.Generator
    if getattr(base, "__detaudit_seeds__", False):
        return

    class _GeneratorType(type(base)):  # type: ignore[misc]
        def __instancecheck__(cls, obj: Any) -> bool:
            return isinstance(obj, base)

        def __subclasscheck__(cls, other: type) -> bool:
            return issubclass(other, base)

    class Generator(base, metaclass=_GeneratorType):  # type: ignore[misc, valid-type]
        # pickled and shown as torch.Generator: a pickle loads in a process that is not traced
        __detaudit_seeds__ = True
        __module__ = "torch"
        __qualname__ = "Generator"
        __doc__ = base.__doc__

        def manual_seed(self, seed: Any) -> Any:
            values.seeded("torch.Generator.manual_seed", seed)
            return base.manual_seed(self, seed)

    torch.Generator = Generator

    def seeding(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def manual_seed(*args: Any, **kwargs: Any) -> Any:
            values.seeded("torch.manual_seed", _seed_argument(args, kwargs, "seed"))
            return fn(*args, **kwargs)

        manual_seed.__detaudit_seeds__ = True  # type: ignore[attr-defined]
        return manual_seed

    for owner in (torch, torch.random):
        fn = getattr(owner, "manual_seed", None)
        if fn is not None and not getattr(fn, "__detaudit_seeds__", False):
            owner.manual_seed = seeding(fn)


def install_numpy(values: SeedValues, nprandom: Any) -> None:
    original = nprandom.default_rng
    if getattr(original, "__detaudit_seeds__", False):
        return

    @functools.wraps(original)
    def default_rng(*args: Any, **kwargs: Any) -> Any:
        seed = _seed_argument(args, kwargs, "seed")
        if not (hasattr(seed, "bit_generator") or type(seed).__name__ in ("PCG64", "MT19937", "Philox", "SFC64")):
            entropy = getattr(seed, "entropy", None)  # a SeedSequence: what it was seeded with
            values.seeded("np.random.default_rng", entropy if entropy is not None else seed)
        return original(*args, **kwargs)

    default_rng.__detaudit_seeds__ = True  # type: ignore[attr-defined]
    nprandom.default_rng = default_rng


def install_random(values: SeedValues, random: Any) -> None:
    """``random.Random(x)`` and ``Random.seed(x)`` of an instance the program made (the module's
    own instance, ``random.seed``, is the ledger's)."""
    original = random.Random.seed
    if getattr(original, "__detaudit_seeds__", False):
        return
    module_instance = random._inst

    @functools.wraps(original)
    def seed(self: Any, a: Any = None, version: int = 2) -> Any:
        if self is not module_instance:
            values.seeded("random.Random", a, through=random.__file__)
        return original(self, a, version)

    seed.__detaudit_seeds__ = True  # type: ignore[attr-defined]
    random.Random.seed = seed


def install(rec: Recorder, finder: PostImportFinder) -> None:
    values = SeedValues(rec)
    rec.flush_hooks.append(values.flush)
    finder.when_imported("torch", lambda torch: install_torch(values, torch))
    finder.when_imported("numpy.random", lambda nprandom: install_numpy(values, nprandom))
    finder.when_imported("random", lambda random: install_random(values, random))
