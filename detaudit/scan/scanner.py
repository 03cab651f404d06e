"""scan-rng orchestration: files -> per-file facts (cached, in parallel) -> processes -> findings.

A scan whose files (paths, sizes, mtimes, module names), settings and working folder are all
as in an earlier scan returns that scan's result from the result cache.
"""

from __future__ import annotations

import gc
import hashlib
import os
import pickle
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

from detaudit.scan.analysis import Finding, Program, build_processes, findings_for
from detaudit.scan.cache import FactsCache, ResultCache, result_key
from detaudit.scan.config import ScanConfig
from detaudit.scan.facts import DOTTED_STRING, file_facts
from detaudit.scan.files import MAX_FILE_BYTES, Skipped, collect_files, decode_source, module_name

# A file needs parsing only if its text could hold a draw, a seed, an entry point or a loader.
# Plain substring tests (memchr speed) beat one alternation regex ~5x on 120 MB of code.
# numpy's and the stdlib's draws come from modules named *random*; torch's carry their own names,
# so each of those must hold one of these words (tests/test_scan_speed.py checks every one):
# "uniform", not "uniform_", for the deprecated torch.nn.init.uniform alias.
_RELEVANT_WORDS = (
    b"rand", b"seed", b"ropout", b"normal", b"uniform", b"bernoulli", b"poisson", b"multinomial",
    b"exponential_", b"geometric_", b"cauchy_", b"xavier", b"kaiming", b"orthogonal", b"sparse", b"ray",
    b"__main__", b"Process(", b"spawn", b"start_processes", b"worker_init_fn", b"worker_process_setup_hook",
    b"import_module", b"locate", b"hydra", b"generator",
)
# Dotted-path string literals in a file that is not parsed: candidates of dynamic dispatch.
_QUOTED_DOTTED = re.compile(rb"""["']([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?::[A-Za-z_][A-Za-z0-9_.]*)?)["']""")
PARALLEL_MIN_FILES = 200


def _relevant(data: bytes) -> bool:
    return any(word in data for word in _RELEVANT_WORDS)


@dataclass
class ScanResult:
    findings: list[Finding]
    skipped: list[Skipped]
    files: int
    parsed: int
    processes: list[dict[str, Any]]
    cache_hits: int = 0


# Facts of one file: ("facts", dict) | ("light", (dotted strings, facts outcome)) | ("skip", reason).
# A light file (its text holds no draw, seed or entry word) joins the analysis only when a call
# path leads into it; its facts are made with everyone else's, in parallel, and kept aside until then.
def _analyse_bytes(module: str, is_package: bool, data: bytes) -> tuple[str, Any]:
    if len(data) > MAX_FILE_BYTES:
        return "skip", f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MB"
    # `python -m pkg` runs pkg/__main__.py's body: always an entry point, so always parsed.
    if not module.endswith("__main__") and not _relevant(data):
        strings = tuple(sorted({m.decode("ascii") for m in _QUOTED_DOTTED.findall(data)}))
        return "light", (tuple(s for s in strings if DOTTED_STRING.fullmatch(s)), _parse(module, is_package, data))
    return _parse(module, is_package, data)


def _parse(module: str, is_package: bool, data: bytes) -> tuple[str, Any]:
    try:
        source = decode_source(data)
    except UnicodeDecodeError as exc:
        label = "UTF-8" if exc.encoding.startswith("utf-8") else exc.encoding
        return "skip", f"not {label} ({exc.reason} at byte {exc.start})"
    except SyntaxError as exc:
        return "skip", f"cannot decode: {exc.msg}"
    try:
        return "facts", file_facts(module, source, is_package)
    except SyntaxError as exc:
        return "skip", f"cannot parse: {exc.msg} (line {exc.lineno})"
    except (ValueError, RecursionError) as exc:
        return "skip", f"cannot parse: {exc}"


def _analyse_path(job: tuple[str, str, bool]) -> tuple[str, str, tuple[str, Any]]:
    path, module, is_package = job
    data = Path(path).read_bytes()
    return path, hashlib.sha1(data).hexdigest(), _analyse_bytes(module, is_package, data)


def scan(paths: list[str | Path], config: ScanConfig | None = None, *, use_cache: bool = True,
         jobs: int | None = None) -> ScanResult:
    """Scan files and folders; see the package doc."""
    # The scan allocates millions of objects that live to its end (trees, facts) and makes no
    # reference cycles to speak of: the cyclic collector would only re-walk them (a third of the
    # parse + facts time). Parser processes fork with it off too.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _scan(paths, config or ScanConfig.load(), use_cache, jobs)
    finally:
        if collecting:
            gc.enable()


def _scan(paths: list[str | Path], config: ScanConfig, use_cache: bool, jobs: int | None) -> ScanResult:
    files, skipped = collect_files(paths, config)
    todo: list[tuple[str, str, bool]] = []
    stats: dict[str, os.stat_result] = {}
    modules: dict[str, tuple[str, bool]] = {}
    for file in files:
        path = str(file) if file.is_absolute() else os.path.realpath(file)
        try:
            st = os.stat(path)
        except OSError as exc:
            skipped.append(Skipped(str(file), f"cannot read: {exc.strerror}"))
            continue
        modules[path] = module_name(file)
        stats[path] = st
    results = ResultCache(use_cache)
    key = result_key(config, [str(p) for p in paths], os.getcwd(), skipped,
                     [(path, st.st_size, st.st_mtime_ns, *modules[path]) for path, st in stats.items()])
    known = results.lookup(key)
    if isinstance(known, ScanResult):  # no file, setting or folder changed since this very scan ran
        return known
    cache = FactsCache(use_cache)
    facts: dict[str, dict[str, Any]] = {}
    light: dict[str, tuple[str, tuple[str, Any]]] = {}  # module -> (path, its facts outcome)
    light_strings: set[str] = set()
    hits = 0

    def take(path: str, outcome: tuple[str, Any]) -> None:
        kind, value = outcome
        module = modules[path][0]
        if kind == "facts":
            facts[path] = value
        elif kind == "light":
            strings, parsed = value
            light[module] = (path, parsed)
            light_strings.update(strings)
        else:
            skipped.append(Skipped(os.path.relpath(path), value))

    for path, st in stats.items():
        digest = cache.lookup_stat(path, st) if use_cache else None
        known = cache.outcome(digest) if digest is not None else None
        if known is not None:
            hits += 1
            take(path, known)
        else:
            todo.append((path, *modules[path]))
    for path, digest, blob in _run_jobs(todo, jobs):
        if digest:
            cache.remember(path, stats[path], digest, blob)
        take(path, pickle.loads(blob))

    def load_module(module: str) -> bool:
        """Add a file the prefilter set aside to the analysis, because a call path leads into it."""
        entry = light.pop(module, None)
        if entry is None:
            return False
        path, outcome = entry
        if outcome[0] == "facts":
            program.add(path, outcome[1])
            return True
        return False

    def load_mentioning(names: set[str]) -> None:
        words = [n.encode() for n in names if n not in mentioned]
        mentioned.update(names)
        if not words:
            return
        for module, (path, _) in list(light.items()):
            data = texts.get(path)
            if data is None:  # read once: the search runs once per generator=None function and wrapper
                try:
                    data = texts[path] = Path(path).read_bytes()
                except OSError:
                    continue
            if any(word in data for word in words):
                load_module(module)

    mentioned: set[str] = set()
    texts: dict[str, bytes] = {}  # path -> text of a set-aside file
    program = Program(facts, load_module, light_strings, load_mentioning)
    scripts = [s.replace(":", ".") for s in config.scripts]
    processes = build_processes(program, scripts)
    cwd = os.getcwd() + os.sep

    def rel(path: str) -> str:
        return path[len(cwd):] if path.startswith(cwd) else os.path.relpath(path, cwd)

    findings = [f for f in findings_for(program, processes, rel, config.unknown_process) if config.wants(f.rule)]
    cache.save()
    skipped.sort(key=lambda s: s.path)
    result = ScanResult(findings, skipped, len(files), len(program.modules),
                        [{"entry": p.name, "kind": p.kind, "seeded": sorted(p.seeded)} for p in processes], hits)
    results.store(key, replace(result, cache_hits=len(files)))
    return result


def _run_jobs(todo: list[tuple[str, str, bool]], jobs: int | None) -> Iterator[tuple[str, str, bytes]]:
    """(path, content digest, the pickled outcome) of each job, in order, as they come: the caller
    unpickles while the parser processes work. The bytes go to the cache as they are."""
    workers = jobs if jobs is not None else (os.cpu_count() or 1)
    if workers <= 1 or len(todo) < PARALLEL_MIN_FILES:
        yield from map(_safe, todo)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
        yield from pool.map(_safe, todo, chunksize=32)


def _safe(job: tuple[str, str, bool]) -> tuple[str, str, bytes]:
    try:
        path, digest, outcome = _analyse_path(job)
    except OSError as exc:
        path, digest, outcome = job[0], "", ("skip", f"cannot read: {exc.strerror}")
    return path, digest, pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
