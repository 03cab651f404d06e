"""scan-rng on the installed torch, diffusers and transformers, against ruff, a grep and the previous scanner.

Prints: lines scanned; detaudit's cold time (no cache), rescan time (cache, files unchanged:
the result cache answers), rescan time from the per-file facts cache alone (result cache
cleared: what a rescan after an edit costs, minus the edited files), `--jobs 1` cold time;
`ruff check --select NPY002,S311` on the same tree and the cold/ruff ratio; how many torch
draws without generator= detaudit finds (DA101) against the grep
`torch\\.(rand|randn|randint|randperm|normal)\\(` on lines without `generator=`; the previous
implementation's cold time and finding-set difference (run from a `git worktree` of
``--reference``, default the commit this scanner was rebuilt from; full JSON records compared);
whether the cold, rescan, facts-cache and `--jobs 1` finding sets are identical; and a one-core
profile of the cold path by phase (file walk, read, ast.parse, facts, analysis).
Goals on a 2-core machine: cold <= 5x ruff, rescan <= 1.0 s, no finding-set difference.

    python benchmarks/scan_bench.py [--reference REV | --no-reference]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# main at the time scan-rng was rebuilt for speed (issue #15): the implementation it replaced
REFERENCE = "5b00383"
PACKAGES = ("torch", "diffusers", "transformers")
GREP = re.compile(r"torch\.(rand|randn|randint|randperm|normal)\(")


def findings_of(stdout: str) -> list[dict]:
    """The findings of a ``--format json`` report: an object with "findings" since issue #37, a list before."""
    doc = json.loads(stdout)
    return doc["findings"] if isinstance(doc, dict) else doc


def package_dirs() -> list[Path]:
    dirs = []
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            sys.exit(f"{name} is not installed (pip install -e '.[recipe]')")
        dirs.append(Path(list(spec.submodule_search_locations)[0]))
    return dirs


def count(dirs: list[Path]) -> tuple[int, int, int]:
    files = lines = grep = 0
    for d in dirs:
        for path in d.rglob("*.py"):
            files += 1
            text = path.read_text(encoding="utf-8", errors="replace")
            for line in text.splitlines():
                lines += 1
                if GREP.search(line) and "generator=" not in line:
                    grep += 1
    return files, lines, grep


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    return time.perf_counter() - started, proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", default=REFERENCE, help="git revision of the previous scanner to compare with")
    parser.add_argument("--no-reference", action="store_true", help="do not run the previous scanner")
    args = parser.parse_args()
    dirs = package_dirs()
    files, lines, grep = count(dirs)
    print(f"tree: {', '.join(str(d) for d in dirs)}")
    print(f"      {files} files, {lines:,} lines")
    cache = tempfile.mkdtemp(prefix="detaudit-scan-bench-")
    env = {**os.environ, "XDG_CACHE_HOME": cache, "PYTHONPATH": str(REPO)}
    # -P: the scanner comes from PYTHONPATH, not from the working folder (which names the tree the paths are relative to)
    scan = [sys.executable, "-P", "-m", "detaudit", "scan-rng", *map(str, dirs), "--format", "json", "--fail-on", "never"]
    cold, proc = timed(scan, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    findings = findings_of(proc.stdout)
    warm, proc2 = timed(scan, env)
    assert proc2.returncode == 0, proc2.stderr[-2000:]
    for results in Path(cache, "detaudit").glob("scan-rng-results-*"):
        shutil.rmtree(results)
    facts_only, proc4 = timed(scan, env)
    assert proc4.returncode == 0, proc4.stderr[-2000:]
    single, proc3 = timed([*scan, "--no-cache", "--jobs", "1"], env)
    assert proc3.returncode == 0, proc3.stderr[-2000:]
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        sys.exit("ruff is not installed (pip install ruff)")
    ruff_time, _ = timed([ruff, "check", "--select", "NPY002,S311", "--no-cache", "--quiet", "--exit-zero",
                          *map(str, dirs)], env)
    reference = None if args.no_reference else run_reference(args.reference, scan, cache)
    shutil.rmtree(cache, ignore_errors=True)
    by_rule: dict[str, int] = {}
    for f in findings:
        by_rule[f["rule"]] = by_rule.get(f["rule"], 0) + 1
    errors = sum(f["severity"] == "error" for f in findings)
    print(f"detaudit scan-rng cold (no cache): {cold:.2f} s")
    print(f"detaudit scan-rng rescan (cache):  {warm:.2f} s   (goal <= 1.0 s)")
    print(f"detaudit scan-rng rescan, facts cache only (result cache cleared): {facts_only:.2f} s")
    print(f"detaudit scan-rng --jobs 1 cold:   {single:.2f} s")
    print(f"ruff check --select NPY002,S311:   {ruff_time:.2f} s")
    print(f"cold / ruff: {cold / ruff_time:.1f}x   (goal <= 5x)")
    print(f"findings: {len(findings)} ({errors} errors); by rule: "
          + ", ".join(f"{r} {n}" for r, n in sorted(by_rule.items())))
    print(f"torch draws without generator=: detaudit DA101 {by_rule.get('DA101', 0)}, grep {grep}")
    if reference is not None:
        ref_time, ref_findings = reference
        print(f"previous implementation ({args.reference}) cold: {ref_time:.2f} s ({ref_time / cold:.1f}x this one's)")
        print_difference("previous implementation vs cold", ref_findings, findings)
    for label, other in (("rescan", findings_of(proc2.stdout)), ("facts-cache rescan", findings_of(proc4.stdout)),
                         ("--jobs 1", findings_of(proc3.stdout))):
        print_difference(f"cold vs {label}", findings, other)
    profile(dirs)


def run_reference(revision: str, scan: list[str], cache: str) -> tuple[float, list[dict]] | None:
    """The previous scanner's cold time and findings, run from a temporary git worktree of ``revision``."""
    tree = Path(tempfile.mkdtemp(prefix="detaudit-scan-reference-")) / "tree"
    added = subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), revision],
                           capture_output=True, text=True, check=False)
    if added.returncode != 0:
        print(f"previous implementation ({revision}): not run ({added.stderr.strip()[-300:]})")
        return None
    try:
        env = {**os.environ, "XDG_CACHE_HOME": str(Path(cache, "reference")), "PYTHONPATH": str(tree)}
        seconds, proc = timed(scan, env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return seconds, findings_of(proc.stdout)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], capture_output=True, check=False)
        shutil.rmtree(tree.parent, ignore_errors=True)


def key(f: dict) -> str:
    return json.dumps(f, sort_keys=True)


def print_difference(label: str, first: list[dict], second: list[dict]) -> None:
    a, b = {key(f) for f in first}, {key(f) for f in second}
    if a == b:
        print(f"finding sets, {label}: identical ({len(a)})")
        return
    print(f"finding sets, {label}: DIFFER (-{len(a - b)} +{len(b - a)})")
    for line in sorted(a - b)[:10]:
        print(f"  - {line[:200]}")
    for line in sorted(b - a)[:10]:
        print(f"  + {line[:200]}")


def profile(dirs: list[Path]) -> None:
    """Where a cold scan's time goes, by phase: one `--jobs 1` scan in this process, timed from inside."""
    import ast

    sys.path.insert(0, str(REPO))  # this tree's scanner, as the timed runs use
    import detaudit.scan.scanner as scanner
    from detaudit.scan import ScanConfig, scan

    spent = {"walk": 0.0, "parse": 0.0, "facts": 0.0, "analysis": 0.0}

    def timing(phase: str, function):  # noqa: ANN001, ANN202 - a benchmark's wrapper
        def timed_call(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[phase] += time.perf_counter() - started
        return timed_call

    originals = {name: getattr(scanner, name) for name in ("collect_files", "file_facts", "build_processes", "findings_for")}
    real_parse = ast.parse
    ast.parse = timing("parse", real_parse)
    scanner.collect_files = timing("walk", originals["collect_files"])
    scanner.file_facts = timing("facts", originals["file_facts"])  # parse included: taken off below
    scanner.build_processes = timing("analysis", originals["build_processes"])
    scanner.findings_for = timing("analysis", originals["findings_for"])
    try:
        started = time.perf_counter()
        scan(list(dirs), ScanConfig.load(), use_cache=False, jobs=1)
        total = time.perf_counter() - started
    finally:
        ast.parse = real_parse
        for name, function in originals.items():
            setattr(scanner, name, function)
    facts = spent["facts"] - spent["parse"]
    rest = total - spent["walk"] - spent["facts"] - spent["analysis"]
    print(f"profile (one core, --jobs 1 in this process): whole scan {total:.2f} s = walk {spent['walk']:.2f} s"
          f" + ast.parse {spent['parse']:.2f} s (every file; set-aside ones too) + facts {facts:.2f} s"
          f" + analysis {spent['analysis']:.2f} s + the rest {rest:.2f} s (read, prefilter, hash, pickling)")


if __name__ == "__main__":
    main()
