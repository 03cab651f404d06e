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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from detaudit.scan.analysis import Program
from detaudit.scan.cache import FactsCache, ResultCache, result_key
from detaudit.scan.config import ScanConfig
from detaudit.scan.entries import is_conftest, is_test_module
from detaudit.scan.evidence import Mentions, Naming
from detaudit.scan.facts import file_facts
from detaudit.scan.files import (
    MAX_CONFIG_BYTES,
    MAX_FILE_BYTES,
    Skipped,
    collect_files,
    decode_source,
    module_keys,
    test_files,
)
from detaudit.scan.findings import Finding, findings_for
from detaudit.scan.outside import Launches, Outside, holds_word, launch_file_stats
from detaudit.scan.processes import build_processes, process_summary
from detaudit.scan.schema import DOTTED_STRING, Facts

# A file needs parsing only if its text could hold a draw, a seed, an entry point or a loader.
# Plain substring tests (memchr speed) beat one alternation regex ~5x on 120 MB of code.
# numpy's and the stdlib's draws come from modules named *random*; torch's carry their own names,
# so each of those must hold one of these words (tests/test_scan_speed.py checks every one):
# "uniform", not "uniform_", for the deprecated torch.nn.init.uniform alias.
_RELEVANT_WORDS = (
    b"rand", b"seed", b"ropout", b"normal", b"uniform", b"bernoulli", b"poisson", b"multinomial",
    b"exponential_", b"geometric_", b"cauchy_", b"xavier", b"kaiming", b"orthogonal", b"sparse", b"ray",
    b"__main__", b"Process(", b"spawn", b"start_processes", b"worker_init_fn", b"worker_process_setup_hook",
    b"import_module", b"locate", b"hydra", b"generator", b"latents", b"shuffle", b"Sampler", b"absl", b"Fire(",
    b"click", b"typer", b"notebook_launcher", b"fixture", b"determinism", b"Pipeline",
    b"as_completed", b"FIRST_",  # DA401's gathers (ray.wait holds "ray")
)
# Dotted-path string literals in a file that is not parsed: candidates of dynamic dispatch.
_QUOTED_DOTTED = re.compile(rb"""["']([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?::[A-Za-z_][A-Za-z0-9_.]*)?)["']""")
PARALLEL_MIN_FILES = 200
# What marks a folder as a project's root (see whole_projects).
PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
# A dotted name in a config file or launch script (`-m pkg.train`, `_target_: pkg.mod.fn`).
# Not preceded by a letter, digit, `_`, `.` or `/`: tested after the first letter (a look-behind over
# it), so that the regex engine skips to each letter at C speed instead of trying every byte.
_DOTTED_WORD = re.compile(rb"[A-Za-z_](?<![A-Za-z0-9_./][A-Za-z_])[A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?::[A-Za-z_][A-Za-z0-9_]*)?")


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
    # What the reader should know about how files were read: module names shared by several
    # files (each keeps its findings), imports of such a name that matched none of them.
    notes: list[str] = field(default_factory=list)


# Facts of one file: ("facts", dict) | ("light", (dotted strings, facts outcome)) | ("skip", reason).
# A light file (its text holds no draw, seed or entry word) joins the analysis only when a call
# path leads into it; its facts are made with everyone else's, in parallel, and kept aside until then.
# A job: (path, module key, dotted name, is package).
Job = tuple[str, str, str, bool]


def _analyse_bytes(key: str, name: str, is_package: bool, data: bytes) -> tuple[str, Any]:
    if len(data) > MAX_FILE_BYTES:
        return "skip", f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MB"
    # `python -m pkg` runs pkg/__main__.py's body, pytest runs test modules: always entry points.
    if not name.endswith("__main__") and not is_test_module(name) and not is_conftest(name) and not _relevant(data):
        parsed = _parse(key, name, is_package, data)
        if parsed[0] == "facts":
            strings = tuple((text, attr) for text, attr in parsed[1]["strings"])
        else:
            found = sorted({m.decode("ascii") for m in _QUOTED_DOTTED.findall(data)})
            strings = tuple((s, "") for s in found if DOTTED_STRING.fullmatch(s))
        return "light", (strings, parsed)
    return _parse(key, name, is_package, data)


def _parse(key: str, name: str, is_package: bool, data: bytes) -> tuple[str, Any]:
    try:
        source = decode_source(data)
    except UnicodeDecodeError as exc:
        label = "UTF-8" if exc.encoding.startswith("utf-8") else exc.encoding
        return "skip", f"not {label} ({exc.reason} at byte {exc.start})"
    except SyntaxError as exc:
        return "skip", f"cannot decode: {exc.msg}"
    try:
        return "facts", file_facts(key, source, is_package, name)
    except SyntaxError as exc:
        return "skip", f"cannot parse: {exc.msg} (line {exc.lineno})"
    except (ValueError, RecursionError) as exc:
        return "skip", f"cannot parse: {exc}"


def _analyse_path(job: Job) -> tuple[str, str, tuple[str, Any]]:
    path, key, name, is_package = job
    data = Path(path).read_bytes()
    # The facts of a file depend on its module key and name too: two files with one content
    # (two copies of a module in two projects) never share an entry.
    digest = hashlib.sha1(f"{key}\0{name}\0{is_package}\0".encode() + data).hexdigest()
    return path, digest, _analyse_bytes(key, name, is_package, data)


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
    found_configs: list[str] = []
    found_launchers: list[str] = []
    files, skipped = collect_files(paths, config, found_configs, found_launchers)
    stats: dict[str, os.stat_result] = {}
    for file in files:
        path = file if os.path.isabs(file) else os.path.realpath(file)
        try:
            stats[path] = os.stat(path)
        except OSError as exc:
            skipped.append(Skipped(str(file), f"cannot read: {exc.strerror}"))
    modules = module_keys(list(stats))  # path -> (module key, dotted name, is package, root)
    in_tests = test_files(list(stats), paths)
    configs = _config_files(found_configs, paths)
    launchers = launch_file_stats(found_launchers)
    whole = whole_projects(paths)
    results = ResultCache(use_cache)
    key = result_key(config, [str(p) for p in paths], os.getcwd(), skipped,
                     [(path, st.st_size, st.st_mtime_ns, *modules[path]) for path, st in stats.items()]
                     + [("config", *c) for c in configs] + [("launch", *c) for c in launchers]
                     + [("whole projects", whole)])
    known = results.lookup(key)
    if isinstance(known, ScanResult):  # no file, setting or folder changed since this very scan ran
        return known
    cache = FactsCache(use_cache)
    facts: dict[str, Facts] = {}
    light: dict[str, tuple[str, tuple[str, Any]]] = {}  # module key -> (path, its facts outcome)
    light_strings: set[tuple[str, str]] = set()
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

    todo: list[Job] = []
    for path, st in stats.items():
        digest = cache.lookup_stat(path, st) if use_cache else None
        known = cache.outcome(digest) if digest is not None else None
        if known is not None and _module_of(known) in (None, modules[path][0]):
            hits += 1
            take(path, known)
        else:
            todo.append((path, *modules[path][:3]))
    for path, digest, blob in _run_jobs(todo, jobs, pickled=use_cache):
        if isinstance(blob, tuple):  # made here, for no cache: no bytes to store
            take(path, blob)
            continue
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
    mentions = _mentions(facts, light, in_tests, configs)
    program = Program(facts, load_module, light_strings, load_mentioning,
                      {m[0]: (m[1], m[3]) for m in modules.values()})
    # What the tree names, and which modules its processes import, tells what can run only when
    # the scan holds the whole project: a package scanned alone may be driven from outside it.
    naming = Naming(program, mentions) if whole else None
    scripts = [s.replace(":", ".") for s in config.scripts]
    cwd = os.getcwd() + os.sep

    def rel(path: str) -> str:
        return path[len(cwd):] if path.startswith(cwd) else os.path.relpath(path, cwd)

    # Which __main__ blocks are self-tests or stand-alone tools: the launch files and the strings of
    # the code (a launcher's command line, a module path given to runpy) tell, in a whole project.
    outside = None
    if whole:
        code_strings = mentions.script_strings | mentions.string_names | {
            t.partition(":")[0] for strings in program.strings.values() for t in strings}  # "pkg.train:main": pkg.train
        outside = Outside(program, Launches(launchers, code_strings), mentions.imported, rel)
    processes = build_processes(program, scripts, in_tests.__contains__, rel, config.tests_as_pipeline, naming)
    if outside is not None:  # their processes, and those started inside them, are judged like tests
        outside.judge(processes)

    findings = [f for f in findings_for(program, processes, rel, config.unknown_process, config.tests_as_pipeline,
                                        in_tests.__contains__, naming, mentions.imported) if config.wants(f.rule)]
    cache.save()
    skipped.sort(key=lambda s: s.path)
    result = ScanResult(findings, skipped, len(stats), len(program.modules),
                        [process_summary(p) for p in processes], hits, _notes(program, modules, rel))
    results.store(key, replace(result, cache_hits=len(stats)))
    # The program and the loaders above refer to each other: cleared, the whole analysis is freed
    # by reference counting instead of by one long cyclic collection after the scan.
    program.__dict__.clear()
    return result


def whole_projects(paths: list[str | Path]) -> bool:
    """Every named path is a project's root folder (it holds pyproject.toml, setup.py, setup.cfg or
    .git) or lies in one: the scan holds the projects' drivers, scripts and config files."""
    roots = [os.path.realpath(p) for p in paths
             if os.path.isdir(p) and any(os.path.exists(os.path.join(p, m)) for m in PROJECT_MARKERS)]
    return bool(roots) and all(
        any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in roots)
        for real in (os.path.realpath(p) for p in paths))


def _config_files(found: list[str], named: list[str | Path]) -> list[tuple[str, int, int]]:
    """(path, size, mtime) of the config files that may name code for the pipeline to call: not
    test code, at most MAX_CONFIG_BYTES (larger ones are data)."""
    out = []
    for file in dict.fromkeys(found):
        try:
            st = os.stat(file)
        except OSError:
            continue
        if st.st_size <= MAX_CONFIG_BYTES:
            out.append((str(file), st.st_size, st.st_mtime_ns))
    tests = test_files([path for path, _, _ in out], named)
    return [c for c in out if c[0] not in tests]


def _mentions(facts: dict[str, Facts], light: dict[str, tuple[str, tuple[str, Any]]], in_tests: set[str],
              configs: list[tuple[str, int, int]]) -> Mentions:
    """What the non-test code of every scanned file (those set aside too) names, and a search of
    the config files for names the code does not hold."""
    mentions = Mentions()

    def add(path: str, f: Facts) -> None:
        mentions.script_strings.update(f["script_strings"])  # a test's command line launches a script too
        if path not in in_tests:
            mentions.names.update(f["names"])
            mentions.string_names.update(f["string_names"])
            module = f["module"]
            for name, users in f["local_uses"].items():
                mentions.local_uses.setdefault((module, name), set()).update(f"{module}.{u}" for u in users)
            mentions.built.extend((f["module"], owner, regex) for owner, regex in f["dynamic"])
            mentions.lookups.extend((f["module"], owner) for owner in f["lookups"])

    for path, f in facts.items():
        add(path, f)
    for module, (path, outcome) in light.items():
        if outcome[0] == "facts":
            add(path, outcome[1])
            mentions.imported[module] = outcome[1]["imported"]
    texts = TextFiles(configs)
    mentions.in_config = texts.words
    mentions.dotted_in_config = texts.dotted_words
    return mentions


class TextFiles:
    """Config files searched for words (``Naming`` asks one name at a time), read once per scan into
    one text (an unreadable file holds nothing): one substring search per word, whatever the number
    of files. Launch files are searched by ``outside.Launches``, one file at a time."""

    def __init__(self, files: list[tuple[str, int, int]]) -> None:
        self.files = [path for path, _, _ in files]
        self._text: bytes | None = None

    def text(self) -> bytes:
        if self._text is None:
            parts = []
            for path in self.files:
                try:
                    parts.append(Path(path).read_bytes())
                except OSError:
                    continue
            self._text = b"\n".join(parts)  # a newline between files: no word runs across two
        return self._text

    def words(self, names: set[str]) -> set[str]:
        """Which of ``names`` a file holds as a whole word (``rewards.py`` in ``python x/rewards.py``)."""
        data = self.text()
        return {name for name in names if holds_word(data, name.encode())}

    def dotted_words(self) -> set[str]:
        return {m.decode("ascii") for m in _DOTTED_WORD.findall(self.text())}


def _module_of(outcome: tuple[str, Any]) -> str | None:
    """The module key a stored outcome's facts were made for (None: a skipped file)."""
    kind, value = outcome
    if kind == "light":
        kind, value = value[1]
    return value["module"] if kind == "facts" else None


def _notes(program: Program, modules: dict[str, tuple[str, str, bool, str]], rel: Callable[[str], str]) -> list[str]:
    notes = []
    for name in sorted(program.shared):
        paths = sorted(rel(path) for path, module in modules.items() if module[1] == name)
        notes.append(f"module name {name} is shared by {len(paths)} files ({', '.join(paths)}): each keeps its "
                     f"findings; an import of {name} resolves to the one under the importing file's own root")
    for name, root in sorted(program.unresolved_shared):
        where = rel(root) if root else "an unknown folder"
        notes.append(f"an import of {name} from {where} matches none of the files sharing that name, or several: "
                     f"calls through it are not followed")
    return notes


def _run_jobs(todo: list[Job], jobs: int | None, pickled: bool = True) -> Iterator[tuple[str, str, bytes | tuple[str, Any]]]:
    """(path, content digest, the pickled outcome) of each job, in order, as they come: the caller
    unpickles while the parser processes work. The bytes go to the cache as they are. Without
    ``pickled`` (no cache to store them in), the jobs this process runs itself give the outcome as
    it is: pickling it only to unpickle it at once was a tenth of a one-process scan's time."""
    workers = jobs if jobs is not None else (os.cpu_count() or 1)
    if workers <= 1 or len(todo) < PARALLEL_MIN_FILES:
        yield from map(_safe if pickled else _safe_outcome, todo)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
        yield from pool.map(_safe, todo, chunksize=32)


def _safe(job: Job) -> tuple[str, str, bytes]:
    path, digest, outcome = _safe_outcome(job)
    return path, digest, pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)


def _safe_outcome(job: Job) -> tuple[str, str, tuple[str, Any]]:
    try:
        return _analyse_path(job)
    except OSError as exc:
        return job[0], "", ("skip", f"cannot read: {exc.strerror}")
