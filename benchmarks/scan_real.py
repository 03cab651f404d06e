"""scan-rng on real RL / diffusion-RL frameworks: errors a maintainer agrees with, and the cold time.

For each tree of ``scan_real/trees.json`` (verl, NeMo-RL, flow_grpo, and the original miles
diffusion code before and after the RolloutManager fix) it checks the tree (its git commit when it
is a checkout, and a digest of its .py files), runs ``detaudit scan-rng`` cold (``--no-cache``,
its own cache folder) with this checkout and with the scanner at ``--reference`` (main before
issue #23, extracted with ``git archive`` and run with PYTHONPATH), and prints per tree: files,
lines, cold time before and after (the fastest of ``--repeat`` runs, the two scanners
alternating), errors and warnings, and the precision of the errors against the labels in
``scan_real/labels.jsonl``. Labels match by (tree, path, rule, code line), so line shifts do not
break them; an error without a label counts as not proven real (label it: real / harmless /
false, as a maintainer would). Then it checks the miles targets: before the fix exit 1 with
exactly the data-conversion randperm as the RolloutManager error, after the fix exit 0.

Getting the trees (their sources are not committed here), into one folder::

    git clone https://github.com/volcengine/verl verl
    git -C verl checkout b178a3cd56f58b2d502255daba591e92833930a7
    git clone https://github.com/NVIDIA-NeMo/RL nemo-rl
    git -C nemo-rl checkout 7ea279abfbeb698b092856d0dab61e7cf39bc909
    git clone https://github.com/yifan123/flow_grpo flow_grpo
    git -C flow_grpo checkout ac4c86e8cae021841f1fde853d340e0db67690dd
    git clone https://github.com/radixark/miles_diffusion miles-before
    git -C miles-before checkout 153b243049bbdea4b5a07fd1c8c3589db1916823
    cp -a miles-before miles-after
    git -C miles-after apply "$REPO/benchmarks/scan_real/miles_after.patch"

(see the "note" of miles-before in trees.json: the tree measured for this repository was rebuilt
from the files stored at 153b243, as no reachable snapshot held that commit.)

    PYTHONPATH=$PWD python benchmarks/scan_real.py [TREES] [--reference REV | --reference-code DIR] [--repeat N]
        [--jobs N] [--only NAME ...]

TREES defaults to /work/research/scan/trees. Exit 0 when every check and target holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "scan_real"
REFERENCE = "03d97d8"  # main before issue #23
PRECISION_TARGET = 0.90
SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", "build", "dist", "node_modules", ".tox"}


def py_files(root: Path) -> list[Path]:
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        out += [Path(folder, f) for f in sorted(files) if f.endswith(".py")]
    return out


def py_digest(root: Path) -> str:
    """sha256 over (relative path, sha256 of content) of every .py file, in path order (.git left out)."""
    digest = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        for name in sorted(files):
            if name.endswith(".py"):
                path = Path(folder, name)
                digest.update(str(path.relative_to(root)).encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def check_tree(tree: dict, root: Path) -> list[str]:
    """What differs between the tree on disk and the recorded one ([] when nothing does)."""
    problems = []
    if (root / ".git").exists():
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=False).stdout.strip()
        if head != tree["commit"]:
            problems.append(f"checkout at {head or '?'}, recorded {tree['commit']}")
    found = py_digest(root)
    if found != tree["py_digest"]:
        problems.append(f".py digest {found[:12]}, recorded {tree['py_digest'][:12]}")
    return problems


def reference_scanner(rev: str, into: Path) -> Path:
    """``detaudit/`` at ``rev``, extracted with git archive (no checkout touched)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", rev, "detaudit"],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def run_scan(code: Path, tree_root: Path, paths: list[str], cache: Path,
             jobs: int | None = None) -> tuple[float, float, int, list[dict]]:
    """(wall seconds, CPU seconds of the scan and its parser processes, exit code, findings) of one
    cold scan with the scanner under ``code``, run in the tree. Settings: the tree's own
    pyproject.toml, else none (not one found above the tree)."""
    shutil.rmtree(cache, ignore_errors=True)
    config = tree_root / "pyproject.toml"
    if not config.is_file():
        config = cache.parent / "empty-pyproject.toml"
        config.write_text("")
    paths = [*paths, "--config", str(config), *(["--jobs", str(jobs)] if jobs else [])]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(code), os.environ.get("PYTHONPATH", "")]),
               XDG_CACHE_HOME=str(cache))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the scanners' bytecode is compiled once, as an install has it
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "detaudit", "scan-rng", *paths, "--format", "json", "--no-cache"],
                          cwd=tree_root, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - used.ru_utime) + (after.ru_stime - used.ru_stime)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"scan-rng failed in {tree_root} ({proc.returncode}): {proc.stderr[-2000:]}")
    return seconds, cpu, proc.returncode, json.loads(proc.stdout)


def label_key(tree: str, path: str, rule: str, code: str) -> tuple[str, str, str, str]:
    return tree, path, rule, " ".join(code.split())


def load_labels() -> dict[tuple[str, str, str, str], dict]:
    labels = {}
    for line in (DATA / "labels.jsonl").read_text().splitlines():
        if line.strip():
            entry = json.loads(line)
            labels[label_key(entry["tree"], entry["path"], entry["rule"], entry["code"])] = entry
    return labels


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="?", default="/work/research/scan/trees", type=Path,
                        help="folder holding the trees (see the module doc for how to get them)")
    parser.add_argument("--reference", default=REFERENCE, help="git revision of the scanner to compare with")
    parser.add_argument("--reference-code", type=Path,
                        help="a folder holding the reference scanner's detaudit/ (instead of git archive of --reference)")
    parser.add_argument("--jobs", type=int, help="--jobs for both scanners (default: theirs, one parser per core)")
    parser.add_argument("--repeat", type=int, default=3, help="cold runs per scanner and tree (fastest counts)")
    parser.add_argument("--only", nargs="*", help="tree names to run (default: all)")
    args = parser.parse_args()
    trees = [t for t in json.loads((DATA / "trees.json").read_text()) if not args.only or t["name"] in args.only]
    labels = load_labels()
    work = Path(tempfile.mkdtemp(prefix="detaudit-scan-real-"))
    failed: list[str] = []
    rows = []
    try:
        before_code = (args.reference_code.resolve() if args.reference_code
                       else reference_scanner(args.reference, work / "reference"))
        for code in (before_code, REPO):  # time the scans, not the compiling of the scanners' source
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(code / "detaudit")], check=True,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})
        for tree in trees:
            root = (args.trees / tree["name"]).resolve()
            if not root.is_dir():
                failed.append(f"{tree['name']}: not found under {args.trees} (see the module doc)")
                continue
            problems = check_tree(tree, root)
            state = "matches the recorded tree" if not problems else "DIFFERS: " + "; ".join(problems)
            print(f"{tree['name']}: {tree['repo']} @ {tree['commit'][:12]}: {state}")
            if problems:
                failed.append(f"{tree['name']}: {'; '.join(problems)}")
            files = [f for p in tree["scan"] for f in py_files(root / p)]
            lines = sum(len(f.read_bytes().splitlines()) for f in files)
            times: dict[str, list[float]] = {"before": [], "after": []}
            cpus: dict[str, list[float]] = {"before": [], "after": []}
            results: dict[str, tuple[int, list[dict]]] = {}
            for _ in range(args.repeat):
                for name, code in (("before", before_code), ("after", REPO)):
                    seconds, cpu, exit_code, findings = run_scan(code, root, tree["scan"], work / "cache", args.jobs)
                    times[name].append(seconds)
                    cpus[name].append(cpu)
                    results[name] = (exit_code, findings)
            exit_code, findings = results["after"]
            errors = [f for f in findings if f["severity"] == "error"]
            counts = {"real": 0, "harmless": 0, "false": 0}
            unlabelled = []
            for f in errors:
                entry = labels.get(label_key(tree["name"], f["path"], f["rule"], f["code"]))
                if entry is None:
                    unlabelled.append(f)
                else:
                    counts[entry["label"]] += 1
            unknown = sum(f["note"].startswith(("no known process", "module level", "no pipeline process")) for f in errors)
            precision = counts["real"] / len(errors) if errors else None
            rows.append({
                "tree": tree["name"], "files": len(files), "lines": lines,
                "before_s": min(times["before"]), "after_s": min(times["after"]),
                "before_cpu": min(cpus["before"]), "after_cpu": min(cpus["after"]),
                "before_errors": sum(f["severity"] == "error" for f in results["before"][1]),
                "errors": len(errors), "warnings": len(findings) - len(errors), "unknown": unknown,
                "labelled": len(errors) - len(unlabelled), **counts, "unlabelled": len(unlabelled),
                "precision": precision, "exit": exit_code, "before_exit": results["before"][0],
            })
            for f in unlabelled:
                print(f"  unlabelled error: {f['path']}:{f['line']} {f['rule']} {f['code']!r}")
            if precision is not None and precision < PRECISION_TARGET:
                failed.append(f"{tree['name']}: error precision {precision:.0%} < {PRECISION_TARGET:.0%}")
            if tree["name"] == "miles-before":
                randperm = [f for f in errors if f["path"] == "miles/ray/data_conversion_hub/nft.py" and f["rule"] == "DA101"]
                ok = exit_code == 1 and len(errors) == 1 and len(randperm) == 1 and [
                    p["entry"] for p in randperm[0]["processes"]] == ["RolloutManager (Ray actor)"]
                print(f"  target: exit 1 with exactly the randperm as the RolloutManager error: {'yes' if ok else 'NO'}")
                if not ok:
                    failed.append("miles-before: not exactly the randperm as the RolloutManager error")
            if tree["name"] == "miles-after":
                print(f"  target: exit 0 after the fix: {'yes' if exit_code == 0 else 'NO'}")
                if exit_code != 0:
                    failed.append(f"miles-after: exit {exit_code}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"scanner before: {args.reference_code or args.reference + ' (git archive)'}; after: this checkout; "
          f"{os.cpu_count()} cores, --jobs {args.jobs or 'default'}, Python {sys.version.split()[0]}.")
    print(f"Cold: --no-cache, the fastest of "
          f"{args.repeat} runs each, the two scanners alternating; wall time, and CPU time of the scan and its "
          f"parser processes (on a shared machine the CPU time is the steadier of the two).")
    print("| tree | files | lines | cold wall before s | after s | cold CPU before s | after s | CPU after/before "
          "| errors before | errors | warnings | no known process | labelled | real | harmless | false | unlabelled "
          "| error precision | exit |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        precision = "n/a (no errors)" if r["precision"] is None else f"{r['precision']:.0%}"
        print(f"| {r['tree']} | {r['files']} | {r['lines']:,} | {r['before_s']:.2f} | {r['after_s']:.2f} | "
              f"{r['before_cpu']:.2f} | {r['after_cpu']:.2f} | {r['after_cpu'] / r['before_cpu']:.2f} | "
              f"{r['before_errors']} | {r['errors']} | {r['warnings']} | "
              f"{r['unknown']} | {r['labelled']} | {r['real']} | {r['harmless']} | {r['false']} | {r['unlabelled']} | "
              f"{precision} | {r['exit']} |")
    if rows:
        for what, before_key, after_key in (("wall", "before_s", "after_s"), ("CPU", "before_cpu", "after_cpu")):
            before = sum(r[before_key] for r in rows)
            after = sum(r[after_key] for r in rows)
            print(f"total cold {what} time: before {before:.2f} s, after {after:.2f} s ({after / before - 1:+.1%}; "
                  f"limit +10 %)")
            if after > before * 1.10:
                failed.append(f"cold {what} time {after / before - 1:+.1%} > +10 %")
    for problem in failed:
        print(f"NOT MET: {problem}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
