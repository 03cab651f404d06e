"""benchmarks/suite_census.py: every test of a run gets one row, and the per-file sums are the rows'."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="the census reads /proc/stat (Linux)")
def test_each_test_is_one_row_and_each_file_sums_its_rows(tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text("def test_one():\n    sum(range(10**7))  # CPU enough that a lost row shows in the sum\n\ndef test_two():\n    pass\n")
    (tmp_path / "test_b.py").write_text("def test_three():\n    pass\n")
    out = tmp_path / "census.tsv"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "suite_census.py"), "--top", "2", "--out", str(out),
                           "--rootdir", str(tmp_path), str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {line.split("\t")[0]: [float(x) for x in line.split("\t")[1:]] for line in out.read_text().splitlines()}
    assert sorted(rows) == ["test_a.py::test_one", "test_a.py::test_two", "test_b.py::test_three"]
    assert all(cpu >= 0 and wall >= 0 for cpu, wall in rows.values())
    slowest = proc.stdout.split("slowest 2 tests")[1].split("per file:")[0].strip().splitlines()[1:]
    assert len(slowest) == 2
    per_file = {line.split()[2]: float(line.split()[0]) for line in proc.stdout.split("per file:")[1].strip().splitlines()
                if line.strip() and line.split()[2].endswith(".py")}
    a_sum = rows["test_a.py::test_one"][0] + rows["test_a.py::test_two"][0]
    assert abs(per_file["test_a.py"] - a_sum) < 0.15 and abs(per_file["test_b.py"] - rows["test_b.py::test_three"][0]) < 0.15
    assert "3 tests:" in proc.stdout


@pytest.mark.slow  # a pytest session of its own under the suite's xdist options
def test_the_timeline_names_each_tests_worker_start_and_end(tmp_path: Path) -> None:
    timeline = tmp_path / "timeline.tsv"
    files = ["tests/test_formats.py", "tests/test_verify_selection.py"]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", *files],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "DETAUDIT_SUITE_TIMELINE": str(timeline)})
    assert proc.returncode == 0, proc.stdout[-3000:]
    rows = [line.split("\t") for line in timeline.read_text().splitlines()]
    ran = int(proc.stdout.split(" passed")[0].split()[-1])
    assert len(rows) == ran > 0 and {row[0] for row in rows} <= {"gw0", "gw1"}
    assert all(float(start) <= float(end) for _, start, end, _ in rows)
    assert {row[3].split("::")[0] for row in rows} == set(files)
