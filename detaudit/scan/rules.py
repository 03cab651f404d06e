"""The scan-rng rules: what counts as a global-RNG draw, a seed, an entropy source."""

from __future__ import annotations

RULES: dict[str, str] = {
    "DA101": "torch draw from the global generator (no generator=)",
    "DA102": "in-place random fill on a tensor (no generator=), probably the global torch generator",
    "DA103": "torch.nn.init initialiser draws from the global torch generator (no generator=)",
    "DA104": "dropout draws its mask from the global torch generator",
    "DA201": "legacy numpy.random function draws from the global RandomState",
    "DA202": "numpy generator seeded from OS entropy (no seed)",
    "DA301": "module-level random function draws from the global random.Random",
    "DA302": "stdlib random generator seeded from OS entropy",
    "DA303": "seed taken from a value that differs per run or process (time, pid, id(), hash())",
}

# The process-global RNG a rule draws from ('' for rules that are wrong in any process).
FAMILY = {
    "DA101": "torch", "DA102": "torch", "DA103": "torch", "DA104": "torch",
    "DA201": "numpy", "DA301": "random",
    "DA202": "", "DA302": "", "DA303": "",
}

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
