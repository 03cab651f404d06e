"""--trace: the runtime ledger of global-RNG draws and module fingerprints, in real processes
(the main process, multiprocessing children, Ray actors and tasks), through the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TRACE_RECIPE, run_cli, run_traced, trace_card, write_card

from detaudit.trace import DIR_ENV, KEEP_ENV, MODE_ENV, trace_env
from detaudit.trace.compare import compare_traces, seed_collisions, unseeded_uses
from detaudit.trace.files import read_trace
from detaudit.render.trace import comparison_lines

def recipe_line(text: str) -> int:
    """The line of TRACE_RECIPE that contains ``text`` (so tests do not hard-code numbers)."""
    for number, line in enumerate(TRACE_RECIPE.read_text().splitlines(), 1):
        if text in line:
            return number
    raise AssertionError(text)


LEDGER_SCRIPT = """
import random, numpy as np, torch
import torch.nn as nn
random.random()
np.random.rand(2)
torch.randperm(5)
layer = nn.Linear(3, 3)                                  # nn.init: Tensor.uniform_
nn.functional.dropout(torch.ones(4), p=0.5, training=True)
torch.multinomial(torch.ones(4), 2)
torch.rand(2, generator=torch.Generator().manual_seed(1))  # explicit generator: not a global draw
with torch.random.fork_rng():
    torch.manual_seed(5)
    torch.rand(1)                                        # seeded inside fork_rng
torch.rand(1)                                            # after: unseeded again
torch.manual_seed(0); np.random.seed(0); random.seed(0)
torch.randn(2); np.random.randn(); random.choice([1, 2])
print(torch.cuda.is_initialized())
s1 = random.getstate(); s2 = np.random.get_state(); random.seed(3); np.random.seed(3)
random.randint(0, 9); np.random.randint(9)
random.setstate(s1); np.random.set_state(s2)
random.uniform(0, 1); np.random.uniform()
"""


@pytest.mark.slow
def test_ledger_records_torch_numpy_random_with_sites_and_seeding(tmp_path: Path) -> None:
    trace_dir, out = run_traced(tmp_path, LEDGER_SCRIPT)
    assert out.strip() == "False"  # tracing never initialises CUDA
    run = read_trace(trace_dir)
    assert [p.kind for p in run.processes] == ["main"]
    draws = run.processes[0].draws
    ops = [d.op for d in draws]
    assert ops[:5] == ["random.random", "np.random.rand", "torch.randperm", "Tensor.uniform_", "Tensor.uniform_"]
    assert "F.dropout" in ops and "torch.multinomial" in ops
    assert not any(d.gen.startswith("torch.cuda") for d in draws)  # a machine without CUDA
    by_op = {d.op: d for d in draws}
    assert by_op["torch.randperm"].site == "t.py:6 <module>" and by_op["torch.randperm"].seeded is None
    assert by_op["Tensor.uniform_"].site == "t.py:7 <module>" and not by_op["Tensor.uniform_"].library
    rands = [d for d in draws if d.op == "torch.rand"]
    assert len(rands) == 2  # the explicit-generator call is not in the ledger
    assert rands[0].seeded == "t.py:12 <module>" and rands[1].seeded is None  # fork_rng restored "unseeded"
    assert by_op["torch.randn"].seeded == by_op["np.random.randn"].seeded == "t.py:15 <module>"
    assert by_op["random.choice"].seeded == "t.py:15 <module>"
    # A state saved and set back counts as seeded where the saved state was (numpy and random too).
    assert by_op["random.randint"].seeded == by_op["np.random.randint"].seeded == "t.py:18 <module>"
    assert by_op["random.uniform"].seeded == by_op["np.random.uniform"].seeded == "t.py:15 <module>"
    gens = {d.gen for d in draws}
    assert gens == {"torch.cpu", "numpy", "random"}
    uses = {u.generator: u for u in unseeded_uses(run)}
    assert uses["torch.cpu"].first.op == "torch.randperm" and uses["numpy"].count == 1


@pytest.mark.slow
def test_two_unseeded_processes_differ_from_their_first_draw(tmp_path: Path) -> None:
    source = "import torch\ntorch.zeros(1)\ntorch.randperm(4)\n"
    a, _ = run_traced(tmp_path, source, name="a")
    b, _ = run_traced(tmp_path, source, name="b")
    cmp = compare_traces(read_trace(a), read_trace(b))
    assert cmp.draw is not None and cmp.draw.kind == "state" and cmp.draw.first_of_generator
    assert comparison_lines(cmp)[0] == (
        "first differing draw: main process: torch.randperm at t.py:3 <module> drew from a global torch generator "
        "this process never seeded; state differs from its first draw (run 1 vs run 2)")
    seeded = "import torch\ntorch.manual_seed(3)\ntorch.randperm(4)\n"
    c, _ = run_traced(tmp_path, seeded, name="c")
    d, _ = run_traced(tmp_path, seeded, name="d")
    assert compare_traces(read_trace(c), read_trace(d)).identical


@pytest.mark.slow
def test_bounded_size_keeps_k_records_per_site_then_a_hash_chain(tmp_path: Path) -> None:
    source = ("import os, torch\ntorch.manual_seed(1)\n"
              "for i in range(100):\n"
              "    if i == 60 and os.environ.get('RESEED'):\n"
              "        torch.manual_seed(2)\n"
              "    torch.rand(1)\n")
    a, _ = run_traced(tmp_path, source, keep=4, name="a")
    b, _ = run_traced(tmp_path, source, keep=4, name="b", extra_env={"RESEED": "1"})
    run_a = read_trace(a)
    proc = run_a.processes[0]
    assert len(proc.draws) == 4
    assert [(c.count, c.final) for c in proc.chains.values()] == [(96, 96)]
    kinds = [json.loads(line)["type"] for line in open(next(a.glob("*.jsonl")))]
    # 100 draws leave 4 draw lines and the chain's checkpoints at counts 1, 2, 4, ... 64 plus its final one,
    # not a line per draw; the other lines are one each (start, process, seed, seed value, end, ...).
    assert kinds.count("draw") == 4 and kinds.count("chain") <= 8, kinds
    assert len(kinds) - kinds.count("chain") < 16, kinds
    cmp = compare_traces(run_a, read_trace(b))
    assert cmp.draw is not None and cmp.draw.kind == "chain"  # the first 4 agree; the chain does not
    assert "the draws after the first kept ones differ" in comparison_lines(cmp)[0]


@pytest.mark.slow
def test_tracing_is_off_by_default(tmp_path: Path) -> None:
    card = write_card(tmp_path / "toy.toml")
    result = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--workdir", str(tmp_path / "runs"))
    assert result.code == 0, result.text
    assert not (tmp_path / "runs" / "run1" / "trace").exists() and "trace" not in result.out
    env = {k: v for k, v in os.environ.items() if k not in (MODE_ENV, DIR_ENV, KEEP_ENV)}
    probe = subprocess.run([sys.executable, "-c", "import sys, detaudit.cli, detaudit.trace.bootstrap as b; "
                            "print(b.install(), b.recorder(), 'torch' in sys.modules)"],
                           env=env, capture_output=True, text=True, timeout=120)
    assert probe.stdout.split() == ["None", "None", "False"], probe.stderr


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_multiprocessing_children_are_traced_and_collisions_warned(tmp_path: Path, method: str) -> None:
    card = trace_card(tmp_path, "--mp", method, "--mp-same-seed")
    result = run_cli("trace", str(card), "--json", "--workdir", str(tmp_path / "w"))
    assert result.code == 1, result.text  # replicas seeded alike: not ok
    doc = json.loads(result.out)
    assert [r["reason"] for r in doc["why_not_ok"]] == ["seed-collision"]
    children = [p for p in doc["processes"] if p["process"].endswith("(multiprocessing child)")]
    assert len(children) == 2
    assert all("numpy at trace_recipe.py" in c["seeded"] and "torch.cpu at trace_recipe.py" in c["seeded"]
               for c in children)
    assert doc["unseeded"] == []
    gens = sorted(c["generator"] for c in doc["collisions"])
    assert gens == ["numpy", "torch.cpu"]
    assert "seed collision: 2" in doc["collisions"][0]["summary"]
    # Seeded by rank: no collision.
    ranked = run_cli("trace", str(trace_card(tmp_path, "--mp", method, name="ranked")), "--json")
    assert ranked.code == 0 and json.loads(ranked.out)["collisions"] == []


@pytest.mark.slow
@pytest.mark.ray
def test_ray_hidden_draw_scan_rng_cannot_see_is_named_by_record_trace(tmp_path: Path) -> None:
    line = recipe_line("return sampler(n)")
    scan = run_cli("scan-rng", str(TRACE_RECIPE), "--format", "json", "--no-cache")
    assert not any(f["line"] == line for f in json.loads(scan.out)["findings"])  # statically invisible
    card = trace_card(tmp_path, "--ray")
    result = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--trace", "--workdir", str(tmp_path / "runs"))
    assert result.code == 1, result.text
    assert "runs disagree" in result.out
    expected = (f"first differing draw: HiddenDrawer (Ray actor): torch.randperm at trace_recipe.py:{line} hidden_draw "
                "drew from a global torch generator this process never seeded; state differs from its first draw "
                "(run 1 vs run 2)")
    assert expected in result.out
    # Ray stops its workers without atexit: each ends its ledger after every task, so nothing is incomplete.
    assert "trace incomplete" not in result.out
    assert "trace:   SeededWorker (Ray actor) (pid " in result.out and "): all agree" in result.out
    unseeded = [ln for ln in result.out.splitlines() if "trace: unseeded:" in ln]
    assert len(unseeded) == 1 and "HiddenDrawer (Ray actor): 1 draw(s)" in unseeded[0]
    assert "SeededWorker" not in "\n".join(unseeded)
    run = read_trace(tmp_path / "runs" / "run1" / "trace")
    kinds = {(p.kind, p.label) for p in run.processes}
    assert {("main", "main"), ("Ray actor", "SeededWorker"), ("Ray actor", "HiddenDrawer")} <= kinds
    task = [p for p in run.processes if p.kind == "Ray task"]
    assert task and task[0].label == "numpy_task" and task[0].draws[0].seeded is not None


@pytest.mark.slow
@pytest.mark.ray
def test_ray_seeded_replicas_collide_and_seeded_hidden_actor_is_clean(tmp_path: Path) -> None:
    """... and an actor killed inside a task (after it drew) leaves a ledger without an end."""
    card = trace_card(tmp_path, "--ray", "--seed-hidden", "--replicas", "2", "--kill-mid-task")
    result = run_cli("trace", str(card), "--workdir", str(tmp_path / "w"))
    assert result.code == 1, result.text  # nothing the tracer saw ended the killed actor: no green
    assert "no draw from a global generator that its process never seeded" in result.out
    assert "seed collision: 2 SeededWorker (Ray actor) replicas" in result.out
    run = read_trace(tmp_path / "w" / "run1" / "trace")
    assert [c.label for c in seed_collisions(run)] == ["SeededWorker (Ray actor)"]
    (sleeper,) = [p for p in run.processes if p.label == "Sleeper"]
    assert run.problems == [f"pid {sleeper.pid} Sleeper (Ray actor): its ledger has no end: the process was killed "
                            "by something the tracer did not see (every record it made up to then is in its ledger)"]
    assert f"trace incomplete: pid {sleeper.pid} Sleeper (Ray actor)" in " ".join(result.out.split())


@pytest.mark.slow
def test_modules_save_and_against_name_the_first_differing_module(tmp_path: Path) -> None:
    card = trace_card(tmp_path)
    saved = tmp_path / "machine-a"
    first = run_cli("trace", str(card), "--modules", "--save", str(saved))
    assert first.code == 0, first.text
    meta = json.loads((saved / "meta.json").read_text())
    assert meta["mode"] == "modules" and meta["card"] == "tracetoy" and list((saved / "trace").glob("main.*.jsonl"))
    same = run_cli("trace", str(card), "--against", str(saved))
    assert same.code == 0, same.text
    assert "traces identical" in same.out
    other = run_cli("trace", str(card), "--against", str(saved), "--json", env={"TRACE_RECIPE_PERTURB": "1"})
    assert other.code == 1, other.text
    module = json.loads(other.out)["comparison"]["first_module"]
    assert module["a"]["module"] == "Sequential.3" and module["a"]["class"] == "Scale" and module["inputs_match"]
    assert module["summary"] == (f"main process: module Sequential.3 (Scale), call 1: same inputs, different outputs "
                                 f"(saved {saved} vs this run): this module computed different bits")
    text = run_cli("trace", str(card), "--against", str(saved), env={"TRACE_RECIPE_PERTURB": "1"})
    assert text.code == 1 and "first differing module: main process: module Sequential.3 (Scale)" in text.out
    # A call after the kept records (DETAUDIT_TRACE_KEEP=2; the model runs 4 times): only the hash
    # chain differs, and the report says so instead of showing two identical kept calls as different.
    kept = tmp_path / "machine-a-keep2"
    assert run_cli("trace", str(card), "--modules", "--save", str(kept), env={"DETAUDIT_TRACE_KEEP": "2"}).code == 0
    late = run_cli("trace", str(card), "--against", str(kept), "--json",
                   env={"DETAUDIT_TRACE_KEEP": "2", "TRACE_RECIPE_PERTURB": "after:3"})
    assert late.code == 1, late.text
    module = json.loads(late.out)["comparison"]["first_module"]
    assert module["after_kept"] and not module["inputs_match"] and module["a"]["module"] == "Sequential.3"
    assert module["summary"] == (f"main process: module Sequential.3 (Scale): its first 2 calls match, a later call "
                                 f"differs (saved {kept} vs this run) (after the first 2 calls only a hash chain is "
                                 "kept: set DETAUDIT_TRACE_KEEP higher to name the call)")


@pytest.mark.slow
def test_bad_trace_input_is_one_line_exit_2(tmp_path: Path) -> None:
    card = trace_card(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_cli("trace", str(card), "--against", str(empty))
    assert result.code == 2 and result.err.strip() == (
        f"detaudit: error: {empty / 'meta.json'}: not a saved trace (no meta.json; save one with "
        "`detaudit trace CARD --save DIR`)")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("x")
    result = run_cli("trace", str(card), "--save", str(taken))
    assert result.code == 2 and result.err.strip() == f"detaudit: error: {taken}: exists; give --save a new folder"
    assert sorted(p.name for p in taken.iterdir()) == ["x"]
    bad = tmp_path / "bad"
    (bad / "trace").mkdir(parents=True)
    (bad / "meta.json").write_text(json.dumps({"schema": "detaudit/trace/1", "mode": "rng"}))
    (bad / "trace" / "main.1.jsonl").write_text('{"type": "draw"}\n')
    result = run_cli("trace", str(card), "--against", str(bad))
    assert result.code == 2 and result.err.startswith(f"detaudit: error: {bad / 'trace' / 'main.1.jsonl'}:1: ")
    result = run_cli("verify", "--metrics", str(tmp_path / "m.jsonl"), "--standard", str(tmp_path / "s.json"), "--trace")
    assert result.code == 2 and "--trace traces a run: give a CARD, not --metrics" in result.err


@pytest.mark.slow
def test_record_and_verify_trace_a_seeded_recipe(tmp_path: Path) -> None:
    card = trace_card(tmp_path, "--mp", "fork")
    record = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--trace", "--workdir", str(tmp_path / "runs"))
    assert record.code == 0, record.text
    assert "[detaudit] trace: traces identical (run 1 vs run 2)" in record.out
    assert "[detaudit] trace: no draw from a global generator that its process never seeded" in record.out
    assert len(list((tmp_path / "runs" / "run2" / "trace").glob("*.jsonl"))) == 3  # main + 2 forked children
    verify = run_cli("verify", str(card), "--trace", "--workdir", str(tmp_path / "verify"))
    assert verify.code == 0, verify.text
    assert "no draw from a global generator that its process never seeded" in verify.out and "PASSED" in verify.out
    assert (tmp_path / "verify" / "run1" / "trace").is_dir()  # kept for the trace


@pytest.mark.slow
def test_tracing_keeps_the_default_device_of_a_device_context(tmp_path: Path) -> None:
    """`with torch.device(d):` must still place traced factories on d (a GPU run once built PickScore's
    `torch.randn` parameters on the CPU under the tracer; "meta" shows it on a machine without CUDA)."""
    source = ("import torch\n"
              "with torch.device('meta'):\n"
              "    made = [torch.randn(3), torch.rand(2), torch.randint(0, 5, (2,)), torch.randperm(4),\n"
              "            torch.nn.Linear(2, 2).weight, torch.zeros(1)]\n"
              "print(','.join(t.device.type for t in made))\n")
    _, out = run_traced(tmp_path, source)
    assert out.strip() == ",".join(["meta"] * 6)


DATALOADER_SCRIPT = """
import random, numpy as np, torch
from torch.utils.data import DataLoader, Dataset

class Noisy(Dataset):
    def __len__(self):
        return 4
    def __getitem__(self, i):
        return torch.rand(1).item() + np.random.rand() + random.random()

if __name__ == "__main__":
    torch.manual_seed(0); np.random.seed(0); random.seed(0)
    loader = DataLoader(Noisy(), batch_size=1, num_workers=2, multiprocessing_context="{method}")
    print(len([b for b in loader]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_dataloader_workers_are_traced_as_such_and_seeded_apart(tmp_path: Path, method: str) -> None:
    """DataLoader workers are named by worker id (they seed before they publish it), and their
    draws from torch, numpy and random count as seeded (DataLoader seeds all three per worker),
    with different streams per worker: no collision, nothing unseeded."""
    trace_dir, out = run_traced(tmp_path, DATALOADER_SCRIPT.replace("{method}", method))
    assert out.strip() == "4"
    run = read_trace(trace_dir)
    workers = sorted((p for p in run.processes if p.kind == "DataLoader worker"), key=lambda p: p.label)
    assert [p.label for p in workers] == ["DataLoader-worker-0", "DataLoader-worker-1"]
    assert not [p for p in run.processes if p.kind == "multiprocessing child"]
    for worker in workers:
        draws = {d.op: d for d in worker.draws}
        assert {"torch.rand", "np.random.rand", "random.random"} <= set(draws), draws
        assert draws["torch.rand"].site.startswith("t.py:9 ")
        assert all(draws[op].seeded for op in ("torch.rand", "np.random.rand", "random.random"))
    assert not seed_collisions(run)
    assert not [u for u in unseeded_uses(run) if u.process in {w.display for w in workers}]
    # The same workers seeded alike (worker_init_fn re-seeding every worker with one constant) collide.
    same = DATALOADER_SCRIPT.replace("{method}", method).replace(
        "num_workers=2,", "num_workers=2, worker_init_fn=lambda i: (torch.manual_seed(1), np.random.seed(1), random.seed(1)),")
    if method == "fork":
        trace_dir, _ = run_traced(tmp_path, same, name="same")
        collided = {c.generator for c in seed_collisions(read_trace(trace_dir))}
        assert collided == {"torch.cpu", "numpy", "random"}, collided


SHUFFLE_RECIPE = """import json, os, sys, torch
if "--seed" in sys.argv:
    torch.manual_seed(0)
order = torch.randperm(8).tolist()  # a distinct loss for each of the 8! orders
with open(os.environ["DETAUDIT_METRICS_JSONL"], "w") as fh:
    for step in range(2):
        fh.write(json.dumps({"step_key": "step", "step": step, "loss": float(sum(v * 8**i for i, v in enumerate(order))) + step}) + "\\n")
"""


@pytest.mark.slow
def test_record_and_verify_json_carry_the_trace_report(tmp_path: Path) -> None:
    """`--json` on record and verify: the diff or failing series, and next to them the trace report."""
    script = tmp_path / "shuffle.py"
    script.write_text(SHUFFLE_RECIPE)
    card = write_card(tmp_path / "shuffle.toml", name="shuffle", recipe=script, timeout_s=120)
    unseeded = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--trace", "--json",
                       "--workdir", str(tmp_path / "w1"))
    assert unseeded.code == 1, unseeded.text
    doc = json.loads(unseeded.out)  # stdout is the JSON object alone
    assert doc["command"] == "record" and doc["status"] == "disagree" and not doc["ok"] and doc["standard"] is None
    assert doc["diff"]["root"]["series"] == "loss" and doc["diff"]["mismatched_count"] == 1
    assert doc["trace"]["comparison"]["first_draw"]["summary"] == (
        "main process: torch.randperm at shuffle.py:4 <module> drew from a global torch generator this process "
        "never seeded; state differs from its first draw (run 1 vs run 2)")
    assert [u["process"] for u in doc["trace"]["unseeded"]] == ["main process"]
    assert [r["status"] for r in doc["runs"]] == ["ok", "ok"]
    card.write_text(card.read_text().replace(f'"{script}"]', f'"{script}", "--seed"]'))
    seeded = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--json", "--workdir", str(tmp_path / "w2"))
    assert seeded.code == 0, seeded.text
    written = json.loads(seeded.out)
    assert written["status"] == "written" and written["series_written"] == 1 and written["trace"] is None
    assert Path(written["standard"]).exists()
    other = tmp_path / "other.jsonl"
    other.write_text('{"step_key": "step", "step": 0, "loss": 1.5}\n{"step_key": "step", "step": 1, "loss": 2.5}\n')
    failed = run_cli("verify", str(card), "--metrics", str(other), "--json")
    assert failed.code == 1, failed.text
    report = json.loads(failed.out)
    assert report["status"] == "failed" and report["compared"] == 1
    (failure,) = report["failures"]
    assert failure["series"] == "loss" and failure["run"] == 1.5 and failure["kind"] == "value"
    passed = run_cli("verify", str(card), "--json", "--trace", "--workdir", str(tmp_path / "w3"))
    assert passed.code == 0, passed.text
    ok = json.loads(passed.out)
    assert ok["status"] == "passed" and ok["failures"] == [] and ok["trace"]["unseeded"] == []
    assert run_cli("verify", "--suite", "cpu", "--json").code == 2


@pytest.mark.slow
def test_a_folder_where_the_standards_trace_goes_stops_record_before_it_writes(tmp_path: Path) -> None:
    card = trace_card(tmp_path)
    out = tmp_path / "standards" / "toy.json"
    in_the_way = tmp_path / "standards" / "toy.trace"
    in_the_way.mkdir(parents=True)
    (in_the_way / "notes.txt").write_text("mine\n")
    result = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--trace", "--out", str(out))
    assert result.code == 2, result.text
    # before any run: nothing ran, nothing was written, the folder is untouched
    assert result.err.strip() == f"detaudit: error: {in_the_way}: exists and is not a saved trace; move it away"
    assert not out.exists() and (in_the_way / "notes.txt").read_text() == "mine\n"


@pytest.mark.slow
def test_a_standard_carries_a_trace_and_a_failing_verify_names_the_module(tmp_path: Path) -> None:
    """record --trace keeps run 1's trace next to the standard; verify then traces its run and,
    when the bits differ, names the first module whose inputs match and outputs differ."""
    card = trace_card(tmp_path)
    recorded = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--trace=modules")
    assert recorded.code == 0, recorded.text
    (standard,) = (tmp_path / "standards").glob("tracetoy.*.json")
    carried = standard.with_name(standard.stem + ".trace")
    assert f"run 1's trace saved with the standard: {carried}" in " ".join(recorded.out.split())
    meta = json.loads((carried / "meta.json").read_text())
    assert meta["mode"] == "modules" and meta["standard"] == standard.name and list(carried.glob("trace/main.*"))
    passed = run_cli("verify", str(card), "--json")
    assert passed.code == 0, passed.text
    doc = json.loads(passed.out)
    assert doc["standard_trace"] == str(carried) and doc["trace"]["comparison"]["identical"]
    assert "the standard carries a trace" in passed.err and doc["workdir_removed"]
    failed = run_cli("verify", str(card), "--json", env={"TRACE_RECIPE_PERTURB": "1"})
    assert failed.code == 1, failed.text
    doc = json.loads(failed.out)
    assert doc["status"] == "failed" and [f["series"] for f in doc["failures"]] == ["main/out"]
    assert doc["trace"]["comparison"]["first_module"]["summary"] == (
        "main process: module Sequential.3 (Scale), call 1: same inputs, different outputs "
        "(the standard's run vs this run): this module computed different bits")
    text = run_cli("verify", str(card), env={"TRACE_RECIPE_PERTURB": "1"})
    assert text.code == 1 and "first differing module: main process: module Sequential.3 (Scale)" in text.out
    # Re-recorded without --trace, the old trace no longer describes the standard: it goes.
    again = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--update")
    assert again.code == 0, again.text
    assert not carried.exists() and "the replaced standard's trace" in " ".join(again.out.split())
    assert "the standard carries a trace" not in run_cli("verify", str(card)).err


def test_module_chains_that_differ_are_never_identical() -> None:
    """A child module that ran in one run only is named; when only hash chains differ, the
    innermost module kept in both runs is named; with nothing kept, still a difference."""
    from detaudit.trace.compare import first_module_difference
    from detaudit.trace.files import Chain, ModuleCall, ProcessTrace

    def proc(chains: dict[str, str], calls: list[str]) -> ProcessTrace:
        p = ProcessTrace(Path("t.jsonl"), kind="main")
        p.module_chains = {name: Chain(points={1: digest}, final=1) for name, digest in chains.items()}
        p.modules = [ModuleCall(i, name, "Linear", 1, "in", "out") for i, name in enumerate(calls)]
        return p

    a = proc({"Seq": "x", "Seq.0": "y"}, ["Seq.0", "Seq"])
    b = proc({"Seq": "z"}, ["Seq"])
    diff = first_module_difference(a, b)
    assert diff is not None and diff.kind == "missing" and diff.a is not None and diff.a.name == "Seq.0"
    chained = first_module_difference(a, proc({"Seq": "z", "Seq.0": "y"}, ["Seq.0", "Seq"]))
    assert chained is not None and chained.after_kept and chained.call.name == "Seq"
    nothing_kept = first_module_difference(proc({"Seq": "x"}, []), proc({"Seq": "z"}, []))
    assert nothing_kept is not None and nothing_kept.call.name == "Seq"
    assert first_module_difference(proc({"Seq": "x"}, ["Seq"]), proc({"Seq": "x"}, ["Seq"])) is None
    # One more kept call in one run (no chains): a difference, never "identical".
    extra = proc({}, ["Seq"])
    extra.modules.append(ModuleCall(5, "Seq", "Linear", 2, "in", "out"))
    late = first_module_difference(proc({}, ["Seq"]), extra)
    assert late is not None and late.kind == "missing" and late.b is not None and late.b.n == 2


def test_the_tracer_does_not_put_detaudits_install_folder_ahead_of_the_runs_packages(tmp_path: Path) -> None:
    """Only the site hook goes on PYTHONPATH; it loads detaudit from beside itself. detaudit's
    root (here the repo, with its own ``recipes`` package; installed: the tool's site-packages)
    must not shadow a package of the run's."""
    mine = tmp_path / "mine" / "recipes"
    mine.mkdir(parents=True)
    (mine / "__init__.py").write_text("WHOSE = 'the run'\n")
    trace_dir = tmp_path / "trace"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DETAUDIT_TRACE") and k != "PYTHONPATH"}
    env = trace_env("rng", trace_dir, dict(env, PYTHONPATH=str(mine.parent)))
    proc = subprocess.run([sys.executable, "-c", "import random, recipes; random.random(); print(recipes.WHOSE)"],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "the run", proc.stderr
    (main,) = read_trace(trace_dir).processes
    assert [d.op for d in main.draws] == ["random.random"] and main.ended


COMPREHENSION_SCRIPT = """
import torch
def main():
    xs = [torch.ones(2) * k for k in range(2)]
    return {k: x.sum() for k, x in enumerate(xs)}
main()
"""


@pytest.mark.slow
def test_an_op_in_a_comprehension_is_named_by_its_function(tmp_path: Path) -> None:
    """Python 3.12 runs a list or dict comprehension in its function's frame, 3.11 in a frame of its
    own (``<listcomp>``): named by the function on both, a trace saved under one Python compares
    with a run under the other instead of reporting the comprehension's ops as made in one run only."""
    trace_dir, _ = run_traced(tmp_path, COMPREHENSION_SCRIPT, mode="modules")
    (main,) = read_trace(trace_dir).processes
    where = {(op.name, op.at) for op in main.ops}
    assert ("Tensor.mul", "t.py:4 main") in where and ("Tensor.sum", "t.py:5 main") in where, where
    assert all(op.site == op.at for op in main.ops)


def _wheel(folder: Path, name: str, source: str) -> Path:
    """A pure-Python wheel of one package (as any build backend writes it), for pip to install."""
    import base64
    import hashlib
    import zipfile

    files = {f"{name}/__init__.py": source.encode(),
             f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
             f"{name}-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for path, data in files.items()) + f"{name}-1.0.dist-info/RECORD,,\n"
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{name}-1.0.dist-info/RECORD", record)
    return wheel


@pytest.mark.slow
def test_a_package_pip_installed_into_a_target_folder_is_a_library(tmp_path: Path) -> None:
    """``pip install --target DIR`` + ``PYTHONPATH=DIR`` (a lent machine's image, a pex, a Bazel
    sandbox): the packages pip put there are libraries, as in site-packages, so a draw inside one
    is placed at the user's line that led there (here the import), and a package's own line is
    never taken for the user's code (a trace saved where the package sat in site-packages then
    compares). The same code on PYTHONPATH without an installer's record stays the user's."""
    source = "import random\nrandom.random()\n"
    target = tmp_path / "target"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target",
                              str(target), str(_wheel(tmp_path, "noisylib", source))], capture_output=True, text=True)
    assert install.returncode == 0, install.stderr
    plain = tmp_path / "plain"
    (plain / "mylib").mkdir(parents=True)
    (plain / "mylib" / "__init__.py").write_text(source)
    script = "import noisylib, mylib, random\nrandom.random()\n"
    trace_dir, _ = run_traced(tmp_path, script, pythonpath=[target, plain])
    (main,) = read_trace(trace_dir).processes
    draws = [(d.site, d.library) for d in main.draws if d.op == "random.random"]
    assert draws == [("t.py:1 <module>", False), ("mylib/__init__.py:2 <module>", False),
                     ("t.py:2 <module>", False)], draws
