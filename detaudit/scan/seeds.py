"""The scan-rng vocabulary of seeding: which calls seed a process-global RNG (and which families),
which take a seed, which reseed from entropy, which make a generator of their own, and the names
that say a call may seed (``set_random_seed``) or that an object holds its own generator.

rules.py reads these for its entropy rule (DA106) and ``seed_families``; the file walker for the
seeds it records.
"""

from __future__ import annotations

FAMILIES = ("torch", "numpy", "random")
# Calls that seed a process-global RNG, by family, when given a seed that is not None and not
# taken from the clock or the OS.
SEED_CALLS: dict[str, tuple[str, ...]] = {
    "torch.manual_seed": ("torch",),
    "torch.random.manual_seed": ("torch",),
    "torch.cuda.manual_seed": ("torch",),
    "torch.cuda.manual_seed_all": ("torch",),
    "numpy.random.seed": ("numpy",),
    "random.seed": ("random",),
    "transformers.set_seed": FAMILIES,
    "transformers.trainer_utils.set_seed": FAMILIES,
    "transformers.enable_full_determinism": FAMILIES,
    "transformers.trainer_utils.enable_full_determinism": FAMILIES,
    "accelerate.utils.set_seed": FAMILIES,
    "accelerate.utils.random.set_seed": FAMILIES,
    "lightning.seed_everything": FAMILIES,
    "lightning.pytorch.seed_everything": FAMILIES,
    "lightning.fabric.seed_everything": FAMILIES,
    "pytorch_lightning.seed_everything": FAMILIES,
    "lightning_fabric.utilities.seed.seed_everything": FAMILIES,
    "lightning.fabric.utilities.seed.seed_everything": FAMILIES,
    # detaudit's own seeding API, for projects that seed through it (the scan need not hold detaudit)
    "detaudit.env.determinism.seed_everything": FAMILIES,
    "detaudit.env.determinism.enable": FAMILIES,
    "detaudit.env.determinism.seed_python_and_numpy": ("numpy", "random"),
}
# Seeding calls that a flag switches off: callee -> the keyword (given False, the call seeds nothing;
# computed from the caller's parameters, it seeds only where the caller's arguments make it true).
SEED_FLAGS: dict[str, str] = {"detaudit.env.determinism.enable": "seed_rngs"}
# Calls that reseed a global RNG from a value that differs per run (they take no seed).
RESEED_FROM_ENTROPY = frozenset({"torch.seed", "torch.random.seed", "torch.cuda.seed", "torch.cuda.seed_all"})
# Calls whose value differs per run or per process: no seed may come from them.
ENTROPY_CALLS = frozenset({
    "time.time", "time.time_ns", "time.perf_counter", "time.perf_counter_ns", "time.monotonic",
    "time.monotonic_ns", "time.process_time", "time.process_time_ns", "os.getpid", "os.getppid", "os.urandom",
    "id", "hash", "uuid.uuid1", "uuid.uuid4", "datetime.datetime.now", "datetime.datetime.utcnow",
    "datetime.now", "datetime.utcnow", "secrets.randbits", "secrets.token_bytes", "secrets.token_hex",
    "secrets.randbelow", "random.SystemRandom", "torch.seed", "torch.initial_seed",
})
# Seed-taking calls checked for entropy arguments (a called attribute `manual_seed` / `seed` is, too).
SEED_TAKERS = frozenset(SEED_CALLS) | frozenset({
    "numpy.random.default_rng", "numpy.random.RandomState", "numpy.random.PCG64", "numpy.random.SeedSequence",
    "random.Random",
})
# Calls that make a generator object of their own: its manual_seed()/seed() seeds no global RNG.
GENERATOR_MAKERS = frozenset({"torch.Generator", "numpy.random.default_rng", "numpy.random.RandomState",
                              "numpy.random.Generator", "random.Random"})
# Names of objects that hold a generator of their own (``g.manual_seed(0)``, ``self.rng.seed(1)``).
GENERATOR_NAMES = frozenset({"g", "gen", "generator", "rng", "random_state"})

# Seeding calls that, given no seed (or None), seed from OS entropy.
SEED_FROM_NOTHING = frozenset(SEED_CALLS) - {"torch.manual_seed", "torch.random.manual_seed", "torch.cuda.manual_seed",
                                              "torch.cuda.manual_seed_all", "transformers.enable_full_determinism",
                                              "transformers.trainer_utils.enable_full_determinism",
                                              "detaudit.env.determinism.seed_everything", "detaudit.env.determinism.enable",
                                              "detaudit.env.determinism.seed_python_and_numpy"}


# Seed-like calls that are known: judged as seeds already, or seeding no global RNG.
NOT_UNKNOWN_SEEDS = frozenset(SEED_CALLS) | SEED_TAKERS | RESEED_FROM_ENTROPY | ENTROPY_CALLS


def seed_like(name: str) -> bool:
    """A callee whose name says it may seed (``set_random_seed``, ``init_seed``), that is not one
    of the seeding or seed-taking calls judged otherwise."""
    return "seed" in name.rpartition(".")[2].lower() and name not in NOT_UNKNOWN_SEEDS


def seed_like_families(name: str) -> tuple[str, ...]:
    """The RNG families a seed-like call may seed, by its name: a CUDA or torch one
    (``model_parallel_cuda_manual_seed``) only torch's, a numpy one only numpy's, any other all."""
    last = name.rpartition(".")[2].lower()
    if "cuda" in last or "torch" in name.lower() or last.startswith("manual_seed"):
        return ("torch",)
    if "numpy" in name.lower() or last.startswith("np_"):
        return ("numpy",)
    return FAMILIES


def generator_holder(receiver: str) -> bool:
    """A receiver named as a generator object: ``g``, ``self.rng``, ``train_generator``."""
    last = receiver.rpartition(".")[2].lower()
    return last in GENERATOR_NAMES or last.endswith(("_generator", "_rng", "_gen"))
