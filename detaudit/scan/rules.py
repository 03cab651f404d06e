"""The scan-rng rules: what counts as a global-RNG draw, a seed, an entropy source."""

from __future__ import annotations

from dataclasses import dataclass

@dataclass(frozen=True)
class Rule:
    """One scan-rng rule: the docs table, SARIF rule help and ``scan-rng --explain`` read it."""

    code: str
    family: str  # the process-global RNG it draws from; '' when wrong in any process
    summary: str
    why: str  # why it breaks reproducibility
    fix: str
    example: str  # a line that triggers it


_WHY_GLOBAL = ("The process-global {rng} holds whatever state the process reached: unseeded it starts from OS "
               "entropy, so two runs of the same commit draw different numbers; seeded, every other draw "
               "in the process shifts its values.")

RULE_LIST: tuple[Rule, ...] = (
    Rule("DA101", "torch", "torch draw from the global generator (no generator=)",
         _WHY_GLOBAL.format(rng="torch generator"),
         "Pass generator= a torch.Generator seeded from the run's seed, or seed the process (torch.manual_seed) "
         "before its first draw.",
         "perm = torch.randperm(n)"),
    Rule("DA102", "torch", "in-place random fill on a tensor (no generator=), probably the global torch generator",
         _WHY_GLOBAL.format(rng="torch generator"),
         "Pass generator= a seeded torch.Generator.",
         "noise.normal_(0, 1)"),
    Rule("DA103", "torch", "torch.nn.init initialiser draws from the global torch generator (no generator=)",
         _WHY_GLOBAL.format(rng="torch generator") + " Weights then differ from the first step.",
         "Pass generator= (torch >= 2.1), or seed torch before building the model.",
         "torch.nn.init.xavier_uniform_(layer.weight)"),
    Rule("DA104", "torch", "dropout draws its mask from the global torch generator",
         _WHY_GLOBAL.format(rng="torch generator"),
         "Seed torch in every process that trains (dropout has no generator= argument), or disable dropout "
         "in reproducibility runs.",
         "x = torch.nn.functional.dropout(x, p=0.1)"),
    Rule("DA201", "numpy", "legacy numpy.random function draws from the global RandomState",
         _WHY_GLOBAL.format(rng="numpy RandomState"),
         "Use rng = np.random.default_rng(seed) and rng.<method>(...).",
         "idx = np.random.permutation(n)"),
    Rule("DA202", "", "numpy generator seeded from OS entropy (no seed)",
         "A generator built without a seed takes fresh OS entropy in every run and every process.",
         "Pass a seed derived from the run's seed: np.random.default_rng(seed).",
         "rng = np.random.default_rng()"),
    Rule("DA301", "random", "module-level random function draws from the global random.Random",
         _WHY_GLOBAL.format(rng="random.Random"),
         "Use r = random.Random(seed) and r.<method>(...).",
         "random.shuffle(items)"),
    Rule("DA302", "", "stdlib random generator seeded from OS entropy",
         "random.Random() without a seed and random.SystemRandom take OS entropy in every run.",
         "Use random.Random(seed) with a seed derived from the run's seed.",
         "r = random.Random()"),
    Rule("DA303", "", "seed taken from a value that differs per run or process (time, pid, id(), hash())",
         "A seed from a clock, a process id, an object address or str hashing (varies unless PYTHONHASHSEED "
         "is set) differs on every run, so seeding with it is no seeding.",
         "Seed from the run's configured seed (plus a fixed rank or worker offset).",
         "torch.manual_seed(int(time.time()))"),
)
RULE_BY_CODE: dict[str, Rule] = {r.code: r for r in RULE_LIST}
RULES: dict[str, str] = {r.code: r.summary for r in RULE_LIST}
# The process-global RNG a rule draws from ('' for rules that are wrong in any process).
FAMILY: dict[str, str] = {r.code: r.family for r in RULE_LIST}

TORCH_DRAWS = frozenset({
    "rand", "randn", "randint", "randperm", "normal", "multinomial", "bernoulli", "poisson",
    "rand_like", "randn_like", "randint_like",
})
TORCH_INPLACE = frozenset({
    "uniform_", "normal_", "random_", "exponential_", "geometric_", "cauchy_", "log_normal_", "bernoulli_",
})
TORCH_INIT = frozenset({
    "uniform_", "normal_", "trunc_normal_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
    "kaiming_normal_", "orthogonal_", "sparse_", "uniform", "normal", "xavier_uniform", "xavier_normal",
    "kaiming_uniform", "kaiming_normal", "orthogonal", "sparse",
})
TORCH_DROPOUT = frozenset({
    "torch.nn.functional.dropout", "torch.nn.functional.dropout1d", "torch.nn.functional.dropout2d",
    "torch.nn.functional.dropout3d", "torch.nn.functional.alpha_dropout", "torch.nn.functional.feature_alpha_dropout",
    "torch.nn.Dropout", "torch.nn.Dropout1d", "torch.nn.Dropout2d", "torch.nn.Dropout3d", "torch.nn.AlphaDropout",
    "torch.nn.FeatureAlphaDropout", "torch.dropout", "torch.nn.modules.dropout.Dropout",
})
NUMPY_LEGACY = frozenset({
    "rand", "randn", "randint", "random", "random_sample", "ranf", "sample", "choice", "shuffle", "permutation",
    "normal", "uniform", "binomial", "poisson", "exponential", "beta", "gamma", "standard_normal", "bytes",
    "random_integers", "standard_exponential", "standard_gamma", "standard_cauchy", "standard_t", "chisquare",
    "dirichlet", "f", "geometric", "gumbel", "hypergeometric", "laplace", "logistic", "lognormal", "logseries",
    "multinomial", "multivariate_normal", "negative_binomial", "noncentral_chisquare", "noncentral_f", "pareto",
    "power", "rayleigh", "triangular", "vonmises", "wald", "weibull", "zipf",
})
STDLIB_DRAWS = frozenset({
    "random", "randint", "randrange", "choice", "choices", "shuffle", "sample", "uniform", "gauss",
    "normalvariate", "triangular", "betavariate", "expovariate", "getrandbits", "lognormvariate",
    "vonmisesvariate", "paretovariate", "weibullvariate", "gammavariate", "randbytes", "binomialvariate",
})

# Calls that seed a process-global RNG, by family ("*" seeds all three).
SEED_CALLS: dict[str, tuple[str, ...]] = {
    "torch.manual_seed": ("torch",),
    "torch.random.manual_seed": ("torch",),
    "torch.cuda.manual_seed": ("torch",),
    "torch.cuda.manual_seed_all": ("torch",),
    "numpy.random.seed": ("numpy",),
    "random.seed": ("random",),
    "transformers.set_seed": ("torch", "numpy", "random"),
    "transformers.trainer_utils.set_seed": ("torch", "numpy", "random"),
    "accelerate.utils.set_seed": ("torch", "numpy", "random"),
    "lightning.seed_everything": ("torch", "numpy", "random"),
    "lightning.pytorch.seed_everything": ("torch", "numpy", "random"),
    "pytorch_lightning.seed_everything": ("torch", "numpy", "random"),
    "lightning_fabric.utilities.seed.seed_everything": ("torch", "numpy", "random"),
}
FAMILIES = ("torch", "numpy", "random")

# Calls whose value differs per run or per process: no seed may come from them.
ENTROPY_CALLS = frozenset({
    "time.time", "time.time_ns", "time.perf_counter", "time.perf_counter_ns", "time.monotonic",
    "time.monotonic_ns", "time.process_time", "os.getpid", "os.getppid", "os.urandom", "id", "hash",
    "uuid.uuid1", "uuid.uuid4", "datetime.datetime.now", "datetime.datetime.utcnow", "secrets.randbits",
    "secrets.token_bytes", "secrets.token_hex", "random.SystemRandom",
})
# Seed-taking calls checked for entropy arguments (suffix match on the attribute, too).
SEED_TAKERS = frozenset({
    "torch.manual_seed", "torch.cuda.manual_seed", "torch.cuda.manual_seed_all", "torch.random.manual_seed",
    "numpy.random.seed", "random.seed", "numpy.random.default_rng", "numpy.random.RandomState",
    "numpy.random.PCG64", "numpy.random.SeedSequence", "random.Random",
})

# Dynamic dispatch: calls that return the object a dotted-path string names.
BUILTIN_LOADERS = frozenset({
    "pydoc.locate", "hydra.utils.get_method", "hydra.utils.get_class", "hydra.utils.get_object",
    "hydra._internal.utils._locate", "importlib.import_module",
})
# Calls that call the `_target_` a config names right away.
CALLING_LOADERS = frozenset({"hydra.utils.instantiate", "hydra.utils.call"})

# Impact: where a drawn value may go without making results differ between runs.
# Identifier words (split at "_") that name a port, an address, a sleep/jitter or a temp name.
SINK_WORDS = frozenset({
    "port", "ports", "addr", "address", "host", "hostname", "sock", "socket", "sleep", "jitter", "delay",
    "backoff", "tmp", "temp", "tmpdir", "tempdir", "tmpname", "tempname", "tmpfile", "tempfile", "timeout",
})
# Calls whose arguments are such sinks (prefixes).
SINK_CALLS = ("socket.", "time.sleep", "asyncio.sleep", "tempfile.")
# Calls a drawn value may pass through on its way to a sink.
PASS_THROUGH_CALLS = frozenset({"int", "str", "float", "round", "abs", "min", "max", "format", "repr", "hex"})
