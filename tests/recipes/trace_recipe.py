"""A test-only recipe for ``--trace``: global-RNG draws that static analysis cannot see.

Stands in for a user's training command (nothing we ship is mocked). It writes a metrics
JSONL to $DETAUDIT_METRICS_JSONL. The main process seeds torch, numpy and random and runs a
small torch model. Flags:
  --ray            start Ray with two actors: ``SeededWorker`` seeds in ``__init__``;
                   ``HiddenDrawer`` never seeds and draws through a sampler whose name is
                   built at run time (``getattr(torch, "rand" + "perm")``), which scan-rng
                   cannot see; and one Ray task that seeds numpy and draws from it
  --seed-hidden    the HiddenDrawer seeds too (then runs agree)
  --mp METHOD      two multiprocessing children (fork or spawn), each seeded with its rank
  --mp-same-seed   ... seeded alike instead (a seed collision)
  --replicas N     N SeededWorker replicas (default 1); all seed alike (a seed collision)
  --kill-mid-task  (with --ray) a ``Sleeper`` actor draws, then is killed (``ray.kill``) inside
                   that task: its ledger has no end after the draw
$TRACE_RECIPE_PERTURB=1 adds 1e-6 to the output of the model's ``Scale`` module, standing
in for a machine whose kernels compute different bits (``after:K``: only from its call K+1 on;
the model is called CALLS times).
"""

import argparse
import json
import multiprocessing
import os
import random
import time

import numpy as np
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--ray", action="store_true")
parser.add_argument("--seed-hidden", action="store_true")
parser.add_argument("--mp", choices=["fork", "spawn"])
parser.add_argument("--mp-same-seed", action="store_true")
parser.add_argument("--replicas", type=int, default=1)
parser.add_argument("--kill-mid-task", action="store_true")


def hidden_draw(n: int) -> list[int]:
    sampler = getattr(torch, "".join(["rand", "perm"]))  # a name built at run time
    return sampler(n).tolist()


class SeededWorker:
    def __init__(self) -> None:
        torch.manual_seed(7)

    def work(self) -> float:
        return float(torch.rand(4).sum())


class HiddenDrawer:
    def __init__(self, seed: bool) -> None:
        if seed:
            torch.manual_seed(11)

    def work(self) -> list[int]:
        return hidden_draw(8)


class Scale(torch.nn.Module):
    calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        Scale.calls += 1
        out = x * 0.5
        perturb = os.environ.get("TRACE_RECIPE_PERTURB", "")
        if perturb == "1" or (perturb.startswith("after:") and Scale.calls > int(perturb[6:])):
            out = out + 1e-6
        return out


class Sleeper:
    def draw_then_wait(self, flag: str) -> None:
        torch.manual_seed(13)
        torch.rand(2)
        with open(flag + ".tmp", "w") as fh:
            fh.write(str(os.getpid()))
        os.replace(flag + ".tmp", flag)
        time.sleep(600)  # killed here


def gone(pid: int, within: float = 180.0) -> None:
    """Wait until ``pid`` has died: ``ray.kill`` returns before the worker is dead, and on a busy
    machine it could still be alive when this process exits; its ledger would then read as one
    the run's clean-up ended, not as killed by something the tracer did not see."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except (OSError, IndexError):
            return
        time.sleep(0.1)
    raise SystemExit(f"the killed Sleeper (pid {pid}) is still alive after {within:.0f} s")


def numpy_task() -> float:
    np.random.seed(3)
    return float(np.random.rand())


def child(rank: int, seed: int, queue: "multiprocessing.Queue") -> None:
    np.random.seed(seed)
    torch.manual_seed(seed)
    queue.put((rank, float(np.random.rand()) + float(torch.rand(1))))


CALLS = 4


def main() -> None:
    args = parser.parse_args()
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    metrics = {"main/random": random.random(), "main/numpy": float(np.random.rand())}
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2), Scale())
    x = torch.randn(3, 4)
    metrics["main/out"] = sum(float(model(x + step).sum()) for step in range(CALLS))
    if args.ray:
        import ray

        # On a loaded CI machine Ray's agents can take longer than the raylet's default 15 s wait.
        os.environ.setdefault("RAY_agent_register_timeout_ms", "180000")
        ray.init(num_cpus=1, include_dashboard=False, configure_logging=False, log_to_driver=False)
        Seeded = ray.remote(num_cpus=0)(SeededWorker)
        Hidden = ray.remote(num_cpus=0)(HiddenDrawer)
        task = ray.remote(num_cpus=0)(numpy_task)
        workers = [Seeded.remote() for _ in range(args.replicas)]
        hidden = Hidden.remote(args.seed_hidden)
        values = ray.get([w.work.remote() for w in workers])
        metrics["ray/seeded"] = values[0]
        metrics["ray/hidden"] = float(sum(i * v for i, v in enumerate(ray.get(hidden.work.remote()))))
        metrics["ray/task"] = ray.get(task.remote())
        if args.kill_mid_task:
            sleeper = ray.remote(num_cpus=0)(Sleeper).remote()
            flag = os.path.abspath("sleeper-drew")
            sleeper.draw_then_wait.remote(flag)
            while not os.path.exists(flag):
                time.sleep(0.1)
            ray.kill(sleeper)
            gone(int(open(flag).read()))
        ray.shutdown()
    if args.mp:
        ctx = multiprocessing.get_context(args.mp)
        queue = ctx.Queue()
        procs = [ctx.Process(target=child, args=(r, 5 if args.mp_same_seed else 5 + r, queue)) for r in range(2)]
        for p in procs:
            p.start()
        results = dict(queue.get(timeout=120) for _ in procs)
        for p in procs:
            p.join()
        metrics["mp/sum"] = results[0] + results[1]
    with open(os.environ["DETAUDIT_METRICS_JSONL"], "w") as out:
        out.write(json.dumps({"step_key": "step", "step": 0, **metrics}) + "\n")


if __name__ == "__main__":
    main()
