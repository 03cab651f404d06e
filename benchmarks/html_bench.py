"""Size and wall time of the --html page, for the tiny recipe's pair of runs and a 200,000-line pair.

Case 1, tiny: the committed metrics of two disagreeing runs of the tiny CPU recipe
(tests/fixtures/html/, 20 compared series), the page of `detaudit diff`.
Case 2, 200k: two synthetic 200,000-line runs (seeded), shaped like benchmarks/diff_bench.py's
(rollout and train lines interleaved, 30 series), where run 2 departs from run 1 in one train
series at line 60,000 and the difference then spreads to half the series and grows
(a divergence as training spreads it), so the page draws 15 differing series of 100,000 points.

Each case runs in a fresh Python (imports count: matplotlib is imported for the page only; as
`--html` does, its plotting modules start importing in a thread before the metrics are read) and
prints the page's size and the time to build and write it (wall, and the process's CPU time, which
a busy machine inflates less); reading and diffing the metrics,
which `detaudit diff` does without --html too, is printed apart. Goal on a 2-core machine:
under 2 MB and under 2 s for the page in both cases.

    python benchmarks/html_bench.py [--lines 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import math
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
from detaudit.render.html.plots import require_matplotlib
require_matplotlib()  # as `--html` does before the command reads anything (starts the plot imports)
from detaudit.data.compare import diff_runs
from detaudit.data.metrics import read_metrics_many
paths = sys.argv[2:]
runs = read_metrics_many(paths)
report = diff_runs(runs, labels=paths)
read_s = time.perf_counter() - started
started = time.perf_counter()
before = resource.getrusage(resource.RUSAGE_CHILDREN)  # the parse workers, if the files were read in parallel
cpu = time.process_time() - before.ru_utime - before.ru_stime
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


def measure(label: str, paths: list[Path], repeat: int) -> None:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeat):
            out = Path(tmp) / f"page{i}.html"
            proc = subprocess.run([sys.executable, "-c", MEASURE, str(out), *map(str, paths)], capture_output=True,
                                  text=True, cwd=ROOT)
            if proc.returncode != 0:
                raise SystemExit(f"{label}: the page failed:\n{proc.stderr}")
            results.append(json.loads(proc.stdout))
    pages = sorted(r["page_s"] for r in results)
    cpus = sorted(r["page_cpu_s"] for r in results)
    reads = sorted(r["read_s"] for r in results)
    r = results[0]
    print(f"{label}: {r['compared']} series, {r['mismatched']} differing: page {r['bytes'] / 1e6:.2f} MB, "
          f"written in best {pages[0]:.2f} s, median {pages[len(pages) // 2]:.2f} s wall "
          f"({cpus[0]:.2f} s CPU over its processes at best; reading and diffing the metrics before it: {reads[len(reads) // 2]:.2f} s)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    measure("tiny recipe (2 runs)", TINY, args.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "a.jsonl", Path(tmp) / "b.jsonl"
        write_run(a, args.lines, None)
        write_run(b, args.lines, int(args.lines * 0.3))
        measure(f"{args.lines}-line pair", [a, b], args.repeat)


if __name__ == "__main__":
    main()
