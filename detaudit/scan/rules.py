"""The scan-rng rules: what counts as a global-RNG draw or a seed taken from entropy (the seeding
calls themselves: seeds.py; where a drawn value may go harmlessly: impact.py).

Each rule is one ``Rule`` record: its code, RNG family, the text of the docs table, SARIF rule
help and ``scan-rng --explain``, and what it matches: the qualified callee names and called
attribute names it looks at (``callees``, ``methods``) and ``find``, which reads one call and
returns the finding's message or None. Adding a rule touches its record (and its test) only:
the file walker dispatches on ``callees`` and ``methods`` and never names a rule.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field

from detaudit.scan.completion_order import CALLEES as COMPLETION_ORDER_CALLEES
from detaudit.scan.completion_order import batch_reached
from detaudit.scan.seeds import RESEED_FROM_ENTROPY, SEED_CALLS, SEED_FROM_NOTHING, SEED_TAKERS


class CallSite:
    """What a rule sees of one call: the callee's qualified name, the called attribute, the arguments.

    ``entropy_of`` (given by the file walker) names the per-run source of an argument's value
    (``time.time`` for ``int(time.time())`` or for a local set from it), or returns None.
    ``none_params``: the enclosing function's parameters that default to None.
    ``scope``: the function definition (or module) the call is in.
    """

    __slots__ = ("_entropy_of", "_none_params", "attr", "name", "node", "scope")

    def __init__(self, node: ast.Call, name: str | None, attr: str | None,
                 entropy_of: Callable[[ast.expr], str | None], none_params: dict[str, int],
                 scope: ast.AST | None = None) -> None:
        self.node = node
        self.name = name
        self.attr = attr
        self._entropy_of = entropy_of
        self._none_params = none_params
        self.scope = scope  # the function (or module) the call is in, for rules that follow its results

    @property
    def last(self) -> str:
        """The callee's last name: ``randperm`` for ``torch.randperm``."""
        return (self.name or self.attr or "").rpartition(".")[2]

    def argument(self, keyword: str, index: int | None = None) -> ast.expr | None:
        """The value passed as ``keyword=``, or positionally at ``index`` (None: keyword only)."""
        for k in self.node.keywords:
            if k.arg == keyword:
                return k.value
        args = self.node.args
        if index is not None and index < len(args) and not any(isinstance(a, ast.Starred) for a in args[: index + 1]):
            return args[index]
        return None

    def has_argument(self, keyword: str, index: int | None = None) -> bool:
        """A value other than the constant None is passed (``*args`` at or before ``index`` counts)."""
        args = self.node.args
        if index is not None and any(isinstance(a, ast.Starred) for a in args[: index + 1]):
            return True
        value = self.argument(keyword, index)
        return value is not None and not _is_none(value)

    def forwarded_param(self, keyword: str, index: int | None = None) -> str:
        """The enclosing function's None-default parameter passed as ``keyword=``, or ''."""
        value = self.argument(keyword, index)
        return value.id if isinstance(value, ast.Name) and value.id in self._none_params else ""

    def generator_param(self, index: int | None = None) -> str:
        """The enclosing function's None-default parameter passed as ``generator=``, or ''.

        ``generator=generator`` guards the draw only at the call sites that pass one.
        """
        return self.forwarded_param("generator", index)

    def passes_generator(self, index: int | None = None) -> bool:
        """A generator other than None (or a None-default parameter of the caller) is passed."""
        return self.has_argument("generator", index) and not self.generator_param(index)

    def seed_arguments(self) -> list[ast.expr]:
        return list(self.node.args) + [k.value for k in self.node.keywords if k.arg in ("seed", "x", "entropy", "a")]

    def unseeded(self) -> bool:
        """No seed, or only None, is given: the generator takes OS entropy."""
        return all(_is_none(a) for a in self.seed_arguments())

    def entropy(self) -> str | None:
        """The per-run source (clock, pid, id(), hash()) an argument's value comes from, or None."""
        for arg in list(self.node.args) + [k.value for k in self.node.keywords]:
            source = self._entropy_of(arg)
            if source:
                return source
        return None


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


@dataclass(frozen=True, eq=False)
class Rule:
    """One scan-rng rule: the docs table, SARIF rule help and ``scan-rng --explain`` read it.

    ``find`` sees every call whose qualified callee is in ``callees`` or whose called attribute
    is in ``methods`` and returns the finding's message, or None. A rule with ``guardable`` set
    is guarded by ``generator=`` (or positionally, at ``generator_positions[last name]``), and
    ``generator=generator`` forwarding the caller's None-default parameter makes it a finding at
    the call sites that pass none.
    ``library``: the callee may be defined in the scanned tree; the finding is dropped when it
    is (the tree's own code is scanned instead).
    ``objects``: kinds of object (see ``OBJECT_KINDS``) whose call ``find`` also sees, when the
    callee is a name or ``self.x`` the file binds to such an object (``pipe = FluxPipeline(...)``
    ... ``pipe(prompt)``).
    """

    code: str
    family: str  # the process-global RNG it draws from; '' when wrong in any process
    summary: str
    why: str  # why it breaks reproducibility
    fix: str
    example: str  # a line that triggers it
    find: Callable[[CallSite], str | None] = field(repr=False)
    callees: frozenset[str] = frozenset()
    methods: frozenset[str] = frozenset()
    guardable: bool = False
    generator_positions: dict[str, int] = field(default_factory=dict)
    library: bool = False
    objects: frozenset[str] = frozenset()

    def generator_index(self, site: CallSite) -> int | None:
        """Where ``site`` may pass its generator positionally (None: keyword only)."""
        return self.generator_positions.get(site.last)


_WHY_GLOBAL = ("The process-global {rng} holds whatever state the process reached: unseeded it starts from OS "
               "entropy, so two runs of the same commit draw different numbers; seeded, every other draw "
               "in the process shifts its values.")

# -- what each draw rule matches ------------------------------------------------------------

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
# Kinds of object a rule can match the calls of (Rule.objects); the file walker tells them from
# what a name is bound to (facts.FileFacts._object_kind).
DIFFUSERS_PIPELINE = "diffusers pipeline"  # made by a diffusers *Pipeline class (or from_pretrained of one)
# Each kind, with one call that makes such an object (tests build one from it).
# (The walker looks for an object's calls only in files whose text holds "Pipeline": a new kind
# adds its own word there, facts.FileFacts._objects.)
OBJECT_MAKERS = {DIFFUSERS_PIPELINE: "diffusers.DiffusionPipeline.from_pretrained"}
OBJECT_KINDS = frozenset(OBJECT_MAKERS)
# diffusers' noise helpers: `generator=None` (the default) draws from the global torch generator.
DIFFUSERS_RANDN = frozenset({"diffusers.utils.torch_utils.randn_tensor", "diffusers.utils.randn_tensor"})
# randn_tensor(shape, generator=None, ...); a pipeline's
# prepare_latents(batch_size, channels, height, width, dtype, device, generator, latents=None)
DIFFUSERS_GENERATOR_POSITIONS = {"randn_tensor": 1, "prepare_latents": 6}
SHUFFLING_LOADERS = frozenset({
    "torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader",
    "torchdata.stateful_dataloader.StatefulDataLoader", "torchdata.stateful_dataloader.stateful_dataloader.StatefulDataLoader",
})
RANDOM_SAMPLERS = frozenset({"torch.utils.data.RandomSampler", "torch.utils.data.sampler.RandomSampler"})
NUMPY_LEGACY = frozenset({
    "rand", "randn", "randint", "random", "random_sample", "ranf", "sample", "choice", "shuffle", "permutation",
    "normal", "uniform", "binomial", "poisson", "exponential", "beta", "gamma", "standard_normal", "bytes",
    "random_integers", "standard_exponential", "standard_gamma", "standard_cauchy", "standard_t", "chisquare",
    "dirichlet", "f", "geometric", "gumbel", "hypergeometric", "laplace", "logistic", "lognormal", "logseries",
    "multinomial", "multivariate_normal", "negative_binomial", "noncentral_chisquare", "noncentral_f", "pareto",
    "power", "rayleigh", "triangular", "vonmises", "wald", "weibull", "zipf",
})
NUMPY_UNSEEDED = frozenset({
    "numpy.random.default_rng", "numpy.random.RandomState", "numpy.random.PCG64", "numpy.random.PCG64DXSM",
    "numpy.random.SeedSequence", "numpy.random.MT19937", "numpy.random.Philox", "numpy.random.SFC64",
})
STDLIB_DRAWS = frozenset({
    "random", "randint", "randrange", "choice", "choices", "shuffle", "sample", "uniform", "gauss",
    "normalvariate", "triangular", "betavariate", "expovariate", "getrandbits", "lognormvariate",
    "vonmisesvariate", "paretovariate", "weibullvariate", "gammavariate", "randbytes", "binomialvariate",
})

# -- seeding (the calls, by family, and the names that say a call may seed: seeds.py) ------------


def seed_families(site: CallSite) -> tuple[str, ...]:
    """The RNG families a call seeds: none when it seeds from nothing, None, or a per-run value."""
    families = SEED_CALLS.get(site.name or "")
    if not families or site.unseeded() or site.entropy():
        return ()
    return families


# -- the rules ---------------------------------------------------------------------------------


def _torch_draw(site: CallSite) -> str | None:
    if site.passes_generator():
        return None
    return f"torch.{site.last}() draws from the global torch generator; pass generator="


def _inplace_fill(site: CallSite) -> str | None:
    # torch.nn.init.normal_ etc. resolve to a module path: not a tensor method.
    if site.passes_generator() or (site.name is not None and site.name.split(".")[0] in ("torch", "numpy", "random", "math")):
        return None
    return f".{site.attr}() fills a tensor from the global torch generator; pass generator="


def _init_draw(site: CallSite) -> str | None:
    if site.passes_generator():
        return None
    return f"torch.nn.init.{site.last}() draws from the global torch generator; pass generator="


def _dropout(site: CallSite) -> str | None:
    if site.last[:1].islower():  # F.dropout(x, p, training): no mask drawn when training is False
        training = site.argument("training", 2)
        if isinstance(training, ast.Constant) and training.value is False:
            return None
    p = site.argument("p", 1 if site.last[:1].islower() else 0)
    if isinstance(p, ast.Constant) and type(p.value) in (int, float) and p.value == 0:
        return None  # p=0: dropout returns its input and draws nothing
    return f"{site.last} draws its mask from the global torch generator"


def _diffusers_noise(site: CallSite) -> str | None:
    index = DIFFUSERS_GENERATOR_POSITIONS[site.last]
    if site.passes_generator(index):
        return None
    if site.last == "randn_tensor":
        return "randn_tensor() with generator=None draws the noise from the global torch generator; pass generator="
    # given latents, prepare_latents draws nothing (a None-default parameter forwarded may be None)
    if site.has_argument("latents", index + 1) and not site.forwarded_param("latents", index + 1):
        return None
    return "prepare_latents() with generator=None draws the initial noise from the global torch generator; pass generator="


def _pipeline_call(site: CallSite) -> str | None:
    if site.has_argument("generator") or site.has_argument("latents"):
        return None
    if any(k.arg is None for k in site.node.keywords):
        return None  # **kwargs may hold a generator: not judged (docs/scan-rng.md)
    return ("a diffusers pipeline called without generator= or latents= draws its initial noise from the global "
            "torch generator; pass generator=")


def _shuffling_sampler(site: CallSite) -> str | None:
    if site.passes_generator():
        return None
    if site.name in RANDOM_SAMPLERS:
        return "RandomSampler without generator= takes its shuffle seed from the global torch generator; pass generator="
    shuffle = site.argument("shuffle", 2)  # (a DataLoader refuses shuffle=True with a sampler=)
    if shuffle is None or (isinstance(shuffle, ast.Constant) and not shuffle.value):
        return None
    when = "" if isinstance(shuffle, ast.Constant) else f" (shuffle={ast.unparse(shuffle)[:60]})"
    return (f"{site.last}(shuffle=True) without generator= takes its shuffle seed from the global torch generator"
            f"{when}; pass generator=")


def _numpy_legacy(site: CallSite) -> str | None:
    return f"numpy.random.{site.last}() draws from the global RandomState; use a seeded np.random.default_rng(seed)"


def _numpy_unseeded(site: CallSite) -> str | None:
    if not site.unseeded():
        return None
    return f"numpy.random.{site.last}() without a seed takes OS entropy"


def _stdlib_draw(site: CallSite) -> str | None:
    return f"random.{site.last}() draws from the global random.Random; use random.Random(seed)"


def _stdlib_unseeded(site: CallSite) -> str | None:
    if site.name == "random.SystemRandom":
        return "random.SystemRandom draws from the OS and cannot be seeded"
    if not site.unseeded():
        return None
    return "random.Random() without a seed takes OS entropy"


def _completion_order_batch(site: CallSite) -> str | None:
    if site.name is None:
        return None
    reached = batch_reached(site.node, site.name, site.scope)
    if reached is None:
        return None
    return (f"{site.name} hands results back as their work completes, and they reach {reached[0]} (line "
            f"{reached[1]}): the batch's order follows which work finished first")


def _entropy_seed(site: CallSite) -> str | None:
    if site.name in RESEED_FROM_ENTROPY:
        return f"{site.name}() reseeds from a value that differs per run"
    source = site.entropy()
    if source:
        return f"seed comes from {source}(), which differs per run or process"
    if site.name in SEED_FROM_NOTHING and site.unseeded():
        given = "None" if site.seed_arguments() else "no seed"
        return f"{site.name}() with {given} seeds from OS entropy or the clock, which differs per run"
    return None


def _qualified(modules: tuple[str, ...], names: frozenset[str]) -> frozenset[str]:
    return frozenset(f"{m}.{n}" for m in modules for n in names)


RULE_LIST: tuple[Rule, ...] = (
    Rule("DA101", "torch", "torch draw from the global generator (no generator=)",
         _WHY_GLOBAL.format(rng="torch generator"),
         "Pass generator= a torch.Generator seeded from the run's seed, or seed the process (torch.manual_seed) "
         "before its first draw.",
         "perm = torch.randperm(n)",
         find=_torch_draw, callees=_qualified(("torch", "torch.random"), TORCH_DRAWS), guardable=True),
    Rule("DA102", "torch", "in-place random fill on a tensor (no generator=), probably the global torch generator",
         _WHY_GLOBAL.format(rng="torch generator"),
         "Pass generator= a seeded torch.Generator.",
         "noise.normal_(0, 1)",
         find=_inplace_fill, methods=TORCH_INPLACE, guardable=True),
    Rule("DA103", "torch", "torch.nn.init initialiser draws from the global torch generator (no generator=)",
         _WHY_GLOBAL.format(rng="torch generator") + " Weights then differ from the first step.",
         "Pass generator= (torch >= 2.1), or seed torch before building the model.",
         "torch.nn.init.xavier_uniform_(layer.weight)",
         find=_init_draw, callees=_qualified(("torch.nn.init",), TORCH_INIT), guardable=True),
    Rule("DA104", "torch", "dropout draws its mask from the global torch generator",
         _WHY_GLOBAL.format(rng="torch generator"),
         "Seed torch in every process that trains (dropout has no generator= argument), or disable dropout "
         "in reproducibility runs.",
         "x = torch.nn.functional.dropout(x, p=0.1)",
         find=_dropout, callees=TORCH_DROPOUT),
    Rule("DA105", "torch", "diffusers noise helper with generator=None (randn_tensor, a pipeline's prepare_latents) "
         "draws from the global torch generator",
         "diffusers' randn_tensor and every pipeline's prepare_latents take generator=None by default and then "
         "draw the initial latents (the rollout noise itself) from the process-global torch generator: "
         + _WHY_GLOBAL.format(rng="torch generator"),
         "Pass generator= a torch.Generator seeded per sample from the run's seed (or pass latents= drawn "
         "from one).",
         "latents = randn_tensor(shape, device=device, dtype=dtype)",
         find=_diffusers_noise, callees=DIFFUSERS_RANDN, methods=frozenset({"prepare_latents"}), guardable=True,
         generator_positions=DIFFUSERS_GENERATOR_POSITIONS, library=True),
    Rule("DA106", "torch", "DataLoader(shuffle=True) or RandomSampler without generator= shuffles with a seed from "
         "the global torch generator",
         "A shuffling DataLoader builds a RandomSampler, which draws its seed for every epoch from the "
         "process-global torch generator when no generator= is given: the data order then follows whatever "
         "that generator's state is. " + _WHY_GLOBAL.format(rng="torch generator"),
         "Pass generator= a torch.Generator seeded from the run's seed (or use a seeded sampler, such as "
         "DistributedSampler(seed=...)).",
         "loader = DataLoader(dataset, batch_size=8, shuffle=True)",
         find=_shuffling_sampler, callees=SHUFFLING_LOADERS | RANDOM_SAMPLERS, guardable=True),
    Rule("DA107", "torch", "diffusers pipeline called without generator= or latents= draws its initial noise from "
         "the global torch generator",
         "A diffusers pipeline's __call__ builds its initial latents with randn_tensor(generator=generator) when no "
         "latents= are given; with generator=None (the default) that noise, the starting point of every sample and of "
         "every rollout of a diffusion policy, comes from the process-global torch generator. "
         + _WHY_GLOBAL.format(rng="torch generator"),
         "Pass generator= a torch.Generator (one per sample, seeded from the run's seed), or latents= drawn from one.",
         "images = pipe(prompt, num_inference_steps=28).images",
         find=_pipeline_call, objects=frozenset({DIFFUSERS_PIPELINE})),
    Rule("DA201", "numpy", "legacy numpy.random function draws from the global RandomState",
         _WHY_GLOBAL.format(rng="numpy RandomState"),
         "Use rng = np.random.default_rng(seed) and rng.<method>(...).",
         "idx = np.random.permutation(n)",
         find=_numpy_legacy, callees=_qualified(("numpy.random",), NUMPY_LEGACY)),
    Rule("DA202", "", "numpy generator seeded from OS entropy (no seed)",
         "A generator built without a seed takes fresh OS entropy in every run and every process.",
         "Pass a seed derived from the run's seed: np.random.default_rng(seed).",
         "rng = np.random.default_rng()",
         find=_numpy_unseeded, callees=NUMPY_UNSEEDED),
    Rule("DA301", "random", "module-level random function draws from the global random.Random",
         _WHY_GLOBAL.format(rng="random.Random"),
         "Use r = random.Random(seed) and r.<method>(...).",
         "random.shuffle(items)",
         find=_stdlib_draw, callees=_qualified(("random",), STDLIB_DRAWS)),
    Rule("DA302", "", "stdlib random generator seeded from OS entropy",
         "random.Random() without a seed and random.SystemRandom take OS entropy in every run.",
         "Use random.Random(seed) with a seed derived from the run's seed.",
         "r = random.Random()",
         find=_stdlib_unseeded, callees=frozenset({"random.Random", "random.SystemRandom"})),
    Rule("DA303", "", "seed taken from a value that differs per run or process (time, pid, id(), hash(), none at all)",
         "A seed from a clock, a process id, an object address or str hashing (varies unless PYTHONHASHSEED "
         "is set) differs on every run, so seeding with it is no seeding; random.seed(), np.random.seed(None), "
         "torch.seed() and seed_everything() without a seed seed from OS entropy or the clock. None of these "
         "counts as seeding the process.",
         "Seed from the run's configured seed (plus a fixed rank or worker offset).",
         "torch.manual_seed(int(time.time()))",
         find=_entropy_seed, callees=SEED_TAKERS | RESEED_FROM_ENTROPY, methods=frozenset({"manual_seed", "seed"})),
    Rule("DA401", "", "results gathered in completion order (ray.wait, as_completed, wait(FIRST_COMPLETED)) reach "
         "a batch",
         "ray.wait, as_completed and wait(return_when=FIRST_COMPLETED) hand results back as their work "
         "finishes, and which work finishes first depends on the machine's load, not on the code: a batch "
         "built from them (torch.cat, torch.stack, np.concatenate) holds its samples in another order from run "
         "to run, and every sum over it (a loss, a mean reward) rounds differently. Two runs on a quiet machine "
         "usually finish in the same order, so it reproduces until the load changes; `detaudit record "
         "--perturb-schedule --trace` makes the order change and names the gather.",
         "Batch the results in the order the work was submitted: ray.get(refs) or [f.result() for f in futures], "
         "or keep each result's submission index and put it back in place before batching.",
         "ready, pending = ray.wait(pending); outs += ray.get(ready); batch = torch.cat(outs)",
         find=_completion_order_batch, callees=COMPLETION_ORDER_CALLEES),
)
RULE_BY_CODE: dict[str, Rule] = {r.code: r for r in RULE_LIST}
RULES: dict[str, str] = {r.code: r.summary for r in RULE_LIST}
# The process-global RNG a rule draws from ('' for rules that are wrong in any process).
FAMILY: dict[str, str] = {r.code: r.family for r in RULE_LIST}
# The rules to try on a call, by its qualified callee and by its called attribute.
RULES_BY_CALLEE: dict[str, tuple[Rule, ...]] = {}
RULES_BY_METHOD: dict[str, tuple[Rule, ...]] = {}
RULES_BY_OBJECT: dict[str, tuple[Rule, ...]] = {}
for _rule in RULE_LIST:
    for _name in _rule.objects:
        RULES_BY_OBJECT[_name] = RULES_BY_OBJECT.get(_name, ()) + (_rule,)
    for _name in _rule.callees:
        RULES_BY_CALLEE[_name] = RULES_BY_CALLEE.get(_name, ()) + (_rule,)
    for _name in _rule.methods:
        RULES_BY_METHOD[_name] = RULES_BY_METHOD.get(_name, ()) + (_rule,)
# The last part of every name a rule (or a seed) looks at: calls ending otherwise are never tried.
LAST_NAMES = frozenset(n.rpartition(".")[2] for n in (*RULES_BY_CALLEE, *SEED_CALLS)) | frozenset(RULES_BY_METHOD)

# -- dynamic dispatch --------------------------------------------------------------------

# Dynamic dispatch: calls that return the object a dotted-path string names.
BUILTIN_LOADERS = frozenset({
    "pydoc.locate", "hydra.utils.get_method", "hydra.utils.get_class", "hydra.utils.get_object",
    "hydra._internal.utils._locate", "importlib.import_module",
})
# Calls that call the `_target_` a config names right away.
CALLING_LOADERS = frozenset({"hydra.utils.instantiate", "hydra.utils.call"})
