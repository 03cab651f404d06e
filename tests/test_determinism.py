"""detaudit.env.determinism in this process and, through Ray's worker setup hook, in every actor.

Ray runs in subprocesses started by these tests, never in the pytest process (Ray leaves native
threads behind after shutdown; see conftest), and each starts its own Ray (``address="local"``):
never a cluster that RAY_ADDRESS or a `ray start` on the machine names.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from detaudit.env import determinism

PROBE = """
import json, random, torch
from detaudit.env import determinism
determinism.enable(123)
print(json.dumps([torch.initial_seed(), torch.are_deterministic_algorithms_enabled(),
                  torch.backends.cudnn.deterministic, torch.randperm(6).tolist(), random.random()]))
"""


@pytest.mark.slow
def test_enable_seeds_and_sets_flags_in_a_fresh_process() -> None:
    runs = [subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
            for _ in range(2)]
    assert runs[0] == runs[1]
    assert runs[0].startswith("[123, true, true, ")


# python -c RAY_HOOK_PROBE SEED ATTENTION: two seeded actors and one that skips the seed, in a Ray of its own.
RAY_HOOK_PROBE = """
import json, os, sys
import ray, torch
from detaudit.env import determinism

seed, attention = int(sys.argv[1]), sys.argv[2]


@ray.remote(num_cpus=0)
class Probe:
    def state(self):
        return {
            "seed": torch.initial_seed(),
            "deterministic": torch.are_deterministic_algorithms_enabled(),
            "cublas": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
            "draw": torch.randperm(8).tolist(),
            "sdp": determinism.enabled_attention_backends(),
        }


ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024**2,
         runtime_env=determinism.ray_runtime_env(seed, attention=attention))
try:
    seeded = [Probe.remote() for _ in range(2)]
    unseeded = Probe.options(runtime_env={"env_vars": {determinism.SKIP_SEED_ENV: "1"}}).remote()
    out = {"seeded": ray.get([a.state.remote() for a in seeded]), "skipped": ray.get(unseeded.state.remote())}
finally:
    ray.shutdown()
print(json.dumps(out))
"""


def ray_probe(seed: int, attention: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", RAY_HOOK_PROBE, str(seed), attention], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.ray
def test_ray_hook_seeds_every_worker_and_skip_leaves_one_unseeded() -> None:
    found = ray_probe(77, "math")
    states, skipped = found["seeded"], found["skipped"]
    for state in states:
        assert state["seed"] == 77 and state["deterministic"] and state["cublas"] == ":4096:8"
        assert state["sdp"] == ["math"]  # the default: math only
    assert states[0]["draw"] == states[1]["draw"]
    # The skipped actor still got the deterministic flags, but not the seed.
    assert skipped["deterministic"] and skipped["seed"] != 77


@pytest.mark.slow
@pytest.mark.ray
def test_attention_choice_reaches_every_worker() -> None:
    """The worker hook sets the SDPA backends the driver chose, not math regardless."""
    state = ray_probe(5, "flash")["seeded"][0]
    assert state["deterministic"] and state["sdp"] == ["flash", "math"]


SWITCHES = """
import json, os, torch
from detaudit.env import determinism
os.environ.update({determinism.SEED_ENV: "1", determinism.ATTENTION_ENV: "math"})
determinism.ray_worker_setup()          # the hook: math only
determinism.enable(1, attention="any")  # then the actor asks for any backend
print(json.dumps(determinism.enabled_attention_backends()))
"""


@pytest.mark.slow
def test_a_later_enable_sets_exactly_its_backends() -> None:
    # "any" after the hook's "math" must re-enable flash: it used to leave math only, so
    # --attention any ran the math kernel in every actor.
    out = subprocess.run([sys.executable, "-c", SWITCHES], capture_output=True, text=True, check=True).stdout
    assert out.strip() == '["flash", "mem_efficient", "cudnn", "math"]'


def test_unknown_attention_mode_is_refused() -> None:
    import pytest

    with pytest.raises(ValueError, match="attention must be one of"):
        determinism.ray_runtime_env(1, attention="fast")


FILL_PROBE = """
import json, sys, torch
from detaudit.env import determinism
determinism.enable(1, fill_uninitialized_memory=sys.argv[1] == "1")
print(json.dumps([torch.utils.deterministic.fill_uninitialized_memory,
                  bool(torch.isnan(torch.empty(64)).all())]))
"""


@pytest.mark.slow
def test_fill_uninitialized_memory_can_be_switched_off() -> None:
    """Deterministic mode fills new tensors with NaN by default; the switch turns that kernel off."""
    def probe(fill: str) -> str:
        return subprocess.run([sys.executable, "-c", FILL_PROBE, fill], capture_output=True, text=True,
                              check=True).stdout.strip()

    assert probe("1") == "[true, true]"  # torch's default under use_deterministic_algorithms
    assert probe("0").startswith("[false, ")  # what the empty tensor holds is then whatever was there


# python -c INDUCTOR_PROBE BEFORE: Inductor imported before enable (BEFORE=1) or after it.
INDUCTOR_PROBE = """
import json, sys
import torch
if sys.argv[1] == "1":
    import torch._inductor.config
from detaudit.env import determinism
determinism.enable(0)
imported_by_enable = sys.argv[1] == "0" and "torch._inductor.config" in sys.modules
import torch._inductor.config
print(json.dumps([torch.are_deterministic_algorithms_enabled(), torch._inductor.config.deterministic, imported_by_enable]))
"""


@pytest.mark.slow
def test_enable_sets_inductors_deterministic_mode_without_importing_it() -> None:
    """As torch.use_deterministic_algorithms(True) does, without its ~1.5 s import of Inductor in
    processes that never compile: Inductor imported before gets the flag, Inductor imported after
    reads it from TORCHINDUCTOR_DETERMINISTIC, even where the user's environment said "0"."""
    def probe(inductor_first: str, **env: str) -> list[bool]:
        proc = subprocess.run([sys.executable, "-c", INDUCTOR_PROBE, inductor_first], capture_output=True, text=True,
                              check=True, env={**os.environ, **env})
        return json.loads(proc.stdout)

    assert probe("0") == [True, True, False]
    assert probe("1") == [True, True, False]
    assert probe("0", TORCHINDUCTOR_DETERMINISTIC="0") == [True, True, False]
