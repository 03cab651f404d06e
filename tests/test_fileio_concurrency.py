"""Writers that share a new folder: pytest-xdist workers updating standards side by side (CI saw
"a file is in the way" and a vanished folder when two workers made ``tests/standards`` at once)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from detaudit.fileio import write_atomic
from detaudit.standards.standard import standard_lock

WRITERS = 6
ROUNDS = 25


def _write_after_barrier(barrier: multiprocessing.synchronize.Barrier, target: str, errors: multiprocessing.Queue) -> None:
    barrier.wait()
    try:
        with standard_lock(target):
            write_atomic(target, "{}\n", overwrite=False)
    except Exception as exc:  # the parent asserts on what came back
        errors.put(f"{target}: {exc}")


def test_writers_racing_to_create_one_folder_all_succeed(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    errors: multiprocessing.Queue = ctx.Queue()
    for round_no in range(ROUNDS):
        folder = tmp_path / f"r{round_no}" / "tests" / "standards" / "check_training"
        barrier = ctx.Barrier(WRITERS)
        procs = [
            ctx.Process(target=_write_after_barrier, args=(barrier, str(folder / f"test_{i}.json"), errors))
            for i in range(WRITERS)
        ]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(60)
        assert [proc.exitcode for proc in procs] == [0] * WRITERS
        failures = []
        while not errors.empty():
            failures.append(errors.get())
        assert failures == []
        assert sorted(p.name for p in folder.iterdir()) == sorted(f"test_{i}.json" for i in range(WRITERS))
