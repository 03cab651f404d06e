"""scan-rng's fast paths (issue #15) give the answers of the slow ones: the result cache, call
sites from the first parse, the expression walk, the collector switched off during a scan."""

from __future__ import annotations

import ast
import gc
import warnings
from pathlib import Path

import pytest
from conftest import REPO, scan_tree_copy

import detaudit.scan.processes
import detaudit.scan.scanner
from detaudit.scan import ScanConfig, scan
from detaudit.scan.cache import ResultCache
from detaudit.scan.facts import FileFacts, file_facts
from detaudit.scan.facts_base import _Ctx
from detaudit.scan.schema import MODULE_BODY

CORPUS = REPO / "tests" / "fixtures" / "scan_corpus"
REAL_CASE = REPO / "tests" / "fixtures" / "real_case"


@pytest.fixture
def corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return scan_tree_copy(CORPUS, tmp_path, monkeypatch)


def keys(result) -> list[tuple]:
    return [(f.path, f.line, f.col, f.rule, f.severity, f.note) for f in result.findings]


def test_result_cache_answers_only_an_unchanged_tree(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = scan(["pkg"], ScanConfig())
    assert list(ResultCache(True).folder.glob("*.pickle"))

    def no_analysis(*args, **kwargs):
        raise AssertionError("an unchanged tree must be answered from the result cache")

    with monkeypatch.context() as patch:
        patch.setattr(detaudit.scan.scanner, "build_processes", no_analysis)
        again = scan(["pkg"], ScanConfig())
    assert keys(again) == keys(first) and again.cache_hits == again.files
    # Other settings, another file, an edited file: each is a new scan, not the stored answer.
    only_numpy = scan(["pkg"], ScanConfig(select=("DA2",)))
    assert only_numpy.findings and {f.rule[:3] for f in only_numpy.findings} == {"DA2"}
    (corpus / "pkg" / "extra.py").write_text("import random\n\ndef pick(xs):\n    return random.choice(xs)\n")
    assert ("pkg/extra.py", 4) in {(f.path, f.line) for f in scan(["pkg"], ScanConfig()).findings}
    (corpus / "pkg" / "extra.py").write_text("import random\n\ndef pick(xs):\n    return xs[0]\n")
    assert "pkg/extra.py" not in {f.path for f in scan(["pkg"], ScanConfig()).findings}


def test_a_result_cache_that_cannot_be_read_is_ignored(corpus: Path) -> None:
    first = scan(["pkg"], ScanConfig())
    for stored in ResultCache(True).folder.glob("*.pickle"):
        stored.write_bytes(b"not a pickle")
    assert keys(scan(["pkg"], ScanConfig())) == keys(first)
    for stored in ResultCache(True).folder.glob("*.pickle"):
        stored.write_bytes(__import__("pickle").dumps({"findings": []}))  # a pickle, but no ScanResult
    assert keys(scan(["pkg"], ScanConfig())) == keys(first)


def test_no_cache_neither_reads_nor_writes_results(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scan(["pkg"], ScanConfig(), use_cache=False)
    assert not ResultCache(True).folder.exists()
    scan(["pkg"], ScanConfig())  # stores this tree's result
    analysed: list[int] = []
    real = detaudit.scan.processes.build_processes
    monkeypatch.setattr(detaudit.scan.scanner, "build_processes", lambda *a: analysed.append(1) or real(*a))
    scan(["pkg"], ScanConfig(), use_cache=False)
    assert analysed == [1]


def test_each_file_is_parsed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # generator=None call sites come from the first parse; no caller's module is parsed again.
    tree = scan_tree_copy(REAL_CASE, tmp_path, monkeypatch)
    parsed: list[int] = []
    real_parse = ast.parse
    monkeypatch.setattr(ast, "parse", lambda source, *a, **k: parsed.append(1) or real_parse(source, *a, **k))
    result = scan(["pkg"], ScanConfig(), use_cache=False, jobs=1)
    assert len(parsed) == result.files == len(list((tree / "pkg").rglob("*.py")))
    noise = [f for f in result.findings if "not passed at" in f.note]
    assert noise and "pkg/ray/engine.py:12" in noise[0].note


SOURCE = '''
@deco(make())
def f(a=default(), *, b=lambda: inner(x for x in gen()) or {"worker_process_setup_hook": hook}):
    return [g(h(y), f"{fmt(z)!r}") for y in ys() if cond(y)], "pkg.mod.fn", {"k": v(w())}
'''


def test_expression_walk_finds_what_ast_walk_finds_in_its_order() -> None:
    tree = ast.parse(SOURCE)
    facts = FileFacts("m", SOURCE)
    for node in ast.walk(tree):
        if isinstance(node, ast.expr) and not isinstance(node, (ast.Name, ast.Constant)):
            facts.calls.clear()
            facts.exprs(node, _Ctx(MODULE_BODY, None, ()))
            assert [call for call, _, _ in facts.calls] == [n for n in ast.walk(node) if isinstance(n, ast.Call)]
    whole = FileFacts("m", SOURCE)
    whole.exprs(tree.body[0], _Ctx(MODULE_BODY, None, ()))
    assert [call for call, _, _ in whole.calls] == [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert len(whole.calls) == 12
    assert whole.strings == {"pkg.mod.fn"} and [ast.unparse(h) for h in whole.hooks] == ["hook"]


def test_a_statements_expressions_are_walked_one_after_another() -> None:
    """Several expressions of one statement (an assert's test and message, a with's items, a call in
    a subscript target and the value) are each walked whole, in field order, before the next: not
    one breadth-first walk over them all, which would interleave their calls."""
    source = (
        "import lib\n"
        "def f(x):\n"
        "    assert lib.a(lib.b()), lib.c()\n"
        "    with lib.d(lib.e()) as h, lib.g():\n"
        "        lib.k()\n"
        "    x[lib.m(lib.n())] = lib.p(lib.q(), lib.r(lib.s()))\n"
    )
    walker = FileFacts("m", source).run(ast.parse(source))
    called = [ast.unparse(call.func) for call, _, _ in walker.calls]
    assert called == ["lib.a", "lib.b", "lib.c", "lib.d", "lib.e", "lib.g", "lib.k",
                      "lib.m", "lib.n", "lib.p", "lib.q", "lib.r", "lib.s"]


def test_each_lookup_call_is_still_read_by_the_lookup_layer() -> None:
    """Only calls named in ``_LOOKUP_NAMES`` / ``_LOOKUP_CALLEES`` reach ``_lookups_of`` (a check per
    call instead of a method call): each kind it reads still counts."""
    source = (
        "import importlib, operator\n"
        "def f(obj, cfg):\n"
        "    importlib.import_module('pkg.plugins')\n"
        "    operator.methodcaller(cfg.method)(obj)\n"
        "    getattr(obj, f'run_{cfg.kind}')()\n"
        "    return globals()[cfg.name]\n"
    )
    facts = file_facts("m", source)
    assert "pkg.plugins" in facts["imported"]
    assert facts["lookups"] == [""]
    assert facts["dynamic"] == [["", "run_.*"], ["m", ".*"]]


@pytest.mark.parametrize("collecting", [True, False])
def test_the_collector_is_off_during_a_scan_and_restored_after(corpus: Path, monkeypatch: pytest.MonkeyPatch,
                                                               collecting: bool) -> None:
    seen: list[bool] = []
    real = detaudit.scan.processes.build_processes
    monkeypatch.setattr(detaudit.scan.scanner, "build_processes", lambda *a: seen.append(gc.isenabled()) or real(*a))
    was = gc.isenabled()
    (gc.enable if collecting else gc.disable)()
    try:
        scan(["pkg"], ScanConfig(), use_cache=False)
        assert seen == [False] and gc.isenabled() is collecting
    finally:
        (gc.enable if was else gc.disable)()


def test_a_scan_leaves_no_tree_and_no_analysis_for_the_collector(corpus: Path) -> None:
    """With the collector off, what a scan built must be freed by reference counting: left in
    cycles (a walker's handler table, the program and its loaders), every file's syntax tree lived
    to the scan's end, and one long collection walked them after it."""
    from detaudit.scan.analysis import Program

    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        result = scan(["pkg"], ScanConfig(), use_cache=False, jobs=1)
        alive = gc.get_objects()
        # isinstance on every live object touches torch's deprecated lazy modules (other tests
        # imported torch): their FutureWarnings say nothing about the scan.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            trees = sum(isinstance(o, (ast.stmt, ast.expr)) for o in alive)  # not the shared ast.Load() etc.
            programs = sum(isinstance(o, Program) for o in alive)
        del alive
        assert result.findings and (trees, programs) == (0, 0)
    finally:
        if was:
            gc.enable()


def write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


# Arguments that make each rule's matcher report a call of any of its names (a rule added to
# rules.RULE_LIST needs a line here: the test below fails until it has one).
RULE_ARGUMENTS = {
    "DA101": "3", "DA102": "", "DA103": "w", "DA104": "x", "DA105": "(2, 3)", "DA106": "x, shuffle=True", "DA107": "x",
    "DA201": "", "DA202": "", "DA301": "", "DA302": "", "DA303": "int(time.time())",
    "DA401": "x, return_when=FIRST_COMPLETED",
}
# A rule that follows a call's results finds it only where they go: the call, written around.
RULE_CONTEXT = {"DA401": "torch.cat([r for r in {call}])"}


def test_every_name_of_every_rule_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # facts tries a rule only on the calls its record names: each name must still be found,
    # written out in full (qualified callees) or on a receiver (called attributes).
    from detaudit.scan.rules import OBJECT_MAKERS, RULE_LIST

    assert set(RULE_ARGUMENTS) == {r.code for r in RULE_LIST}
    calls = []
    for rule in RULE_LIST:
        arguments = RULE_ARGUMENTS[rule.code]
        around = RULE_CONTEXT.get(rule.code, "{call}")
        calls += [(around.format(call=f"{name}({arguments})"), rule.code) for name in sorted(rule.callees)]
        calls += [(around.format(call=f"w.{name}({arguments})"), rule.code) for name in sorted(rule.methods)]
        # an object rule: a call of a name bound to such an object (pipe = ...from_pretrained(); pipe(x))
        calls += [(f"o = {OBJECT_MAKERS[kind]}('m'); o({arguments})", rule.code) for kind in sorted(rule.objects)]
    modules = sorted({name.split(".")[0] for rule in RULE_LIST for name in rule.callees}
                     | {OBJECT_MAKERS[k].split(".")[0] for rule in RULE_LIST for k in rule.objects} | {"time"})
    head = "".join(f"import {m}\n" for m in modules) + "\n\ndef f(w, x, g):\n"
    write_tree(tmp_path, {"lib/draws.py": head + "".join(f"    {code}\n" for code, _ in calls)})
    monkeypatch.chdir(tmp_path)
    found: dict[int, set[str]] = {}
    for f in scan(["lib"], ScanConfig(), use_cache=False).findings:
        found.setdefault(f.line, set()).add(f.rule)
    first = head.count("\n") + 1
    missing = [(code, rule) for line, (code, rule) in enumerate(calls, first) if rule not in found.get(line, set())]
    assert not missing
    # and no file holding one of these names is set aside by the word prefilter
    assert [code for code, _ in calls if not detaudit.scan.scanner._relevant(code.encode())] == []


ENTRIES = {
    "pkg/__init__.py": "",
    "pkg/entries.py": (
        "import ray\nimport torch.multiprocessing as mp\n\n\n"
        "class Actor:\n    def go(self):\n        return 1\n\n\n"
        "def work(rank):\n    return rank\n\n\n"
        "def other(rank):\n    return rank\n\n\n"
        "def start():\n    ray.remote(Actor)\n    mp.spawn(work)\n    mp.start_processes(other)\n"
    ),
}


def test_entry_points_without_keywords_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, ENTRIES)
    monkeypatch.chdir(tmp_path)
    entries = {p["entry"] for p in scan(["pkg"], ScanConfig(), use_cache=False).processes}
    assert entries == {"Actor (Ray actor)", "work (multiprocessing target)", "other (multiprocessing target)"}


GUARDED = {
    "pkg/__init__.py": "",
    "pkg/run.py": (
        "import torch\n\n\n"
        "def first():\n    return torch.randn(2)\n\n\n"
        "def second():\n    return torch.rand(2)\n\n\n"
        "def main(mode, fast):\n"
        "    if mode == 'a':\n        first()\n    else:\n        second()\n"
        "    if fast:\n        torch.randperm(3)\n\n\n"
        "if __name__ == '__main__':\n    main('a', True)\n"
    ),
}


def test_each_if_keeps_its_own_condition_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, GUARDED)
    monkeypatch.chdir(tmp_path)
    by_function = {f.function.rpartition(".")[2]: f for f in scan(["pkg"], ScanConfig(), use_cache=False).findings}
    assert by_function["main"].guards == ["fast"]
    assert [g["condition"] for g in by_function["first"].reached_only_when] == ["mode == 'a'"]
    assert [g["condition"] for g in by_function["second"].reached_only_when] == ["not (mode == 'a')"]


WRAPPED = {
    "pkg/__init__.py": "",
    "pkg/noise.py": "import torch\n\n\ndef add_noise(x, generator=None):\n    return torch.randn(x, generator=generator)\n",
    "pkg/wrap.py": ("from pkg.noise import add_noise\n\n\n"
                    "def wrapped(x, generator=None):\n    return add_noise(x, generator=generator)\n"),
    # no word of a draw, seed or entry: set aside until the search for wrapped()'s callers reads it
    "pkg/user.py": "from pkg.wrap import wrapped\n\n\ndef go(x):\n    return wrapped(x)\n",
}


def test_a_caller_found_late_through_a_wrapper_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, WRAPPED)
    monkeypatch.chdir(tmp_path)
    assert not detaudit.scan.scanner._relevant((tmp_path / "pkg/user.py").read_bytes())
    findings = scan(["pkg"], ScanConfig(), use_cache=False).findings
    assert [f.path for f in findings] == ["pkg/noise.py"]
    assert "not passed at: pkg/user.py:5 (no known process)" in findings[0].note


def test_caches_are_keyed_by_the_scanners_own_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Facts or results of other scanner code (an upgrade, another checkout) are never reused."""
    import shutil

    from detaudit.scan import cache

    copy = tmp_path / "scan"
    shutil.copytree(Path(cache.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = cache.scanner_digest(copy)
    assert before == cache.scanner_digest(copy) == cache.scanner_digest()
    (copy / "analysis.py").write_text((copy / "analysis.py").read_text() + "\n# changed\n")
    assert cache.scanner_digest(copy) != before
    assert cache.scanner_digest() in cache.FactsCache(False).path.name
    key = cache.result_key(ScanConfig(), ["pkg"], str(tmp_path), [], [])
    monkeypatch.setattr(cache, "_SCANNER_DIGEST", "another-scanner")
    assert cache.result_key(ScanConfig(), ["pkg"], str(tmp_path), [], []) != key
    assert "another-scanner" in cache.FactsCache(False).path.name


def test_the_prefilter_keeps_every_file_that_names_a_torch_draw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's draws are imported from modules whose names hold no prefilter word (torch,
    torch.nn.init, torch.nn.functional): a file that calls one must never be set aside unparsed."""
    from detaudit.scan import rules

    names = sorted({n.rpartition(".")[2] for group in (rules.TORCH_DRAWS, rules.TORCH_INIT, rules.TORCH_INPLACE,
                                                       rules.TORCH_DROPOUT) for n in group})
    set_aside = [n for n in names if not detaudit.scan.scanner._relevant(f"import torch\ntorch.nn.init.{n}(w)\n".encode())]
    assert set_aside == []
    # the same for torch.multiprocessing's process entry points (imported as `mp`)
    from detaudit.scan.entries import MP_SPAWN

    entries = [n.rpartition(".")[2] for n in sorted(MP_SPAWN)]
    assert [n for n in entries if not detaudit.scan.scanner._relevant(
        f"import torch.multiprocessing as mp\nmp.{n}(run, nprocs=2)\n".encode())] == []
    # and the scan reports the deprecated alias (no trailing underscore) in a file with nothing else in it
    write_tree(tmp_path, {"pkg/__init__.py": "", "pkg/w.py": "import torch\n\ndef make(w):\n    torch.nn.init.uniform(w)\n"})
    monkeypatch.chdir(tmp_path)
    findings = scan(["pkg"], ScanConfig(), use_cache=False).findings
    assert [(f.path, f.line) for f in findings] == [("pkg/w.py", 4)]
