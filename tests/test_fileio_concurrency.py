"""Writers that share a new folder: pytest-xdist workers updating standards side by side (CI saw
"a file is in the way" and a vanished folder when two workers made ``tests/standards`` at once).

Threads, not processes: the race is between a writer's check for the folder and its mkdir, which
threads hit as well (the old code failed about every second round), and a fork from the pytest
process, which may hold other threads, could hang."""

from __future__ import annotations

import threading
from pathlib import Path

from detaudit.fileio import write_atomic
from detaudit.standards.standard import standard_lock

WRITERS = 6
ROUNDS = 40


def test_writers_racing_to_create_one_folder_all_succeed(tmp_path: Path) -> None:
    failures: list[str] = []
    for round_no in range(ROUNDS):
        folder = tmp_path / f"r{round_no}" / "tests" / "standards" / "check_training"
        barrier = threading.Barrier(WRITERS)

        def write(target: str) -> None:
            barrier.wait()
            try:
                with standard_lock(target):
                    write_atomic(target, "{}\n", overwrite=False)
            except Exception as exc:  # the test asserts on what came back
                failures.append(f"{target}: {exc}")

        writers = [threading.Thread(target=write, args=(str(folder / f"test_{i}.json"),)) for i in range(WRITERS)]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join(60)
        assert not any(writer.is_alive() for writer in writers)
        assert failures == []
        assert sorted(p.name for p in folder.iterdir()) == sorted(f"test_{i}.json" for i in range(WRITERS))
