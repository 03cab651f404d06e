"""--trace fails closed (issue #25): a trace comparison says "identical" only when every process of
both runs wrote a complete ledger, in the same mode, for the same card; otherwise "incomplete",
naming the process and why. Bad trace input is a one-line error (exit 2). Real processes, real
forks and subprocesses; most scripts here import no torch, so they run fast."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_cli, run_traced, write_card

from detaudit.errors import InputError, UsageError
from detaudit.render.trace import comparison_lines, runs_trace_lines
from detaudit.trace import CARD_ENV, KEEP_ENV, SITE_DIR, trace_env, trace_hook
from detaudit.trace.compare import (
    TraceComparison,
    audit_runs,
    compare_traces,
    unseeded_uses,
)
from detaudit.trace.files import read_trace
from detaudit.trace.recorder import FORK_RESEED
from detaudit.trace.saved import read_saved, save_trace, trace_meta


def _incomplete(cmp: TraceComparison) -> str:
    return "\n".join(cmp.incomplete)


# --- seeding from the OS is not seeding --------------------------------------------------------------

SEED_NONE = """import random, numpy as np
random.seed(None); random.random()
np.random.seed(None); np.random.rand()
random.seed(a=0); random.random()
np.random.seed(seed=0); np.random.rand()
random.seed(); random.random()
"""


def test_seed_none_is_a_seed_from_the_os_and_seed_a_zero_is_a_seed(tmp_path: Path) -> None:
    trace_dir, _ = run_traced(tmp_path, SEED_NONE)
    (main,) = read_trace(trace_dir).processes
    draws = [(d.op, d.seeded, d.entropy) for d in main.draws]
    assert draws == [
        ("random.random", None, "random.seed() at t.py:2 <module>"),
        ("np.random.rand", None, "np.random.seed() at t.py:3 <module>"),
        ("random.random", "t.py:4 <module>", None),
        ("np.random.rand", "t.py:5 <module>", None),
        ("random.random", None, "random.seed() at t.py:6 <module>"),
    ]
    uses = {u.generator: u for u in unseeded_uses(read_trace(trace_dir))}
    assert uses["random"].count == 2 and uses["random"].how == "random.seed() at t.py:2 <module>"
    assert uses["numpy"].count == 1 and uses["numpy"].first.site == "t.py:3 <module>"


FORK_CHILD = """import os, random
random.seed(0)
random.random()
pid = os.fork()
if pid == 0:
    random.random()
    os._exit(0)
os.waitpid(pid, 0)
"""


def test_a_fork_child_draws_from_random_reseeded_by_the_os_not_from_the_parents_seed(tmp_path: Path) -> None:
    trace_dir, _ = run_traced(tmp_path, FORK_CHILD)
    run = read_trace(trace_dir)
    assert run.problems == []
    main, child = run.processes
    assert main.kind == "main" and main.draws[0].seeded == "t.py:2 <module>"
    (draw,) = child.draws
    assert draw.site == "t.py:6 <module>" and draw.seeded is None and draw.entropy == FORK_RESEED
    (use,) = unseeded_uses(run)
    assert use.process == child.display and use.how == FORK_RESEED


# --- every process ends its ledger -------------------------------------------------------------------

MP_CHILD = """import multiprocessing, os
import numpy as np

def child():
    np.random.seed(1)
    for i in range(9):
        if i == 8 and os.environ.get("LATE"):
            np.random.seed(2)  # only the ninth draw differs: after the kept two, past the last checkpoint
        np.random.rand()

if __name__ == "__main__":
    p = multiprocessing.get_context("fork").Process(target=child)
    p.start(); p.join()
"""


def test_a_multiprocessing_child_that_leaves_through_os_exit_writes_its_final_chain(tmp_path: Path) -> None:
    a, _ = run_traced(tmp_path, MP_CHILD, keep=2, name="a")
    b, _ = run_traced(tmp_path, MP_CHILD, keep=2, name="b", extra_env={"LATE": "1"})
    run_a = read_trace(a)
    child = next(p for p in run_a.processes if p.kind == "multiprocessing child")
    assert child.ended and run_a.problems == []
    assert [(c.count, c.final) for c in child.chains.values()] == [(7, 7)]
    cmp = compare_traces(run_a, read_trace(b))
    assert not cmp.identical and cmp.draw is not None and cmp.draw.kind == "chain"
    assert cmp.draw.process == child.display
    assert compare_traces(run_a, read_trace(run_traced(tmp_path, MP_CHILD, keep=2, name="c")[0])).identical


# signal.raise_signal is C's raise(): a kill the tracer does not see (os.kill it sees)
KILLED_CHILD = """import os, signal, random, time
random.seed(0)
pid = os.fork()
if pid == 0:
    random.seed(1); random.random()
    time.sleep(0.5)
    signal.raise_signal(signal.SIGKILL)
os.kill(pid, 0)  # only asks whether the child exists: never what ended it
os.kill(pid, signal.SIGCONT)
os.waitpid(pid, 0)
"""


def test_a_process_killed_before_its_ledger_ends_makes_the_comparison_incomplete(tmp_path: Path) -> None:
    a, _ = run_traced(tmp_path, KILLED_CHILD, name="a")
    b, _ = run_traced(tmp_path, KILLED_CHILD, name="b")
    cmp = compare_traces(read_trace(a), read_trace(b))
    assert cmp.draw is None and cmp.module is None  # every recorded draw agrees ...
    assert not cmp.identical  # ... but nothing says what ended the child
    child = next(p for p in read_trace(a).processes if p.kind != "main")
    assert (f"run 1: pid {child.pid} {child.display}: its ledger has no end: the process was killed by something "
            "the tracer did not see (every record it made up to then is in its ledger)") in _incomplete(cmp)
    assert not any(line.startswith("traces identical") for line in comparison_lines(cmp))
    # ... and what the unseeded check found is said of the traced processes only
    report = audit_runs([a, b])
    assert not report.first_complete
    assert ("yellow", "no draw from a global generator that its process never seeded in the processes traced (the "
            "trace is incomplete)") in runs_trace_lines(report)
    assert ("green", "no draw from a global generator that its process never seeded") in runs_trace_lines(
        audit_runs([run_traced(tmp_path, PLAIN, name="c")[0]]))


SELF_KILLED_CHILD = KILLED_CHILD.replace("os.kill(pid, 0)", "").replace("os.kill(pid, signal.SIGCONT)", "").replace("signal.raise_signal(signal.SIGKILL)", "os.kill(os.getpid(), signal.SIGKILL)")


def test_a_process_that_kills_itself_ends_its_ledger_first(tmp_path: Path) -> None:
    """A watchdog's SIGKILL to its own process (Inductor's compile workers have one): the tracer
    sees the os.kill and ends the ledger before the signal goes out."""
    run = read_trace(run_traced(tmp_path, SELF_KILLED_CHILD)[0])
    child = next(p for p in run.processes if p.kind != "main")
    assert child.ended and child.signals == [(child.pid, int(signal.SIGKILL))] and run.problems == []


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_a_compile_worker_pool_ended_at_exit_keeps_every_draw_and_is_ended_by_its_parent(tmp_path: Path) -> None:
    """Inductor's compile workers on a GPU card: a sidecar subprocess and its fork-pool worker
    are ended (by the pool, and by the run's clean-up) before their ledgers close. Written
    through, their ledgers hold every draw, and each says what ended it: the trace is complete,
    and two runs compare identical."""
    card = write_card(tmp_path / "pool.toml", name="pool", recipe=REPO / "tests" / "recipes" / "compile_pool.py")
    saved = tmp_path / "saved"
    first = run_cli("trace", str(card), "--json", "--save", str(saved), "--workdir", str(tmp_path / "w1"))
    assert first.code == 0, first.out + first.err
    doc = json.loads(first.out)
    assert doc["incomplete"] == []
    run = read_trace(saved / "trace")
    main = next(p for p in run.processes if p.kind == "main")
    sidecar = next(p for p in run.processes if p.kind == "subprocess")
    worker = next(p for p in run.processes if p.kind == "multiprocessing child")
    assert not sidecar.ended and not worker.ended  # neither closed its ledger ...
    assert worker.ended_by == (f"ended by its parent (pid {sidecar.pid}, SIGKILL); every record it made is in "
                               "its ledger")
    assert sidecar.ended_by == (f"still running when the main process (pid {main.pid}) ended, ended by the run's "
                                "clean-up; every record it made is in its ledger")
    assert sorted(doc["ended_by_parent"]) == sorted(run.ended_by_parent) and len(run.ended_by_parent) == 2
    # ... and every draw of the worker is there: 16 kept, the rest in the chain, its tail past the last checkpoint
    (chain,) = worker.chains.values()
    assert len(worker.draws) == 16 and chain.count == 40 - 16
    again = run_cli("trace", str(card), "--against", str(saved), "--workdir", str(tmp_path / "w2"))
    assert again.code == 0 and "traces identical" in again.out, again.out + again.err


ORPHANED_WORKER = """import os, signal, subprocess, sys, time
r, w = os.pipe()
pid = os.fork()
if pid == 0:  # a Ray actor's stand-in: it starts a worker, then ends with the worker still running
    worker = subprocess.Popen([sys.executable, "-c", "import random, time; random.seed(1); random.random(); time.sleep(600)"])
    time.sleep(1)
    os.write(w, str(worker.pid).encode())
    os._exit(0)
os.waitpid(pid, 0)
worker = int(os.read(r, 100))
signal.pidfd_send_signal(os.pidfd_open(worker), signal.SIGKILL)  # as Ray's raylet ends it: the tracer does not see it
time.sleep(0.5)
"""


def test_a_worker_still_running_when_its_parent_ended_was_ended_with_it(tmp_path: Path) -> None:
    """Ray ends a stopped actor's children (its compile-worker pool) with a kill the tracer cannot
    see: the actor's ledger lists them as still running when it closed, so their ledgers, which
    hold every record, are complete; the same kill without that record stays unexplained."""
    run = read_trace(run_traced(tmp_path, ORPHANED_WORKER)[0])
    assert run.problems == []
    actor = next(p for p in run.processes if p.kind != "main" and p.ended)
    worker = next(p for p in run.processes if not p.ended)
    assert worker.pid in actor.left and worker.draws and worker.ppid == actor.pid
    assert worker.ended_by == (f"still running when {actor.display} (pid {actor.pid}) ended, ended by its parent's "
                               "end (Ray ends an actor's children); every record it made is in its ledger")


IDLE_WORKER = """import os, signal, subprocess, sys, time
idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
time.sleep(2)
signal.pidfd_send_signal(os.pidfd_open(idle.pid), signal.SIGKILL)  # as the raylet ends an idle worker: unseen
idle.wait()
"""


def test_a_process_killed_before_it_recorded_anything_is_complete(tmp_path: Path) -> None:
    """An idle Ray worker that Ray ends at shutdown: its ledger holds its start record and nothing
    else, written through, so it drew nothing; the trace stays complete."""
    run = read_trace(run_traced(tmp_path, IDLE_WORKER)[0])
    idle = next(p for p in run.processes if p.kind != "main")
    assert not idle.ended and idle.records == 1 and run.problems == []
    assert idle.ended_by == ("ended before it recorded anything (an idle worker its pool or Ray ended at shutdown): "
                             "nothing of it is unknown")


# --- a tracer that could not start says so ---------------------------------------------------------

PLAIN = "import random\nrandom.seed(0)\nrandom.random()\n"


def test_an_invalid_keep_is_a_usage_error_before_the_run_and_incomplete_inside_it(tmp_path: Path) -> None:
    a, _ = run_traced(tmp_path, PLAIN, name="a", extra_env={KEEP_ENV: "abc"})
    b, _ = run_traced(tmp_path, PLAIN, name="b", extra_env={KEEP_ENV: "abc"})
    cmp = compare_traces(read_trace(a), read_trace(b))
    assert not cmp.identical
    assert f"{KEEP_ENV}='abc' is not a whole number from 0 to 1048576: not traced" in _incomplete(cmp)

    class Spec:
        workdir = tmp_path
        env = {KEEP_ENV: "-1"}

    usage = run_cli("trace", str(quick_card(tmp_path)), "--workdir", str(tmp_path / "w"), env={KEEP_ENV: "abc"})
    assert usage.code == 2 and usage.err.strip() == (
        f"detaudit: error: {KEEP_ENV}='abc' is not a whole number from 0 to 1048576"), usage.err
    assert not (tmp_path / "w" / "run1" / "run.log").exists()  # nothing ran
    hook = trace_hook("rng")
    try:
        hook(Spec())
    except UsageError as exc:
        assert str(exc) == f"{KEEP_ENV}='-1' is not a whole number from 0 to 1048576"
    else:
        raise AssertionError("a bad DETAUDIT_TRACE_KEEP passed the hook")
    Spec.env = {KEEP_ENV: "3"}
    assert hook(Spec())["DETAUDIT_TRACE"] == "rng" and trace_hook("rng", card="quick")(Spec())[CARD_ENV] == "quick"


def test_a_run_whose_tracer_never_started_or_failed_to_install_is_incomplete(tmp_path: Path) -> None:
    empty_a, empty_b = tmp_path / "a", tmp_path / "b"
    empty_a.mkdir()
    empty_b.mkdir()
    cmp = compare_traces(read_trace(empty_a), read_trace(empty_b))
    assert not cmp.identical and cmp.incomplete == [
        "run 1: no process wrote a ledger (the tracer did not start in this run)",
        "run 2: no process wrote a ledger (the tracer did not start in this run)"]
    # A main process the tracer could not enter (its children could be traced), and a ledger of an
    # older detaudit (no start record, no end record).
    traced, _ = run_traced(tmp_path, CHILDREN, name="children")
    next(traced.glob("main.*.jsonl")).unlink()
    assert read_trace(traced).problems == ["the main process wrote no ledger"]
    older = tmp_path / "older"
    older.mkdir()
    (older / "main.7.jsonl").write_text('{"type":"process","pid":7,"kind":"main","label":"main"}\n')
    assert read_trace(older).problems == [
        "pid 7 main process: its ledger has no start record (written by an older detaudit?)",
        "pid 7 main process: its ledger has no end: the process was killed, or left before the tracer could write "
        "its last records, so its later draws are unknown"]
    # A detaudit that cannot be imported in the run: the site hook notes it in the trace dir.
    broken = tmp_path / "broken" / "detaudit"
    (broken / "trace" / "site").mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('a broken install')\n")
    shutil.copy(SITE_DIR / "sitecustomize.py", broken / "trace" / "site")
    trace_dir = tmp_path / "trace"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DETAUDIT_TRACE")}
    env = trace_env("rng", trace_dir, env)
    env["PYTHONPATH"] = str(broken / "trace" / "site")
    proc = subprocess.run([sys.executable, "-c", "import random; random.random()"], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "detaudit trace: not installed in pid" in proc.stderr
    (note,) = read_trace(trace_dir).errors
    assert note.endswith("ImportError('a broken install')")


CHILDREN = """import os, subprocess, sys
subprocess.run([sys.executable, "-c", "import random; random.random()"], check=True)
subprocess.run(["/bin/true"], check=True)
if os.environ.get("HIDE") == "isolated":
    subprocess.run([sys.executable, "-I", "-c", "import random; random.random()"], check=True)
if os.environ.get("HIDE") == "scrubbed":
    subprocess.run([sys.executable, "-c", "import random; random.random()"], check=True, env={})
if os.environ.get("HIDE") == "exec":
    pid = os.fork()
    if pid == 0:
        os.execv(sys.executable, [sys.executable, "-E", "-c", "pass"])
    os.waitpid(pid, 0)
if os.environ.get("HIDE") == "posix_spawn":
    os.waitpid(os.posix_spawn(sys.executable, [sys.executable, "-S", "-c", "pass"], dict(os.environ)), 0)
if os.environ.get("HIDE") == "mp-spawn" and __name__ == "__main__":
    import multiprocessing
    del os.environ["DETAUDIT_TRACE"]  # the child starts without the run's environment
    child = multiprocessing.get_context("spawn").Process(target=print)
    child.start(); child.join()
"""


@pytest.mark.slow
def test_a_python_child_the_tracer_could_not_enter_is_named_as_not_traced(tmp_path: Path) -> None:
    clean, _ = run_traced(tmp_path, CHILDREN, name="clean")
    run = read_trace(clean)
    assert run.problems == [] and len(run.processes) == 2  # main and the traced child; /bin/true is no Python
    for hide, how in (("isolated", "through subprocess.Popen: {python} -I -c"),
                      ("scrubbed", "through subprocess.Popen: {python} -c"),
                      ("exec", "it replaced itself with {python} -E -c pass"),
                      ("posix_spawn", "through os.posix_spawn: {python} -S -c pass"),
                      ("mp-spawn", "through multiprocessing spawn: {python} ")):
        traced, _ = run_traced(tmp_path, CHILDREN, name=hide, extra_env={"HIDE": hide})
        cmp = compare_traces(run, read_trace(traced))
        assert not cmp.identical, hide
        problems = cmp.incomplete  # mp-spawn: the child, and multiprocessing's resource tracker
        assert len(problems) == (2 if hide == "mp-spawn" else 1), problems
        assert all(problem.startswith("run 2: pid ") and problem.endswith(
            "was not traced: a Python started with -I, -E or -S, or without the run's environment, keeps the "
            "tracer out") for problem in problems), problems
        assert any(how.format(python=sys.executable) in problem for problem in problems), problems
        if hide == "mp-spawn":
            assert any("spawn_main" in problem for problem in problems), problems


# --- same mode, same card ---------------------------------------------------------------------------


SEEDED_MODEL = "import torch\ntorch.manual_seed(0)\ntorch.nn.Linear(2, 2)(torch.ones(2))\n"


@pytest.mark.slow
def test_traces_of_different_modes_or_cards_are_never_identical(tmp_path: Path) -> None:
    rng, _ = run_traced(tmp_path, SEEDED_MODEL, name="rng")
    modules, _ = run_traced(tmp_path, SEEDED_MODEL, mode="modules", name="modules")
    cmp = compare_traces(read_trace(rng), read_trace(modules))
    # the draws agree; module calls, recorded in one run only, are not compared (no false "first module")
    assert cmp.draw is None and cmp.module is None and cmp.op is None and not cmp.identical
    assert cmp.incomplete == ["run 1 was traced in rng mode, run 2 in modules mode: only their draws are compared"]
    # a saved rng trace against a modules run (trace --modules --against, verify --trace=modules)
    saved = save_trace(rng, tmp_path / "saved", trace_meta("card-a", "rng", ["x"]))
    _, saved_run = read_saved(saved)
    assert saved_run.mode == "rng" and saved_run.card == "card-a"
    report = audit_runs([modules], reference=saved_run, reference_labels=("the standard's run", "this run"))
    assert report.comparison is not None and not report.comparison.identical
    # a saved trace of another card (trace --against): the ledgers say which card they traced
    other, _ = run_traced(tmp_path, SEEDED_MODEL, name="other", extra_env={CARD_ENV: "card-b"})
    cmp = compare_traces(saved_run, read_trace(other), labels=("saved", "this run"))
    assert "saved traced card 'card-a', this run card 'card-b'" in cmp.incomplete and not cmp.identical
    same, _ = run_traced(tmp_path, SEEDED_MODEL, name="same", extra_env={CARD_ENV: "card-a"})
    assert compare_traces(saved_run, read_trace(same)).identical


MIXED_CHILD = """import os, subprocess, sys
env = dict(os.environ, DETAUDIT_TRACE="modules", DETAUDIT_TRACE_KEEP="3", DETAUDIT_TRACE_CARD="another")
subprocess.run([sys.executable, "-c", "import random; random.random()"], env=env, check=True)
"""


def test_ledgers_of_one_run_in_several_modes_cards_or_keeps_are_incomplete(tmp_path: Path) -> None:
    trace_dir, _ = run_traced(tmp_path, MIXED_CHILD, name="mixed", extra_env={CARD_ENV: "quick"})
    run = read_trace(trace_dir)
    child = next(p for p in run.processes if p.kind != "main")
    main = next(p for p in run.processes if p.kind == "main")
    assert run.problems == [
        f"its ledgers were written in different modes: modules ({child.pid}), rng ({main.pid})",
        "its ledgers name different cards: another, quick",
        "its ledgers kept different numbers of records per call site: 3, 16"]
    keep4, _ = run_traced(tmp_path, PLAIN, keep=4, name="keep4")
    keep16, _ = run_traced(tmp_path, PLAIN, name="keep16")
    cmp = compare_traces(read_trace(keep4), read_trace(keep16))
    assert cmp.draw is None and not cmp.identical
    assert cmp.incomplete == ["run 1 kept 4 records per call site, run 2 16: set DETAUDIT_TRACE_KEEP alike"]


# --- bad input: one line, exit 2 ------------------------------------------------------------------

QUICK_RECIPE = """import json, os, random
random.seed(0)
with open(os.environ["DETAUDIT_METRICS_JSONL"], "w") as fh:
    fh.write(json.dumps({"step_key": "step", "step": 0, "x": random.random()}) + "\\n")
"""


def quick_card(tmp_path: Path) -> Path:
    script = tmp_path / "quick.py"
    script.write_text(QUICK_RECIPE)
    return write_card(tmp_path / "quick.toml", name="quick", recipe=script, timeout_s=120)


def _saved(tmp_path: Path, name: str, ledger: bytes) -> Path:
    folder = tmp_path / name
    (folder / "trace").mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"schema": "detaudit/trace/1", "card": "quick", "mode": "rng"}))
    (folder / "trace" / "main.1.jsonl").write_bytes(ledger)
    return folder


START = b'{"type":"start","pid":1,"ppid":0,"mode":"rng","card":"quick","keep":16,"argv":[]}\n'


def test_a_corrupt_saved_trace_is_a_one_line_error(tmp_path: Path) -> None:
    cases = {
        "utf8": (START + b'{"type":"seed","gen":"random","site":"t.py:1 \xff","how":"random.seed","seq":1,'
                 b'"library":false}\n', 2, "not a detaudit trace line: 'utf-8' codec can't decode byte 0xff"),
        "count": (START + b'{"type":"chain","kind":"draw","gen":"random","op":"random.random","site":"t.py:1 f",'
                  b'"count":1e999,"chain":"ab"}\n', 2, "'count' of a chain record is not a whole number: inf"),
        "pid": (b'{"type":"process","pid":"abc","kind":"main","label":"main"}\n', 1,
                "'pid' of a process record is not a whole number: 'abc'"),
    }
    for name, (ledger, line, message) in cases.items():
        folder = _saved(tmp_path, name, ledger)
        try:
            read_saved(folder)
        except InputError as exc:
            assert str(exc).startswith(f"{folder / 'trace' / 'main.1.jsonl'}:{line}: ") and message in str(exc), exc
        else:
            raise AssertionError(f"{name}: read")
    zero = tmp_path / "zero"
    (zero / "trace").mkdir(parents=True)
    (zero / "meta.json").symlink_to("/dev/zero")
    try:
        read_saved(zero)
    except InputError as exc:
        assert str(exc) == f"{zero / 'meta.json'}: not a regular file; not a saved trace's meta.json"
    else:
        raise AssertionError("/dev/zero read")
    zero_ledger = _saved(tmp_path, "zero-ledger", b"")
    (zero_ledger / "trace" / "main.1.jsonl").unlink()
    (zero_ledger / "trace" / "main.1.jsonl").symlink_to("/dev/zero")
    try:
        read_saved(zero_ledger)
    except InputError as exc:
        assert str(exc) == f"{zero_ledger / 'trace' / 'main.1.jsonl'}: not a regular file; not a detaudit trace"
    else:
        raise AssertionError("/dev/zero read")


@pytest.mark.slow
def test_corrupt_saved_traces_through_the_cli_trace_and_a_plain_verify(tmp_path: Path) -> None:
    card = quick_card(tmp_path)
    bad = _saved(tmp_path, "bad", START + b'{"type":"end","pid":1,"seq":1e999}\n')
    result = run_cli("trace", str(card), "--against", str(bad))
    assert result.code == 2 and "Traceback" not in result.err, result.err
    assert result.err.strip() == (f"detaudit: error: {bad / 'trace' / 'main.1.jsonl'}:2: not a detaudit trace line: "
                                  "'seq' of a end record is not a whole number: inf")
    recorded = run_cli("record", str(card), "--runs", "2", "--no-doctor")
    assert recorded.code == 0, recorded.text
    (standard,) = (tmp_path / "standards").glob("quick.*.json")
    carried = standard.with_name(standard.stem + ".trace")
    (carried / "trace").mkdir(parents=True)
    (carried / "meta.json").write_text(json.dumps({"schema": "detaudit/trace/1", "card": "quick", "mode": "rng"}))
    (carried / "trace" / "main.1.jsonl").write_bytes(b'{"type":"process","pid":"abc","kind":"main","label":"m"}\n')
    verify = run_cli("verify", str(card))
    assert verify.code == 2 and "Traceback" not in verify.err, verify.err
    assert verify.err.strip() == (f"detaudit: error: {carried / 'trace' / 'main.1.jsonl'}:1: not a detaudit trace "
                                  "line: 'pid' of a process record is not a whole number: 'abc'")
    (carried / "trace" / "main.1.jsonl").unlink()
    (carried / "trace" / "main.1.jsonl").symlink_to("/dev/zero")
    verify = run_cli("verify", str(card))
    assert verify.code == 2 and verify.err.strip() == (
        f"detaudit: error: {carried / 'trace' / 'main.1.jsonl'}: not a regular file; not a detaudit trace")


@pytest.mark.slow
def test_save_onto_a_symlink_is_a_one_line_error_and_writes_nothing(tmp_path: Path) -> None:
    card = quick_card(tmp_path)
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    result = run_cli("trace", str(card), "--save", str(link), "--workdir", str(tmp_path / "w"))
    assert result.code == 2 and "Traceback" not in result.err, result.err
    assert result.err.strip() == f"detaudit: error: {link}: is a symbolic link; give --save a new folder"
    assert not (tmp_path / "w").exists()  # refused before the run
    assert link.is_symlink() and list(target.iterdir()) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".link")] == []


@pytest.mark.slow
def test_against_a_trace_of_another_card_is_refused_before_the_run(tmp_path: Path) -> None:
    card = quick_card(tmp_path)
    other = _saved(tmp_path, "other", START + b'{"type":"end","pid":1,"seq":1}\n')
    meta = json.loads((other / "meta.json").read_text())
    (other / "meta.json").write_text(json.dumps({**meta, "card": "tracetoy"}))
    result = run_cli("trace", str(card), "--against", str(other), "--workdir", str(tmp_path / "w"))
    assert result.code == 2 and result.err.strip() == (
        f"detaudit: error: {other}: a trace of card 'tracetoy', not of 'quick': compare traces of one card")
    assert not (tmp_path / "w").exists()


@pytest.mark.slow
def test_a_trace_with_a_process_the_tracer_could_not_enter_exits_1(tmp_path: Path) -> None:
    script = tmp_path / "untraced_child.py"
    script.write_text("import os, subprocess, sys\n"
                      "subprocess.run([sys.executable, '-I', '-c', 'import random; random.random()'], check=True)\n"
                      "open(os.environ['DETAUDIT_METRICS_JSONL'], 'w').write('{\"step\": 0, \"x\": 1.0}\\n')\n")
    card = tmp_path / "child.toml"
    card.write_text(f'name = "child"\ncommand = ["{{python}}", "{script}"]\ntimeout_s = 120\nrunner = ["cpu", "test"]\n')
    result = run_cli("trace", str(card), "--workdir", str(tmp_path / "w"))
    assert result.code == 1, result.text
    assert "trace incomplete" in result.out and "was not traced" in result.out, result.out


def test_what_the_flows_ask_of_a_saved_trace_before_they_run(tmp_path: Path) -> None:
    """``carries_trace`` sees a standard's trace folder whose meta.json is a device or a broken
    link (it is then read and refused, never passed over); ``check_saved_card`` refuses a saved
    trace of another card; ``check_save_destination`` refuses a symlink or a non-empty folder."""
    from detaudit.trace.saved import (
        carries_trace,
        check_save_destination,
        check_saved_card,
        standard_trace_dir,
    )

    standard = tmp_path / "quick.cpu.json"
    assert not carries_trace(standard)
    standard_trace_dir(standard).mkdir()
    (standard_trace_dir(standard) / "meta.json").symlink_to("/dev/zero")
    assert carries_trace(standard)
    check_saved_card({"card": "quick"}, "quick", tmp_path)
    try:
        check_saved_card({"card": "other"}, "quick", tmp_path / "saved")
    except UsageError as exc:
        assert str(exc) == f"{tmp_path / 'saved'}: a trace of card 'other', not of 'quick': compare traces of one card"
    else:
        raise AssertionError("another card's trace accepted")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    for taken, message in ((link, "is a symbolic link; give --save a new folder"),
                           (standard_trace_dir(standard), "exists; give --save a new folder")):
        try:
            check_save_destination(taken)
        except UsageError as exc:
            assert str(exc) == f"{taken}: {message}"
        else:
            raise AssertionError(f"{taken} accepted")
    check_save_destination(tmp_path / "new")


@pytest.mark.slow
def test_modules_against_an_rng_trace_through_the_cli_is_incomplete(tmp_path: Path) -> None:
    """`trace --modules --against` a trace saved in rng mode, and `verify --trace=modules` on a
    standard that carries an rng trace: never "identical"."""
    card = quick_card(tmp_path)
    saved = tmp_path / "saved-rng"
    assert run_cli("trace", str(card), "--save", str(saved)).code == 0
    against = run_cli("trace", str(card), "--modules", "--against", str(saved))
    assert against.code == 1, against.text
    assert (f"trace incomplete: saved {saved} was traced in rng mode, this run in modules mode: only their draws "
            "are compared") in " ".join(against.out.split())
    assert "traces identical" not in against.out
    recorded = run_cli("record", str(card), "--runs", "2", "--no-doctor", "--trace")
    assert recorded.code == 0, recorded.text
    verify = run_cli("verify", str(card), "--trace=modules", "--json", "--workdir", str(tmp_path / "v"))
    assert verify.code == 0, verify.text  # the metrics pass; the trace comparison says what it could not prove
    comparison = json.loads(verify.out)["trace"]["comparison"]
    assert not comparison["identical"] and comparison["incomplete"] == [
        "the standard's run was traced in rng mode, this run in modules mode: only their draws are compared"]
