"""The RNG ledger: wrap every sampler that draws from a process-global generator.

Generators: torch's CPU default generator (``torch.cpu``) and each CUDA default generator
(``torch.cuda:N``), numpy's legacy global ``RandomState`` (``numpy``), Python's ``random``
(``random``). Wrapped: the torch functional samplers (``torch.randperm``, ``torch.rand``, ...),
the in-place tensor samplers (``Tensor.uniform_``, ``normal_``, ... which ``nn.init`` uses),
``multinomial`` / ``bernoulli``, the dropout family of ``torch.nn.functional`` (``nn.Dropout``
calls it); numpy's module-level samplers; ``random``'s module-level functions. A call with an
explicit ``generator=`` is not a global draw and costs one dict lookup.

Seeding is wrapped too (``torch.manual_seed``, ``torch.seed``, ``set_rng_state``, the CUDA
ones, ``np.random.seed`` / ``set_state``, ``random.seed`` / ``setstate``). A state read with
``get_rng_state`` and set back later (``torch.random.fork_rng``) restores the seeded status it
had, so a model built under ``fork_rng`` + ``manual_seed`` does not make the process "seeded".
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import Any

from detaudit.trace.imports import PostImportFinder
from detaudit.trace.recorder import Recorder

TORCH_FUNCTIONS = ("rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "normal",
                   "bernoulli", "multinomial", "poisson", "binomial", "_standard_gamma", "_sample_dirichlet")
TORCH_SIZE_FUNCTIONS = {"rand", "randn", "randint", "randperm"}  # device from device= or the default
TENSOR_METHODS = ("uniform_", "normal_", "random_", "bernoulli_", "exponential_", "geometric_", "log_normal_",
                  "cauchy_", "bernoulli", "multinomial")
DROPOUTS = ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "rrelu")
RANDOM_DRAWS = ("random", "uniform", "triangular", "randint", "choice", "randrange", "sample", "shuffle", "choices",
                "normalvariate", "lognormvariate", "expovariate", "vonmisesvariate", "gammavariate", "gauss",
                "betavariate", "paretovariate", "weibullvariate", "getrandbits", "randbytes", "binomialvariate")
NUMPY_NOT_DRAWS = {"seed", "get_state", "set_state", "RandomState", "get_bit_generator", "set_bit_generator",
                   "default_rng", "Generator"}


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


class _StateMemory:
    """Fingerprints of states a program read back (``get_rng_state``) and the seeded status
    they had, so that setting one back restores the status."""

    def __init__(self) -> None:
        self.saved: dict[tuple[str, str], dict[str, Any] | None] = {}

    def remember(self, rec: Recorder, gen: str, fingerprint: str) -> None:
        if len(self.saved) < 4096:
            info = rec.seeded.get(gen)
            self.saved[(gen, fingerprint)] = dict(info) if info else None

    def restore(self, rec: Recorder, gen: str, fingerprint: str, how: str) -> None:
        key = (gen, fingerprint)
        if key in self.saved:
            info = self.saved[key]
            if info is None:
                rec.seeded.pop(gen, None)
            else:
                rec.seeded[gen] = info
            return
        rec.seed(gen, how)


def _wrap(rec: Recorder, fn: Callable[..., Any], op: str,
          target: Callable[[tuple, dict], tuple[str, Callable[[], str]] | None]) -> Callable[..., Any]:
    """``fn`` that first records a draw when ``target(args, kwargs)`` names a global generator."""
    local = rec.local

    @functools.wraps(fn)
    def traced(*args: Any, **kwargs: Any) -> Any:
        depth = getattr(local, "depth", 0)
        if depth == 0:
            found = target(args, kwargs)
            if found is not None:
                rec.draw(found[0], op, found[1])
        local.depth = depth + 1
        try:
            return fn(*args, **kwargs)
        finally:
            local.depth = depth

    traced.__detaudit_traced__ = True  # type: ignore[attr-defined]
    return traced


def seed_argument(args: tuple, kwargs: dict, name: str) -> Any:
    """The seed a seeding call was given (its first argument, or the keyword ``name``);
    None when it was given none: then the seed comes from the OS."""
    if args:
        return args[0]
    return kwargs.get(name)


def _wrap_seed(rec: Recorder, fn: Callable[..., Any], gens: tuple[str, ...], how: str,
               seed_name: str | None = None) -> Callable[..., Any]:
    """``fn`` that records seeding ``gens``. ``seed_name``: the seed parameter of a function
    that seeds from the OS when its seed is None (``random.seed(a=None)``,
    ``np.random.seed(seed=None)``); functions whose name ends in ``()`` always do."""
    local = rec.local

    @functools.wraps(fn)
    def seeding(*args: Any, **kwargs: Any) -> Any:
        depth = getattr(local, "depth", 0)
        local.depth = depth + 1
        try:
            result = fn(*args, **kwargs)
        finally:
            local.depth = depth
        if depth == 0:
            entropy = how.endswith("()")
            label = how
            if seed_name is not None and seed_argument(args, kwargs, seed_name) is None:
                entropy, label = True, how + "()"  # a seed from the OS, not a reproducible one
            for gen in gens:
                rec.seed(gen, label, entropy=entropy)
        return result

    seeding.__detaudit_traced__ = True  # type: ignore[attr-defined]
    return seeding


def _replace(owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    fn = getattr(owner, name, None)
    if fn is None or getattr(fn, "__detaudit_traced__", False):
        return
    setattr(owner, name, make(fn))


# --- torch -----------------------------------------------------------------------------------

def install_torch(rec: Recorder, torch: Any) -> None:
    memory = _StateMemory()
    cpu = torch.default_generator

    def cpu_state() -> str:
        state = cpu.get_state()
        try:
            return _digest(state.numpy().tobytes())
        except Exception:
            return _digest(bytes(state.tolist()))

    def cuda_state(index: int) -> Callable[[], str]:
        return lambda: _digest(bytes(torch.cuda.get_rng_state(index).tolist()))

    def for_device(device: Any) -> tuple[str, Callable[[], str]] | None:
        kind = device.type
        if kind == "cpu":
            return "torch.cpu", cpu_state
        if kind == "meta":
            return None  # meta tensors are never filled
        if kind == "cuda":
            index = device.index if device.index is not None else torch.cuda.current_device()
            return f"torch.cuda:{index}", cuda_state(index)
        return f"torch.{kind}", lambda: "?"

    def first_tensor(args: tuple, kwargs: dict) -> Any:
        for value in args:
            if isinstance(value, torch.Tensor):
                return value
        for value in kwargs.values():
            if isinstance(value, torch.Tensor):
                return value
        return None

    def from_tensor(args: tuple, kwargs: dict) -> tuple[str, Callable[[], str]] | None:
        if kwargs.get("generator") is not None:
            return None
        tensor = first_tensor(args, kwargs)
        return for_device(tensor.device) if tensor is not None else ("torch.cpu", cpu_state)

    def from_device(args: tuple, kwargs: dict) -> tuple[str, Callable[[], str]] | None:
        if kwargs.get("generator") is not None:
            return None
        device = kwargs.get("device")
        if device is None:
            device = torch.get_default_device()
        elif not isinstance(device, torch.device):
            device = torch.device(device)
        return for_device(device)

    def from_dropout(args: tuple, kwargs: dict) -> tuple[str, Callable[[], str]] | None:
        training = kwargs.get("training", args[2] if len(args) > 2 else True)
        p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
        if not training or p == 0:
            return None
        return from_tensor(args, kwargs)

    def from_rrelu(args: tuple, kwargs: dict) -> tuple[str, Callable[[], str]] | None:
        training = kwargs.get("training", args[3] if len(args) > 3 else False)
        return from_tensor(args, kwargs) if training else None

    try:
        # `with torch.device(d):` finds the factories to redirect by identity in a set torch
        # builds once, from the attributes of `torch` at that time. Build it now, before the
        # wrappers replace them: the originals the wrappers call are then the ones it knows.
        from torch.utils._device import _device_constructors

        _device_constructors()
    except (ImportError, AttributeError):
        pass
    for name in TORCH_FUNCTIONS:
        pick = from_device if name in TORCH_SIZE_FUNCTIONS else from_tensor
        _replace(torch, name, functools.partial(_wrap, rec, op=f"torch.{name}", target=pick))
    for name in TENSOR_METHODS:
        _replace(torch.Tensor, name, functools.partial(_wrap, rec, op=f"Tensor.{name}", target=from_tensor))
    functional = torch.nn.functional
    for name in DROPOUTS:
        pick = from_rrelu if name == "rrelu" else from_dropout
        _replace(functional, name, functools.partial(_wrap, rec, op=f"F.{name}", target=pick))

    cuda_gens = ("torch.cuda",)
    for owner in (torch, torch.random):
        _replace(owner, "manual_seed", lambda fn: _wrap_seed(rec, fn, ("torch.cpu",) + cuda_gens, "torch.manual_seed"))
        _replace(owner, "seed", lambda fn: _wrap_seed(rec, fn, ("torch.cpu",) + cuda_gens, "torch.seed()"))

    def get_cpu(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def get_rng_state(*args: Any, **kwargs: Any) -> Any:
            state = fn(*args, **kwargs)
            try:
                memory.remember(rec, "torch.cpu", _digest(state.numpy().tobytes()))
            except Exception:
                pass
            return state

        get_rng_state.__detaudit_traced__ = True  # type: ignore[attr-defined]
        return get_rng_state

    def set_cpu(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def set_rng_state(new_state: Any, *args: Any, **kwargs: Any) -> Any:
            result = fn(new_state, *args, **kwargs)
            try:
                memory.restore(rec, "torch.cpu", _digest(new_state.numpy().tobytes()), "torch.set_rng_state")
            except Exception:
                rec.seed("torch.cpu", "torch.set_rng_state")
            return result

        set_rng_state.__detaudit_traced__ = True  # type: ignore[attr-defined]
        return set_rng_state

    for owner in (torch, torch.random):
        _replace(owner, "get_rng_state", get_cpu)
        _replace(owner, "set_rng_state", set_cpu)
    cuda = getattr(torch, "cuda", None)
    if cuda is not None:
        for owner in (cuda, getattr(cuda, "random", None)):
            if owner is None:
                continue
            for name, how in (("manual_seed", "torch.cuda.manual_seed"), ("manual_seed_all", "torch.cuda.manual_seed_all"),
                              ("seed", "torch.cuda.seed()"), ("seed_all", "torch.cuda.seed_all()"),
                              ("set_rng_state", "torch.cuda.set_rng_state"),
                              ("set_rng_state_all", "torch.cuda.set_rng_state_all")):
                _replace(owner, name, functools.partial(_wrap_seed, rec, gens=cuda_gens, how=how))


def _trace_state_calls(rec: Recorder, owner: Any, gen: str, state: Callable[[], str], get_name: str,
                       set_name: str, how: str) -> None:
    """Wrap ``owner.get_name``/``owner.set_name``: a state put back counts as where it came from.

    ``fork_rng``-style code saves the state, draws, and sets it back; the ledger must then
    treat the generator as seeded (or not) exactly as it was when the state was saved.
    """
    memory = _StateMemory()

    def get(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def get_state(*args: Any, **kwargs: Any) -> Any:
            result = fn(*args, **kwargs)
            memory.remember(rec, gen, state())
            return result

        get_state.__detaudit_traced__ = True  # type: ignore[attr-defined]
        return get_state

    def put(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def set_state(*args: Any, **kwargs: Any) -> Any:
            result = fn(*args, **kwargs)
            memory.restore(rec, gen, state(), how)
            return result

        set_state.__detaudit_traced__ = True  # type: ignore[attr-defined]
        return set_state

    _replace(owner, get_name, get)
    _replace(owner, set_name, put)


# --- numpy -----------------------------------------------------------------------------------

def install_numpy(rec: Recorder, nprandom: Any) -> None:
    mtrand = nprandom.mtrand

    def state() -> str:
        name, keys, pos, has_gauss, cached = mtrand._rand.get_state(legacy=True)
        return _digest(keys.tobytes() + f"|{pos}|{has_gauss}|{cached!r}".encode())

    def target(args: tuple, kwargs: dict) -> tuple[str, Callable[[], str]]:
        return "numpy", state

    for name in getattr(mtrand, "__all__", ()):
        if name in NUMPY_NOT_DRAWS or name.startswith("_"):
            continue
        fn = getattr(nprandom, name, None)
        if callable(fn) and getattr(fn, "__self__", None) is mtrand._rand:
            _replace(nprandom, name, functools.partial(_wrap, rec, op=f"np.random.{name}", target=target))
    _replace(nprandom, "seed", lambda fn: _wrap_seed(rec, fn, ("numpy",), "np.random.seed", seed_name="seed"))
    _trace_state_calls(rec, nprandom, "numpy", state, "get_state", "set_state", "np.random.set_state")


# --- random ----------------------------------------------------------------------------------

def install_random(rec: Recorder, random: Any) -> None:
    inst = random._inst

    def state() -> str:
        # hash() of a tuple of ints is the same in every process (no PYTHONHASHSEED, no ids).
        version, words, gauss = inst.getstate()
        return format(hash(words) & 0xFFFFFFFFFFFFFFFF, "016x") + ("" if gauss is None else f"/{gauss!r}")

    def target(args: tuple, kwargs: dict) -> tuple[str, Callable[[], str]]:
        return "random", state

    for name in RANDOM_DRAWS:
        if hasattr(random, name):
            _replace(random, name, functools.partial(_wrap, rec, op=f"random.{name}", target=target))
    _replace(random, "seed", lambda fn: _wrap_seed(rec, fn, ("random",), "random.seed", seed_name="a"))

    _trace_state_calls(rec, random, "random", state, "getstate", "setstate", "random.setstate")


def install(rec: Recorder, finder: PostImportFinder) -> None:
    """Patch ``random`` now, torch and numpy when the program imports them."""
    import random

    install_random(rec, random)
    finder.when_imported("torch", lambda torch: install_torch(rec, torch))
    finder.when_imported("numpy.random", lambda nprandom: install_numpy(rec, nprandom))
