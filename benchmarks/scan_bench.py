"""scan-rng on the installed torch, diffusers and transformers, against ruff and a grep.

Prints: lines scanned; detaudit's cold time (no cache) and warm rescan time (cache, files
unchanged); `ruff check --select NPY002,S311` on the same tree and the cold/ruff ratio;
how many torch draws without generator= detaudit finds (DA101) against the grep
`torch\\.(rand|randn|randint|randperm|normal)\\(` on lines without `generator=`; a profile of
the cold path by phase (file walk, read + word prefilter, ast.parse + facts, analysis); and
whether the finding sets of the cold, rescan and single-process (`--jobs 1`) paths are
identical (any difference is printed). Goals on a 2-core machine: cold <= 5x ruff, rescan <= 1.0 s.

    python benchmarks/scan_bench.py
"""

from __future__ import annotations

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

PACKAGES = ("torch", "diffusers", "transformers")
GREP = re.compile(r"torch\.(rand|randn|randint|randperm|normal)\(")


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
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return time.perf_counter() - started, proc


def main() -> None:
    dirs = package_dirs()
    files, lines, grep = count(dirs)
    print(f"tree: {', '.join(str(d) for d in dirs)}")
    print(f"      {files} files, {lines:,} lines")
    cache = tempfile.mkdtemp(prefix="detaudit-scan-bench-")
    env = {**os.environ, "XDG_CACHE_HOME": cache}
    scan = [sys.executable, "-m", "detaudit", "scan-rng", *map(str, dirs), "--format", "json", "--fail-on", "never"]
    cold, proc = timed(scan, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    findings = json.loads(proc.stdout)
    warm, proc2 = timed(scan, env)
    assert proc2.returncode == 0, proc2.stderr[-2000:]
    single, proc3 = timed([*scan, "--no-cache", "--jobs", "1"], env)
    assert proc3.returncode == 0, proc3.stderr[-2000:]
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        sys.exit("ruff is not installed (pip install ruff)")
    ruff_time, _ = timed([ruff, "check", "--select", "NPY002,S311", "--no-cache", "--quiet", "--exit-zero",
                          *map(str, dirs)], env)
    shutil.rmtree(cache, ignore_errors=True)
    by_rule: dict[str, int] = {}
    for f in findings:
        by_rule[f["rule"]] = by_rule.get(f["rule"], 0) + 1
    errors = sum(f["severity"] == "error" for f in findings)
    print(f"detaudit scan-rng cold (no cache): {cold:.2f} s")
    print(f"detaudit scan-rng rescan (cache):  {warm:.2f} s   (goal <= 1.0 s)")
    print(f"detaudit scan-rng --jobs 1 cold:   {single:.2f} s")
    print(f"ruff check --select NPY002,S311:   {ruff_time:.2f} s")
    print(f"cold / ruff: {cold / ruff_time:.1f}x   (goal <= 5x)")
    print(f"findings: {len(findings)} ({errors} errors); by rule: "
          + ", ".join(f"{r} {n}" for r, n in sorted(by_rule.items())))
    print(f"torch draws without generator=: detaudit DA101 {by_rule.get('DA101', 0)}, grep {grep}")
    for label, other in (("rescan", json.loads(proc2.stdout)), ("--jobs 1", json.loads(proc3.stdout))):
        print_difference(f"cold vs {label}", findings, other)
    profile(dirs)


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
    """Where a cold scan's time goes, by phase, in this process (one core)."""
    import ast

    from detaudit.scan import ScanConfig, scan
    from detaudit.scan.files import collect_files, decode_source
    from detaudit.scan.scanner import _relevant

    config = ScanConfig.load()
    started = time.perf_counter()
    files, _ = collect_files(list(dirs), config)
    walk = time.perf_counter() - started
    started = time.perf_counter()
    relevant = [data for data in (f.read_bytes() for f in files) if _relevant(data)]
    read = time.perf_counter() - started
    started = time.perf_counter()
    for data in relevant:
        try:
            ast.parse(decode_source(data))
        except (SyntaxError, ValueError, UnicodeDecodeError):
            pass
    parse = time.perf_counter() - started
    started = time.perf_counter()
    scan(list(dirs), config, use_cache=False, jobs=1)
    total = time.perf_counter() - started
    lines = sum(data.count(b"\n") for data in relevant)
    print(f"profile (one core): walk {walk:.2f} s; read + prefilter {read:.2f} s ({len(relevant)} of {len(files)} files, "
          f"{lines:,} lines pass); ast.parse alone {parse:.2f} s; whole scan {total:.2f} s, so facts + analysis "
          f"{max(total - walk - read - parse, 0):.2f} s")


if __name__ == "__main__":
    main()
