"""--trace modules sees a Ray actor's torch ops whichever thread of its worker imported torch.

torch keeps its function-mode stack per thread. The op tracer entered its mode in the thread that
imported torch only; in a Ray worker that thread varies from run to run, so two agreeing runs of
the portable card had traces that differed ("op Tensor.detach ... call 1 was made in run 1 only").
Here the actor imports torch in a side thread, always: its method's ops must still be traced."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_cli
from detaudit.trace.files import read_trace

RECIPE = '''
import json, os, random, threading
import ray

random.seed(0)  # ray.init draws from Python's random here: unseeded, `trace` fails closed (#41)

@ray.remote
class SideImporter:
    def __init__(self):
        side = threading.Thread(target=lambda: __import__("torch"))  # torch's first import, off the task thread
        side.start()
        side.join()

    def work(self):
        import torch
        x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
        return float(torch.clamp(x * 2.0, max=7.0).sum())

ray.init(address="local", num_cpus=1, include_dashboard=False)
value = ray.get(SideImporter.remote().work.remote())
with open(os.environ["DETAUDIT_METRICS_JSONL"], "w") as fh:
    fh.write(json.dumps({"step": 0, "value": value}) + "\\n")
ray.shutdown()
'''


@pytest.mark.slow
@pytest.mark.ray
def test_an_actor_whose_torch_was_imported_in_another_thread_has_its_ops_traced(tmp_path: Path) -> None:
    script = tmp_path / "side_import.py"
    script.write_text(RECIPE)
    card = tmp_path / "side.toml"
    card.write_text(f'name = "side"\ncommand = ["{{python}}", "{script}"]\ntimeout_s = 300\nrunner = ["cpu", "test"]\n')
    result = run_cli("trace", str(card), "--modules", "--workdir", str(tmp_path / "w"))
    assert result.code == 0, result.text
    run = read_trace(tmp_path / "w" / "run1" / "trace")
    (actor,) = [p for p in run.processes if p.label == "SideImporter"]
    names = [op.name for op in actor.ops]
    assert names == ["torch.arange", "Tensor.reshape", "Tensor.mul", "torch.clamp", "Tensor.sum"], names
