"""scan-rng's fast paths (issue #15) give the answers of the slow ones: the result cache, call
sites from the first parse, the expression walk, the collector switched off during a scan."""

from __future__ import annotations

import ast
import gc
from pathlib import Path

import pytest
from conftest import REPO, scan_tree_copy

import detaudit.scan.analysis
import detaudit.scan.scanner
from detaudit.scan import ScanConfig, scan
from detaudit.scan.cache import ResultCache
from detaudit.scan.facts import MODULE_BODY, FileFacts, _Ctx

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
    real = detaudit.scan.analysis.build_processes
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
            assert [call for call, _ in facts.calls] == [n for n in ast.walk(node) if isinstance(n, ast.Call)]
    whole = FileFacts("m", SOURCE)
    whole.exprs(tree.body[0], _Ctx(MODULE_BODY, None, ()))
    assert [call for call, _ in whole.calls] == [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert len(whole.calls) == 12
    assert whole.strings == {"pkg.mod.fn"} and [ast.unparse(h) for h in whole.hooks] == ["hook"]


@pytest.mark.parametrize("collecting", [True, False])
def test_the_collector_is_off_during_a_scan_and_restored_after(corpus: Path, monkeypatch: pytest.MonkeyPatch,
                                                               collecting: bool) -> None:
    seen: list[bool] = []
    real = detaudit.scan.analysis.build_processes
    monkeypatch.setattr(detaudit.scan.scanner, "build_processes", lambda *a: seen.append(gc.isenabled()) or real(*a))
    was = gc.isenabled()
    (gc.enable if collecting else gc.disable)()
    try:
        scan(["pkg"], ScanConfig(), use_cache=False)
        assert seen == [False] and gc.isenabled() is collecting
    finally:
        (gc.enable if was else gc.disable)()
