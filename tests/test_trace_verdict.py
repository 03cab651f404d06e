"""``detaudit trace`` fails closed: it exits 1, with every reason in its last line and in
``--json``'s ``why_not_ok``, when a process drew from a generator it never seeded, when
replicas' seeds collide, and when samples of one step got the same seed; draws inside library
internals only are listed apart and do not fail it. Real traced runs of small scripts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, run_cli, trace_card, write_card

pytestmark = pytest.mark.slow

GATHER = REPO / "tests" / "recipes" / "gather_recipe.py"

# The origin case in small: a helper process (spawned, so Python's ``random`` is seeded from
# the OS at import, never by the program) draws; with --seed-helper it seeds first.
HELPER_SCRIPT = """
import json, multiprocessing, os, random, sys


def helper(seed, out):
    if seed:
        random.seed(1)
    out.put(random.random())


if __name__ == "__main__":
    random.seed(0)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=helper, args=("--seed-helper" in sys.argv, out))
    proc.start()
    value = out.get(timeout=120)
    proc.join()
    with open(os.environ["DETAUDIT_METRICS_JSONL"], "w") as f:
        f.write(json.dumps({"step": 0, "x": value + random.random()}) + "\\n")
"""

# A draw with no frame of the program on the stack, whose value the program never reads: a
# thread whose target is the library's own function shuffles a list nobody keeps (as Ray's own
# ``random`` calls do in its workers). The program never seeds ``random``: listed apart (library
# code only), it does not fail the trace.
LIBRARY_SCRIPT = """
import json, os, random, threading

worker = threading.Thread(target=random.shuffle, args=(list(range(5)),))
worker.start(); worker.join()
with open(os.environ["DETAUDIT_METRICS_JSONL"], "w") as f:
    f.write(json.dumps({"step": 0, "x": 1.0}) + "\\n")
"""


def line_of(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def script_card(tmp_path: Path, name: str, source: str, *args: str) -> Path:
    script = tmp_path / f"{name}.py"
    script.write_text(source)
    return write_card(tmp_path / f"{name}.toml", name=name, recipe=script, args=list(args), timeout_s=300)


def last_line(out: str) -> str:
    return " ".join(out.strip().splitlines()[-1].split())


def test_an_unseeded_draw_in_a_helper_process_alone_turns_exit_0_into_1(tmp_path: Path) -> None:
    seeded = run_cli("trace", str(script_card(tmp_path, "seeded", HELPER_SCRIPT, "--seed-helper")), "--json",
                     "--workdir", str(tmp_path / "w0"))
    assert seeded.code == 0, seeded.text
    doc = json.loads(seeded.out)
    assert doc["ok"] is True and doc["why_not_ok"] == [] and doc["unseeded"] == [] and doc["collisions"] == []
    unseeded_card = script_card(tmp_path, "unseeded", HELPER_SCRIPT)
    bug = run_cli("trace", str(unseeded_card), "--json", "--workdir", str(tmp_path / "w1"))
    assert bug.code == 1, bug.text
    doc = json.loads(bug.out)
    site = f"unseeded.py:{line_of(HELPER_SCRIPT, 'out.put(random.random())')} helper"
    assert doc["ok"] is False and doc["collisions"] == [] and doc["incomplete"] == []
    reason = (f"SpawnProcess-1 (multiprocessing child) drew from Python's global random it never seeded (first "
              f"random.random at {site})")
    assert doc["why_not_ok"] == [{"reason": "unseeded", "summary": reason}], doc["why_not_ok"]
    text = run_cli("trace", str(unseeded_card), "--workdir", str(tmp_path / "w2"))
    assert text.code == 1 and last_line(text.out) == f"[detaudit] trace not ok: {reason}", text.out


def test_a_draw_inside_library_internals_only_is_listed_apart_and_passes(tmp_path: Path) -> None:
    result = run_cli("trace", str(script_card(tmp_path, "lib", LIBRARY_SCRIPT)), "--json",
                     "--workdir", str(tmp_path / "w"))
    doc = json.loads(result.out)
    assert result.code == 0 and doc["ok"] and doc["why_not_ok"] == [], result.text
    (use,) = doc["unseeded"]
    assert use["library_only"] and use["generator"] == "random" and use["first"]["op"] == "random.shuffle", use


def test_seed_collisions_between_replicas_fail_the_trace(tmp_path: Path) -> None:
    same = run_cli("trace", str(trace_card(tmp_path, "--mp", "spawn", "--mp-same-seed")), "--json",
                   "--workdir", str(tmp_path / "w"))
    assert same.code == 1, same.text
    doc = json.loads(same.out)
    assert [r["reason"] for r in doc["why_not_ok"]] == ["seed-collision"], doc["why_not_ok"]
    assert doc["why_not_ok"][0]["summary"] == ("seed collision: 2 SpawnProcess-1 (multiprocessing child) replicas drew "
                                               "identical streams from numpy's global RandomState (+1 more collision(s))")
    ranked = run_cli("trace", str(trace_card(tmp_path, "--mp", "spawn", name="ranked")), "--json")
    assert ranked.code == 0 and json.loads(ranked.out)["why_not_ok"] == [], ranked.text


def test_seeds_repeated_within_a_step_fail_the_trace(tmp_path: Path) -> None:
    card = write_card(tmp_path / "seeds.toml", name="seeds", recipe=GATHER, args=["--chain", "forward", "--seeds"])
    clean = run_cli("trace", str(card), "--workdir", str(tmp_path / "clean"))
    assert clean.code == 0, clean.text
    assert last_line(clean.out).startswith("[detaudit] trace ok: the run finished with a complete trace")
    bug = run_cli("trace", str(card), "--json", "--workdir", str(tmp_path / "bug"), "--", "--one-seed-per-group")
    assert bug.code == 1, bug.text
    (why,) = json.loads(bug.out)["why_not_ok"]
    site = f"gather_recipe.py:{line_of(GATHER.read_text(), 'gen.manual_seed(')} sample_noise"
    assert why == {"reason": "seeds-repeated",
                   "summary": f"seeds repeated within a step: main process: torch.Generator.manual_seed at {site}"}, why


# record --trace: the metrics never show the draw (a permutation drawn and thrown away), so the
# runs agree on every series; the trace sees a process that drew from numpy's global state it never
# seeded (from the OS: the two runs' draws differ). With --seed-numpy it seeds first.
THROWN_AWAY_SCRIPT = """
import json, os, random, sys
import numpy as np

random.seed(0)
if "--seed-numpy" in sys.argv:
    np.random.seed(0)
np.random.permutation(4)  # thrown away: no metric shows it
with open(os.environ["DETAUDIT_METRICS_JSONL"], "w") as f:
    f.write(json.dumps({"step": 0, "x": random.random()}) + "\\n")
"""


def test_record_trace_writes_no_standard_when_metrics_agree_but_a_process_drew_unseeded(tmp_path: Path) -> None:
    card = script_card(tmp_path, "thrown", THROWN_AWAY_SCRIPT)
    junit = tmp_path / "junit.xml"
    bug = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--trace", "--json", "--junit-xml", str(junit),
                  "--workdir", str(tmp_path / "w1"))
    assert bug.code == 1, bug.text
    doc = json.loads(bug.out)
    assert doc["status"] == "trace-not-ok" and not doc["ok"] and doc["standard"] is None
    assert doc["diff"]["mismatched_count"] == 0  # every series agreed
    site = f"thrown.py:{line_of(THROWN_AWAY_SCRIPT, 'np.random.permutation(4)')} <module>"
    reasons = {r["reason"]: r["summary"] for r in doc["why_not_ok"]}
    assert list(reasons) == ["traces-differ", "unseeded"], doc["why_not_ok"]  # numpy seeds itself from the OS
    assert reasons["unseeded"] == (f"main process drew from numpy's global RandomState it never seeded (first "
                                   f"np.random.permutation at {site})")
    assert not (tmp_path / "standards").exists() or not any((tmp_path / "standards").iterdir())
    assert 'name="trace"' in junit.read_text() and "trace not ok: traces-differ, unseeded" in junit.read_text()
    text = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--trace", "--workdir", str(tmp_path / "w2"))
    assert text.code == 1, text.text
    assert last_line(text.out).startswith("[detaudit] runs disagree in their traces (their metrics agree): the traces "
                                          "differ (run 1 vs run 2); main process drew from numpy's"), text.out
    assert "no standard written" in last_line(text.out)
    card.write_text(card.read_text().replace('thrown.py"]', 'thrown.py", "--seed-numpy"]'))
    fixed = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--trace", "--json",
                    "--workdir", str(tmp_path / "w3"))
    assert fixed.code == 0, fixed.text
    written = json.loads(fixed.out)
    assert written["status"] == "written" and written["why_not_ok"] == [] and Path(written["standard"]).is_file()


def test_record_trace_writes_no_standard_for_seeds_repeated_within_a_step_and_warns_of_collisions(
        tmp_path: Path) -> None:
    card = write_card(tmp_path / "seeds.toml", name="seeds", recipe=GATHER, args=["--chain", "forward", "--seeds"])
    bug = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--trace", "--workdir", str(tmp_path / "w1"),
                  "--", "--one-seed-per-group")
    assert bug.code == 1, bug.text
    site = f"gather_recipe.py:{line_of(GATHER.read_text(), 'gen.manual_seed(')} sample_noise"
    assert last_line(bug.out) == ("[detaudit] trace not ok (the runs' metrics agree, but the trace cannot prove the next "
                                  "run will): seeds repeated within a step: main process: torch.Generator.manual_seed at "
                                  f"{site}; no standard written ({tmp_path / 'standards' / 'seeds.cpu-test.json'})")
    assert "RECORDED" not in bug.out and not (tmp_path / "standards" / "seeds.cpu-test.json").exists()
    # Replicas seeded alike (identical initial weights are drawn alike by design): a warning, the standard is written.
    same = run_cli("record", str(trace_card(tmp_path, "--mp", "fork", "--mp-same-seed")), "--runs", "2",
                   "--no-doctor", "--trace", "--workdir", str(tmp_path / "w2"))
    assert same.code == 0, same.text
    assert "trace: warning: seed collision: 2 " in same.out and "RECORDED" in same.out
