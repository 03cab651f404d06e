"""Arrival order and --perturb-schedule: results gathered in completion order, in real processes
(tests/recipes/gather_recipe.py: a thread pool, a queue fed by threads, asyncio tasks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_cli, write_card

from detaudit.render.arrival import arrival_difference_line
from detaudit.render.trace import comparison_lines
from detaudit.trace import PERTURB_ENV, trace_env
from detaudit.trace.compare import compare_traces
from detaudit.trace.files import read_trace
from detaudit.trace.frames import call_text
from detaudit.trace.perturb import arrival_order, delay, fraction

GATHER = REPO / "tests" / "recipes" / "gather_recipe.py"


def recipe_line(text: str) -> int:
    for number, line in enumerate(GATHER.read_text().splitlines(), 1):
        if text in line:
            return number
    raise AssertionError(text)


def run_gather(folder: Path, *args: str, schedule: int | None = None, traced: bool = True) -> tuple[Path, list[dict]]:
    """Run the gather recipe once (traced; ``schedule``: perturbed); its trace dir and metrics."""
    folder.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DETAUDIT_")}
    env["PYTHONPATH"] = str(REPO)
    env["DETAUDIT_METRICS_JSONL"] = str(folder / "metrics.jsonl")
    if traced:
        env = trace_env("rng", folder / "trace", env)
    if schedule is not None:
        env[PERTURB_ENV] = str(schedule)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO / "detaudit" / "trace" / "site"), env["PYTHONPATH"]])
    proc = subprocess.run([sys.executable, str(GATHER), *args], env=env, capture_output=True, text=True, timeout=120,
                          cwd=folder)
    assert proc.returncode == 0, proc.stderr
    metrics = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return folder / "trace", metrics


def test_each_gather_records_the_order_its_results_arrived_in(tmp_path: Path) -> None:
    trace_dir, _ = run_gather(tmp_path / "forward", "--chain", "reverse")
    (main,) = read_trace(trace_dir).processes
    gathers = {g["api"]: g for g in main.arrivals}
    pool = gathers["concurrent.futures.as_completed"]
    assert pool["site"] == f"gather_recipe.py:{recipe_line('for f in as_completed(futures)')} gather_pool"
    # numbered in the order the program handed them over (the dict of futures): 2, 1, 0 arrived
    assert pool["order"] == [["2"], ["1"], ["0"]] and pool["complete"] and pool["caller"] == "gather_pool()"
    queue = gathers["queue.Queue.get"]
    assert queue["order"] == [["producer-2#1"], ["producer-1#1"], ["producer-0#1"]]  # who put each item
    waited = gathers["asyncio.wait"]  # a set of tasks, numbered in the order they were made
    assert waited["stable"] and [x for group in waited["order"] for x in group][-1] == "0"


@pytest.mark.slow
def test_the_first_gather_whose_order_differs_is_named_with_the_batch_it_fed(tmp_path: Path) -> None:
    forward, metrics_f = run_gather(tmp_path / "forward", "--chain", "forward")
    again, _ = run_gather(tmp_path / "again", "--chain", "forward")
    reverse, metrics_r = run_gather(tmp_path / "reverse", "--chain", "reverse")
    assert metrics_f[0]["sum"] != metrics_r[0]["sum"]  # float addition in arrival order
    same = compare_traces(read_trace(forward), read_trace(again))
    assert same.arrival is None and same.identical, comparison_lines(same)
    differ = compare_traces(read_trace(forward), read_trace(reverse))
    assert not differ.identical and differ.arrival is not None
    line = arrival_difference_line(differ.arrival, differ.labels)
    site = f"gather_recipe.py:{recipe_line('for f in as_completed(futures)')} gather_pool"
    assert line == (f"main process: concurrent.futures.as_completed at {site}, gather 1 (it fed gather_pool()): "
                    "results arrived in another order: 0, 1, 2 in run 1, 2, 1, 0 in run 2 (numbered in the order "
                    "they were waited for)")
    assert any(text.startswith("first differing arrival order: main process: concurrent.futures.as_completed")
               for text in comparison_lines(differ))


CHAIN = type("Chain", (), {})()  # how the recipe's Chain argument reads in a call's text


def test_perturbation_delays_are_mirrored_between_runs_1_and_2_and_bounded() -> None:
    call = call_text("task", (0, CHAIN), {})
    assert call == "task(0, <Chain>)"
    assert fraction(1, call) + fraction(2, call) == pytest.approx(1.0)
    assert fraction(3, call) != pytest.approx(fraction(1, call))  # the next pair draws anew
    assert delay(1, call, 100.0) <= 2.0 and delay(1, call, 0.0) <= 0.25


def test_ray_wait_hands_results_over_mirrored_in_runs_1_and_2_and_rotated_in_the_next_pair() -> None:
    # a gather of two: opposite orders in runs 1 and 2, whatever hashes its calls' delays get
    assert arrival_order(1, 2) == [0, 1] and arrival_order(2, 2) == [1, 0]
    assert arrival_order(1, 3) == [0, 1, 2] and arrival_order(2, 3) == [2, 1, 0]
    assert arrival_order(3, 3) == [1, 2, 0] and arrival_order(4, 3) == [0, 2, 1]
    assert arrival_order(1, 1) == [0] == arrival_order(2, 1) and arrival_order(5, 0) == []


RAY_GATHER = """
import time, ray
ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)

@ray.remote
def work(i, seconds):
    time.sleep(seconds)
    return i

def gather():
    # 1 finishes a second before 0 (its held-back share is 0.25 s at most): left alone, 1 arrives first
    pending, arrived = [work.remote(0, 1.0), work.remote(1, 0.0)], []
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        arrived += ray.get(ready)
    return arrived

print(gather(), gather())
ray.shutdown()
"""


@pytest.mark.slow
def test_perturbed_ray_wait_hands_results_over_in_the_runs_order_not_the_order_they_finished(tmp_path: Path) -> None:
    """Runs 1 and 2 of --perturb-schedule: the program's order, then its reverse, though the
    results finish in the reverse order each time (a gather the hashed delays alone could not turn)."""
    orders = []
    for schedule in (1, 2):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DETAUDIT_", "RAY_ADDRESS"))}
        env.update({PERTURB_ENV: str(schedule), "RAY_USAGE_STATS_ENABLED": "0",
                    "PYTHONPATH": str(REPO / "detaudit" / "trace" / "site")})
        proc = subprocess.run([sys.executable, "-c", RAY_GATHER], env=env, capture_output=True, text=True,
                              timeout=300, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        orders.append(proc.stdout.strip().splitlines()[-1])
    assert orders == ["[0, 1] [0, 1]", "[1, 0] [1, 0]"]


@pytest.mark.slow
def test_perturbed_runs_gather_in_mirrored_orders_and_leave_the_programs_draws_alone(tmp_path: Path) -> None:
    """Runs 1 and 2 of --perturb-schedule: the pool's three results arrive in opposite orders."""
    shares = {i: fraction(1, call_text("task", (i, CHAIN), {})) for i in range(3)}
    ranked = sorted(shares, key=shares.__getitem__)
    # 0.2 of a bound of 0.25 s + half the task's 0.2 s: 70 ms apart at least, far above a thread's jitter
    assert min(abs(shares[a] - shares[b]) for a in range(3) for b in range(a)) > 0.2
    _, run1 = run_gather(tmp_path / "one", schedule=1, traced=False)
    _, run2 = run_gather(tmp_path / "two", schedule=2, traced=False)
    assert run1[0]["first"] == ranked[0] and run2[0]["first"] == ranked[-1]
    assert run1[0]["sum"] != run2[0]["sum"]
    trace1, _ = run_gather(tmp_path / "traced1", schedule=1)
    trace2, _ = run_gather(tmp_path / "traced2", schedule=2)
    pool1, pool2 = ([g for g in read_trace(t).processes[0].arrivals if g["api"].endswith("as_completed")][0]
                    for t in (trace1, trace2))
    assert [g[0] for g in pool1["order"]] == [str(i) for i in ranked]
    assert [g[0] for g in pool2["order"]] == [str(i) for i in reversed(ranked)]
    # detaudit's delays come from a hash, never the program's generators: no draw was made
    assert not any(p.draws for p in read_trace(trace1).processes)


@pytest.mark.slow
def test_record_perturb_schedule_shows_order_dependence_and_says_so_in_the_standard(tmp_path: Path) -> None:
    card = write_card(tmp_path / "gather.toml", name="toy", recipe=GATHER)
    result = run_cli("record", str(card), "--runs", "2", "--no-write", "--no-doctor", "--perturb-schedule",
                     "--trace", "--workdir", str(tmp_path / "w1"))
    assert result.code == 1 and "runs disagree" in result.out, result.text
    assert "completion order perturbed (--perturb-schedule)" in result.err
    site = f"gather_recipe.py:{recipe_line('for f in as_completed(futures)')} gather_pool"
    assert f"first differing arrival order: main process: concurrent.futures.as_completed at {site}, gather 1 " \
           "(it fed gather_pool()): results arrived in another order: " in " ".join(result.out.split())
    # Without the schedule the same two runs race only by the machine's jitter: that is the bug it hides.
    clean = write_card(tmp_path / "clean.toml", name="toy", recipe=GATHER, args=["--chain", "forward"])
    written = run_cli("record", str(clean), "--runs", "2", "--no-doctor", "--perturb-schedule", "--trace",
                      "--workdir", str(tmp_path / "w2"))
    assert written.code == 0, written.text
    assert "traces identical" in written.out
    standard = json.loads((tmp_path / "standards" / "toy.cpu-test.json").read_text())
    assert standard["recorded"]["schedule"] == "perturbed"
    shown = run_cli("standard", "show", str(tmp_path / "standards" / "toy.cpu-test.json"))
    assert "schedule perturbed" in shown.out, shown.text
