"""CPU seconds of every test of the suite, one test at a time: where the suite's time goes.

    python benchmarks/suite_census.py [--top 25] [--out census.tsv] [--cold-inductor] [PYTEST_ARGS ...]

Runs pytest in this process with ``-n 0`` (no xdist: each figure is one test's alone) and, around
each test's setup, call and teardown, reads the machine's busy CPU time from /proc/stat: the test's
own processes, its subprocesses, Ray's daemons and actors alike. Run it on an otherwise idle machine;
anything else running is counted against the test that is running. Work a session fixture makes
once (``made_once``) counts against the first test that asks for it.

Prints the slowest tests and the per-file sums (CPU seconds, wall seconds), then the totals. The
suite's wall time on 2 cores is bounded below by the CPU total / 2: docs/testing.md has the figures.

``--cold-inductor`` gives the run an empty Inductor cache dir, as a fresh clone's new venv path
gives it in effect (Inductor's C++ kernel cache keys hold the compiler's include paths).
Linux only.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def busy_cpu_s() -> float:
    """Busy CPU seconds of the whole machine since boot (user, nice, system, irq, softirq)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:8]]
    user, nice, system, _idle, _iowait, irq, softirq = fields
    return (user + nice + system + irq + softirq) / CLOCK_TICKS


class Census:
    """A pytest plugin: (node id, CPU s, wall s) of each test's whole protocol."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float, float]] = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        cpu, wall = busy_cpu_s(), time.monotonic()
        yield
        self.rows.append((item.nodeid, busy_cpu_s() - cpu, time.monotonic() - wall))


def by_file(rows: list[tuple[str, float, float]]) -> list[tuple[str, float, float, int]]:
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for nodeid, cpu, wall in rows:
        entry = sums[nodeid.split("::", 1)[0]]
        entry[0] += cpu
        entry[1] += wall
        entry[2] += 1
    return sorted(((f, c, w, int(n)) for f, (c, w, n) in sums.items()), key=lambda r: -r[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=25, help="How many of the slowest tests to list.")
    parser.add_argument("--out", type=Path, help="Also write every test's figures as TSV (node id, CPU s, wall s).")
    parser.add_argument("--cold-inductor", action="store_true", help="Run with an empty Inductor cache dir.")
    args, pytest_args = parser.parse_known_args()
    if args.cold_inductor:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="census-inductor-")
    census = Census()
    cpu, wall = busy_cpu_s(), time.monotonic()
    code = pytest.main(["-n", "0", "-q", "-p", "no:cacheprovider", *pytest_args], plugins=[census])
    cpu, wall = busy_cpu_s() - cpu, time.monotonic() - wall
    rows = sorted(census.rows, key=lambda r: -r[1])
    print(f"\nslowest {args.top} tests by CPU seconds (wall seconds):")
    for nodeid, test_cpu, test_wall in rows[:args.top]:
        print(f"{test_cpu:8.1f} {test_wall:8.1f}  {nodeid}")
    print("\nper file:")
    for path, file_cpu, file_wall, count in by_file(rows):
        print(f"{file_cpu:8.1f} {file_wall:8.1f}  {path} ({count} tests)")
    print(f"\n{len(rows)} tests: {sum(r[1] for r in rows):.0f} CPU s, {sum(r[2] for r in rows):.0f} s of tests; "
          f"the whole run {cpu:.0f} CPU s in {wall:.0f} s; floor on 2 cores {cpu / 2 / 60:.1f} min")
    if args.out:
        args.out.write_text("".join(f"{n}\t{c:.1f}\t{w:.1f}\n" for n, c, w in census.rows))
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
