"""Size and wall time of the --html page: the tiny recipe's pair of runs, a 200,000-line pair, and a
pair where 1,000 series differ; each beside the same page made by the code at a baseline commit.

Case 1, tiny: the committed metrics of two disagreeing runs of the tiny CPU recipe
(tests/fixtures/html/, 20 compared series), the page of `detaudit diff`.
Case 2, 200k: two synthetic 200,000-line runs (seeded), shaped like benchmarks/diff_bench.py's
(rollout and train lines interleaved, 30 series), where run 2 departs from run 1 in one train
series at line 60,000 and the difference then spreads to half the series and grows
(a divergence as training spreads it), so the page draws 15 differing series of 100,000 points.
Case 3, 1000 differing: two 200-line runs of 1,000 series each, every one of which differs in
run 2 from step 100 on: the page draws the first ones and lists the rest (goal: <= 2 MB, <= 3 s).

Each case runs in a fresh Python (imports count) and prints the page's size and the time to build
and write it (wall, and the CPU time of its processes, which a busy machine inflates less); reading
and diffing the metrics, which `detaudit diff` does without --html too, is printed apart.

The baseline (``--against``, default 82ba853: the page before it dropped matplotlib and numpy and
bounded what it draws) is the package at that commit, taken out of this repository's git into a
temporary folder (``git archive``) and measured the same way, once per case, in the same run.
``--against none`` skips it. Goal on a 2-core machine: under 2 MB for every page, under 2 s for
cases 1 and 2, under 3 s for case 3.

    python benchmarks/html_bench.py [--lines 200000] [--repeat 3] [--against REF]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY = [ROOT / "tests" / "fixtures" / "html" / run / "metrics.jsonl" for run in ("run1", "run2")]
ROLLOUT = [f"rollout/reward/raw_{k}" for k in ("mean", "median", "std", "min", "max")] + [
    f"rollout/stat_{i}" for i in range(5)]
TRAIN = [f"train/metric_{i:02d}" for i in range(20)]
# The series a divergence reaches, and the line it reaches each (it starts in train/metric_07).
SPREAD = ["train/metric_07"] + [s for s in ROLLOUT[::2] + TRAIN[::2] if s != "train/metric_07"][:14]

MEASURE = """
import json, resource, sys, time
from pathlib import Path
started = time.perf_counter()
cpu = time.process_time()
try:  # the baseline's page needed matplotlib, imported (in a thread) before the metrics were read
    from detaudit.render.html.plots import require_matplotlib
    require_matplotlib()
except ImportError:
    pass
from detaudit.data.compare import diff_runs
from detaudit.data.metrics import read_metrics_many
paths = sys.argv[2:]
runs = read_metrics_many(paths)
report = diff_runs(runs, labels=paths)
read_s = time.perf_counter() - started
started = time.perf_counter()
before = resource.getrusage(resource.RUSAGE_CHILDREN)  # the parse workers, if the files were read in parallel
cpu = time.process_time() + before.ru_utime + before.ru_stime
from detaudit.render.html import write_html
from detaudit.render.html.views import diff_page
write_html(Path(sys.argv[1]), diff_page(report, runs))
page_s = time.perf_counter() - started
children = resource.getrusage(resource.RUSAGE_CHILDREN)
page_cpu = time.process_time() - cpu + children.ru_utime + children.ru_stime  # a forked plot worker's too
print(json.dumps({"read_s": read_s, "page_s": page_s, "page_cpu_s": page_cpu, "bytes": Path(sys.argv[1]).stat().st_size,
                  "mismatched": len(report.mismatched), "compared": len(report.compared)}))
"""


def write_run(path: Path, lines: int, diverge_at: int | None) -> None:
    rng = random.Random(0)
    reach = {name: (diverge_at + 2000 * k if diverge_at is not None else None) for k, name in enumerate(SPREAD)}
    with open(path, "w") as fh:
        for i in range(lines):
            step = i // 2
            keys = ROLLOUT if i % 2 == 0 else TRAIN
            if i % 2 == 0:
                obj: dict = {"step_key": "rollout/step", "rollout/step": step}
            else:
                obj = {"step_key": "train/step", "train/step": float(step)}
            for k in keys:
                value = 1.0 / (1 + step / 5000) + 0.05 * rng.random()
                start = reach.get(k)
                if start is not None and i >= start:
                    value *= 1 + 1e-12 * math.exp(min((i - start) / 4000, 30))  # grows from ~1e-12 on
                obj[k] = value
            obj["perf/time"] = rng.random()
            fh.write(json.dumps(obj) + "\n")


def write_many(path: Path, series: int, steps: int, diverge_at: int | None) -> None:
    """``steps`` lines of ``series`` series each; from ``diverge_at`` on every value is 1e-9 larger."""
    rng = random.Random(1)
    names = [f"train/metric_{i:04d}" for i in range(series)]
    with open(path, "w") as fh:
        for step in range(steps):
            bump = 1e-9 if diverge_at is not None and step >= diverge_at else 0.0
            obj: dict = {"step_key": "train/step", "train/step": step}
            obj.update({name: 1.0 / (1 + step) + rng.random() * 0.01 + bump for name in names})
            fh.write(json.dumps(obj) + "\n")


def measure(label: str, paths: list[Path], repeat: int, package: Path = ROOT) -> None:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeat):
            out = Path(tmp) / f"page{i}.html"
            proc = subprocess.run([sys.executable, "-c", MEASURE, str(out), *map(str, paths)], capture_output=True,
                                  text=True, cwd=package, env=dict(os.environ, PYTHONPATH=str(package)))
            if proc.returncode != 0:
                raise SystemExit(f"{label}: the page failed:\n{proc.stderr}")
            results.append(json.loads(proc.stdout))
    pages = sorted(r["page_s"] for r in results)
    cpus = sorted(r["page_cpu_s"] for r in results)
    reads = sorted(r["read_s"] for r in results)
    r = results[0]
    print(f"{label}: {r['compared']} series, {r['mismatched']} differing: page {r['bytes'] / 1e6:.2f} MB, "
          f"written in best {pages[0]:.2f} s, median {pages[len(pages) // 2]:.2f} s wall "
          f"({cpus[0]:.2f} s CPU over its processes at best; reading and diffing the metrics before it: {reads[len(reads) // 2]:.2f} s)",
          flush=True)


def baseline_package(ref: str, into: Path) -> Path:
    """The package as it was at ``ref`` (this repository's git), unpacked into ``into``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "detaudit", "recipes"], capture_output=True)
    if archive.returncode != 0:
        raise SystemExit(f"--against {ref}: {archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def run_case(label: str, paths: list[Path], repeat: int, baseline: Path | None, ref: str) -> None:
    measure(f"{label} [this tree]", paths, repeat)
    if baseline is not None:
        measure(f"{label} [{ref}]", paths, 1, baseline)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", default="82ba853", help="baseline commit (none: skip it)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        baseline = baseline_package(args.against, Path(tmp)) if args.against != "none" else None
        run_case("tiny recipe (2 runs)", TINY, args.repeat, baseline, args.against)
        a, b = Path(tmp) / "a.jsonl", Path(tmp) / "b.jsonl"
        write_run(a, args.lines, None)
        write_run(b, args.lines, int(args.lines * 0.3))
        run_case(f"{args.lines}-line pair", [a, b], args.repeat, baseline, args.against)
        write_many(a, 1000, 200, None)
        write_many(b, 1000, 200, 100)
        run_case("1000 differing series", [a, b], args.repeat, baseline, args.against)


if __name__ == "__main__":
    main()
