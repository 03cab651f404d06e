"""--trace comparisons (issue #28): per process, the first differing draw, module or torch op (or
"all agree"); torch ops between modules named by op and call site; draws inside library
internals (Ray's own) reported apart from the recipe's. Real processes and real torch models."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_traced

from detaudit.render.trace import comparison_json, comparison_lines
from detaudit.trace.compare import compare_traces
from detaudit.trace.files import read_trace

pytestmark = pytest.mark.slow  # each test traces real torch (or Ray) processes

TWO_PROCESSES = """import os, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
x = torch.ones(2, 4)
pid = os.fork()
if pid == 0:
    torch.manual_seed(1)
    child = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    y = child(x)
    if os.environ.get("PERTURB"):
        torch.nn.functional.relu = lambda t, inplace=False: t * 0 + 1e-6  # noqa: E731
    child[1].forward = lambda t: torch.nn.functional.relu(t)
    child(x)
    os._exit(0)
model(x)
os.waitpid(pid, 0)
model(x)
"""


def test_per_process_first_differing_module_or_all_agree(tmp_path: Path) -> None:
    a, _ = run_traced(tmp_path, TWO_PROCESSES, mode="modules", name="a")
    b, _ = run_traced(tmp_path, TWO_PROCESSES, mode="modules", name="b", extra_env={"PERTURB": "1"})
    cmp = compare_traces(read_trace(a), read_trace(b))
    assert not cmp.identical and cmp.incomplete == []
    by_kind = {p.process: p for p in cmp.processes}
    main = by_kind["main process"]
    child = next(p for name, p in by_kind.items() if name != "main process")
    assert main.agree and not child.agree
    assert child.module is not None and child.module.call.name == "Sequential.1" and child.module.call.n == 2
    assert child.module.inputs_match
    lines = comparison_lines(cmp)
    assert lines[-3] == "per process (run 1 vs run 2):"
    assert lines[-2] == f"  main process (pid {main.pids[0]} vs {main.pids[1]}): all agree"
    assert lines[-1].startswith(f"  {child.process} (pid {child.pids[0]} vs {child.pids[1]}): first differing module: "
                                "module Sequential.1 (ReLU), call 2: same inputs, different outputs")
    doc = comparison_json(cmp)
    assert [p["agree"] for p in doc["processes"]] == [True, False]
    assert doc["processes"][1]["first_module"]["a"]["module"] == "Sequential.1"


OPS_BETWEEN_MODULES = """import os, warnings, torch
import torch.nn.functional as F
torch.manual_seed(0)
vae = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh())
clip = torch.nn.Linear(16, 4)
if os.environ.get("OTHER_KERNEL"):  # a machine whose clamp kernel computes other bits
    warnings.simplefilter("ignore")
    kernels = torch.library.Library("aten", "IMPL")
    kernels.impl("clamp", lambda x, lo, hi: torch.minimum(torch.maximum(x, torch.tensor(lo)), torch.tensor(hi)) + 1e-6,
                 "CPU")

def preprocess(image):
    image = (image / float(os.environ.get("SCALE", "2")) + 0.5).clamp(0.0, 1.0)
    image = F.interpolate(image.reshape(1, 1, 4, 4), size=(2, 8), mode=os.environ.get("RESIZE", "bilinear"))
    return image.reshape(1, 16)

for step in range(2):
    latents = torch.ones(1, 8) * step
    clip(preprocess(vae(latents)))
"""


def test_an_op_between_modules_is_named_by_op_and_call_site(tmp_path: Path) -> None:
    a, _ = run_traced(tmp_path, OPS_BETWEEN_MODULES, mode="modules", name="a")
    run = read_trace(a)
    (main,) = run.processes
    ops = [(o.name, o.at, o.site, o.n) for o in main.ops]
    assert ("Tensor.clamp", "t.py:13 preprocess", "t.py:13 preprocess", 2) in ops  # the recipe's own line: one site
    assert ("torch.nn.functional.interpolate", "t.py:14 preprocess", "t.py:14 preprocess", 1) in ops
    assert not any("linear" in o.name.lower() or "tanh" in o.name for o in main.ops)  # inside modules: the modules' records
    assert not any("empty" in o.name for o in main.ops)  # uninitialised memory: never compared
    same, _ = run_traced(tmp_path, OPS_BETWEEN_MODULES, mode="modules", name="same")
    assert compare_traces(run, read_trace(same)).identical
    kernel, _ = run_traced(tmp_path, OPS_BETWEEN_MODULES, mode="modules", name="kernel", extra_env={"OTHER_KERNEL": "1"})
    cmp = compare_traces(run, read_trace(kernel))
    assert cmp.op is not None and cmp.op.inputs_match and cmp.op.call.name == "Tensor.clamp"
    assert cmp.module is not None and cmp.module.call.name == "Linear" and not cmp.module.inputs_match
    lines = comparison_lines(cmp)
    assert lines[0] == ("first differing module: main process: module Linear (Linear), call 1: first differing "
                        "output, but its inputs differ too (run 1 vs run 2): the difference arose outside any module "
                        "(see the first differing op)")
    assert lines[1] == ("first differing op: main process: op Tensor.clamp at t.py:13 preprocess, call 1: same inputs, "
                        "different outputs (run 1 vs run 2): this op computed different bits")
    # An op called with another argument: named too, its inputs differ.
    resized, _ = run_traced(tmp_path, OPS_BETWEEN_MODULES, mode="modules", name="resized", extra_env={"RESIZE": "bicubic"})
    cmp = compare_traces(run, read_trace(resized))
    assert cmp.op is not None and cmp.op.call.name == "torch.nn.functional.interpolate" and not cmp.op.inputs_match
    assert cmp.op.call.at == "t.py:14 preprocess"
    # ... and another number: the op's inputs differ (numbers are part of a fingerprint)
    scaled, _ = run_traced(tmp_path, OPS_BETWEEN_MODULES, mode="modules", name="scaled", extra_env={"SCALE": "3"})
    cmp = compare_traces(run, read_trace(scaled))
    assert cmp.op is not None and cmp.op.call.name == "Tensor.div" and not cmp.op.inputs_match


LIBRARY_DRAWS = """import os, random, threading
random.seed(0)
random.random()
random.random()
for _ in range(int(os.environ.get("LIBRARY_DRAWS", "1"))):
    worker = threading.Thread(target=random.random)  # a draw with no frame of this script on the stack
    worker.start(); worker.join()
"""


def test_draws_inside_library_internals_are_reported_apart_from_the_recipes(tmp_path: Path) -> None:
    a, _ = run_traced(tmp_path, LIBRARY_DRAWS, name="a")
    b, _ = run_traced(tmp_path, LIBRARY_DRAWS, name="b", extra_env={"LIBRARY_DRAWS": "3"})
    run_a = read_trace(a)
    assert [d.library for d in run_a.processes[0].draws] == [False, False, True]
    cmp = compare_traces(run_a, read_trace(b))
    assert cmp.draw is None and cmp.identical  # the recipe's own streams agree
    assert cmp.library_draw is not None and cmp.library_draw.kind == "missing"
    lines = comparison_lines(cmp)
    assert lines[0].startswith("traces identical (run 1 vs run 2)")
    assert lines[1].startswith("draws inside library code differ (not the recipe's own; shown apart): main process: "
                               "random.random at ")


EXTRA_RANDOM_DRAW = """import os, random, torch
torch.manual_seed(0)
if os.environ.get("EXTRA"):
    random.getrandbits(32)  # as a library imported in one environment only does at import
torch.randn(3)
torch.randperm(4)
"""


def test_an_extra_draw_from_one_generator_does_not_shift_anothers_stream(tmp_path: Path) -> None:
    """Each generator's draws are compared on their own: one more Python `random` draw in one run
    is reported as that (a draw made in one run only), and torch's stream, which agrees, is not
    reported as parting ways."""
    a, _ = run_traced(tmp_path, EXTRA_RANDOM_DRAW, name="a")
    b, _ = run_traced(tmp_path, EXTRA_RANDOM_DRAW, name="b", extra_env={"EXTRA": "1"})
    (pc,) = compare_traces(read_trace(a), read_trace(b)).processes
    assert pc.draw is not None and pc.draw.kind == "missing" and pc.draw.a is None
    assert pc.draw.b is not None and pc.draw.b.gen == "random" and pc.draw.b.op == "random.getrandbits"
    # and a real difference in torch's stream is still found
    c, _ = run_traced(tmp_path, EXTRA_RANDOM_DRAW.replace("torch.manual_seed(0)", "torch.manual_seed(1)"), name="c")
    (pc,) = compare_traces(read_trace(a), read_trace(c)).processes
    assert pc.draw is not None and pc.draw.kind == "state" and pc.draw.a is not None and pc.draw.a.op == "torch.randn"
