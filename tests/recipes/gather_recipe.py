"""A test-only recipe for arrival order and per-sample seeds: results gathered as they complete,
and samples seeded one by one. Stands in for a user's pipeline (nothing we ship is mocked).

It gathers three results of a thread pool with ``as_completed``, three items of a ``queue.Queue``
fed by threads and three asyncio tasks with ``asyncio.wait(FIRST_COMPLETED)``, and writes to
$DETAUDIT_METRICS_JSONL, per gather, the first result to arrive and a sum taken in arrival order
(float addition depends on it). Flags:
  --chain forward|reverse   make the work complete in a fixed order (each item starts once the one
                            before it has arrived): 0, 1, 2 or 2, 1, 0; without it, all at once
  --steps N                 steps of per-sample seeding (default 2): 2 prompts x 3 samples each,
                            seeded with torch.Generator.manual_seed (needs torch, so only with
                            --seeds)
  --seeds                   seed per-sample generators
  --one-seed-per-group      ... with the group's seed for every sample of it (the bug)
"""

import argparse
import asyncio
import json
import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

parser = argparse.ArgumentParser()
parser.add_argument("--chain", choices=["forward", "reverse"])
parser.add_argument("--steps", type=int, default=2)
parser.add_argument("--seeds", action="store_true")
parser.add_argument("--one-seed-per-group", action="store_true")
args = parser.parse_args()

VALUES = (0.1, 0.2, 0.3)
ORDER = [2, 1, 0] if args.chain == "reverse" else [0, 1, 2]


class Chain:
    """With --chain: item ORDER[k] starts only once item ORDER[k - 1] has arrived."""

    def __init__(self) -> None:
        self.gates = [threading.Event() for _ in ORDER] + [threading.Event()]
        self.gates[0].set()

    def wait_turn(self, i: int) -> None:
        if args.chain:
            self.gates[ORDER.index(i)].wait(10)

    def arrived(self, i: int) -> None:
        self.gates[ORDER.index(i) + 1].set()


def task(i: int, chain: Chain) -> int:
    chain.wait_turn(i)
    time.sleep(0.2)  # some work: --perturb-schedule holds a result back by a share of its time
    return i


def gather_pool() -> list[int]:
    chain = Chain()
    with ThreadPoolExecutor(3) as pool:
        futures = {pool.submit(task, i, chain): i for i in range(3)}
        for future, i in futures.items():
            future.add_done_callback(lambda _, i=i: chain.arrived(i))
        return [futures[f] for f in as_completed(futures)]


def gather_queue() -> list[int]:
    chain = Chain()
    items: queue.Queue = queue.Queue()

    def produce(i: int) -> None:
        chain.wait_turn(i)
        items.put(i)
        chain.arrived(i)

    threads = [threading.Thread(target=produce, args=(i,), name=f"producer-{i}") for i in range(3)]
    for t in threads:
        t.start()
    got = [items.get() for _ in range(3)]
    for t in threads:
        t.join()
    return got


async def one(i: int, gates: list[asyncio.Event]) -> int:
    if args.chain:
        await gates[ORDER.index(i)].wait()
    return i


async def gather_async() -> list[int]:
    gates = [asyncio.Event() for _ in ORDER]
    gates[0].set()
    tasks = {i: asyncio.ensure_future(one(i, gates)) for i in range(3)}
    for i, task in tasks.items():
        if ORDER.index(i) + 1 < len(gates):
            task.add_done_callback(lambda _, k=ORDER.index(i) + 1: gates[k].set())
    pending, got = set(tasks.values()), []
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        got += sorted(t.result() for t in done)
    return got


def sample_noise(rollout: int, prompt: int, sample: int):
    import torch

    gen = torch.Generator()
    gen.manual_seed(1000 * rollout + 10 * prompt + (0 if args.one_seed_per_group else sample))
    return torch.randn(2, generator=gen)


def rollout_samples(rollout: int) -> list:
    return [sample_noise(rollout, p, s) for p in range(2) for s in range(3)]


with open(os.environ["DETAUDIT_METRICS_JSONL"], "w") as out:
    for step, gather in enumerate((gather_pool, gather_queue, lambda: asyncio.run(gather_async()))):
        order = gather()
        total = 0.0
        for i in order:
            total += VALUES[i]
        out.write(json.dumps({"step": step, "sum": total, "first": order[0]}) + "\n")
    if args.seeds:
        for step in range(args.steps):
            rollout_samples(step)
