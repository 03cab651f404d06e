"""Wall time of one CLI call, per command, beside the interpreter's own floors.

Each command runs in a fresh subprocess (`python -m detaudit ARGS`, as the tests' `run_cli` does),
in a temp dir holding tiny inputs this script writes itself; the commands are run round-robin
(one of each per round, so that load from elsewhere falls on all of them alike) and the median
wall time of ``--runs`` rounds is printed, in ms. The floors: `python -c pass` (interpreter and
site), `python -c "import click"` and `python -c "import rich.console"`. Prints figures only.

``--reference DIR``: a folder holding another ``detaudit`` package (e.g. ``git archive REV detaudit |
tar -x -C DIR``), put first on ``PYTHONPATH``; each command then also runs against it, in the same
rounds, and both medians are printed side by side (machine load falls on both alike). Bytecode is
written (``PYTHONDONTWRITEBYTECODE`` is dropped, and a warm-up round runs first), so that neither
side pays for compiling a module it just changed.

    python benchmarks/cli_startup.py [--runs N] [--reference DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

METRICS = "".join(f'{{"step": {i}, "loss": {1 / (i + 1)!r}, "lr": 0.1}}\n' for i in range(8))
OTHER = METRICS.replace('"loss": 0.125', '"loss": 0.126')
SCRIPT = "import torch\n\n\ndef main():\n    return torch.randn(3)\n\n\nif __name__ == '__main__':\n    main()\n"


def commands(tmp: Path) -> list[tuple[str, list[str]]]:
    """(label, argv) of each floor and command; the inputs are written into ``tmp``."""
    (tmp / "a.jsonl").write_text(METRICS)
    (tmp / "b.jsonl").write_text(METRICS)
    (tmp / "c.jsonl").write_text(OTHER)
    (tmp / "t.py").write_text(SCRIPT)
    py = sys.executable
    made = subprocess.run([py, "-m", "detaudit", "record", "--metrics", "a.jsonl", "b.jsonl",
                           "--out", "std.json", "--runner-class", "cpu-bench"],
                          cwd=tmp, capture_output=True, text=True)
    if made.returncode != 0:
        sys.exit(f"could not record the standard: {made.stdout}{made.stderr}")
    cli = [py, "-m", "detaudit"]
    return [
        ("python -c pass", [py, "-c", "pass"]),
        ("python -c 'import click'", [py, "-c", "import click"]),
        ("python -c 'import rich.console'", [py, "-c", "import rich.console"]),
        ("detaudit --help", [*cli, "--help"]),
        ("detaudit --version", [*cli, "--version"]),
        ("diff a b (identical)", [*cli, "diff", "a.jsonl", "b.jsonl"]),
        ("diff a c (differ)", [*cli, "diff", "a.jsonl", "c.jsonl"]),
        ("diff a c --json", [*cli, "diff", "a.jsonl", "c.jsonl", "--json"]),
        ("verify --metrics --standard", [*cli, "verify", "--metrics", "a.jsonl", "--standard", "std.json",
                                         "--runner-class", "cpu-bench"]),
        ("verify --metrics (mismatch)", [*cli, "verify", "--metrics", "c.jsonl", "--standard", "std.json",
                                         "--runner-class", "cpu-bench"]),
        ("record --metrics --no-write", [*cli, "record", "--metrics", "a.jsonl", "b.jsonl", "--no-write"]),
        ("scan-rng t.py", [*cli, "scan-rng", "t.py"]),
        ("standard show", [*cli, "standard", "show", "std.json"]),
        ("standard diff", [*cli, "standard", "diff", "std.json", "std.json"]),
        ("verify --help", [*cli, "verify", "--help"]),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="rounds (default 21); the median is printed")
    parser.add_argument("--reference", type=Path, help="a folder holding another detaudit package to time beside")
    args = parser.parse_args()
    env = dict(os.environ, COLUMNS="200")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    sides = {"this tree": env}
    if args.reference is not None:
        reference = str(args.reference.resolve())
        sides = {"reference": dict(env, PYTHONPATH=os.pathsep.join(filter(None, [reference, env.get("PYTHONPATH")]))),
                 "this tree": env}
    with tempfile.TemporaryDirectory(prefix="detaudit-startup-") as name:
        tmp = Path(name)
        for side_env in sides.values():
            side_env["DETAUDIT_PROBE_CACHE"] = str(tmp / "probe-cache")
        todo = commands(tmp)
        times: dict[tuple[str, str], list[float]] = {(label, side): [] for label, _ in todo for side in sides}
        for side_env in sides.values():  # one warm-up round: bytecode, page cache
            for _, argv in todo:
                subprocess.run(argv, cwd=tmp, env=side_env, capture_output=True)
        for _ in range(args.runs):
            for label, argv in todo:
                for side, side_env in sides.items():
                    start = time.perf_counter()
                    subprocess.run(argv, cwd=tmp, env=side_env, capture_output=True)
                    times[label, side].append((time.perf_counter() - start) * 1000)
    labels = [label for label, _ in todo]
    width = max(len(label) for label in labels)
    print(f"median (min) wall ms of {args.runs} runs each; python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print(f"{'command':<{width}}" + "".join(f"  {side:>17}" for side in sides))
    for label in labels:
        cells = [f"{statistics.median(times[label, s]):8.1f} ({min(times[label, s]):6.1f})" for s in sides]
        print(f"{label:<{width}}" + "".join(f"  {c:>17}" for c in cells))


if __name__ == "__main__":
    main()
