"""--html PATH: the self-contained page of record, verify (card, --metrics, --suite), diff and
standard diff.

The pages are checked against the same command's --json (never against hard-coded figures),
parsed as HTML, rendered in headless Chromium (Debian's package), and searched for anything
that would be fetched. The tiny recipe's pages come from tests/fixtures/html: the metrics and
RNG traces of two real disagreeing runs of recipes/sd3_pickscore_nft.toml (see its README).
"""

from __future__ import annotations

import html
import json
import math
import re
import shutil
import subprocess
import sys
import tomllib
from fnmatch import fnmatch
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, run_cli, write_card
from detaudit.data.values import decode_value, format_value

FIXTURES = REPO / "tests" / "fixtures" / "html"
RUN1, RUN2 = FIXTURES / "run1" / "metrics.jsonl", FIXTURES / "run2" / "metrics.jsonl"
# The committed tiny-recipe standard: the fixture runs (another machine, the manager unseeded) fail it.
TINY_STANDARD = REPO / "standards" / "sd3_pickscore_nft.cpu-intel-6.207-avx512.json"


class Dom(HTMLParser):
    """What the tests read from a page: articles, identical rows, tables, every attribute, text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.articles: dict[str, dict[str, str]] = {}
        self.identical: list[str] = []
        self.summarised: dict[str, dict[str, str]] = {}  # differing series past the drawn ones: a row each
        self.attributes: list[tuple[str, str, str]] = []  # (tag, name, value)
        self.tags: list[str] = []
        self.sections: dict[str, str] = {}
        self.rows: dict[str, list[list[str]]] = {}  # table class -> rows of cell text
        self._section: str | None = None
        self._table: list[str] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.append(tag)
        self.attributes += [(tag, k, v) for k, v in a.items()]
        if tag == "article" and "series" in a.get("class", ""):
            self.articles[a["data-series"]] = a
        if tag == "tr" and "data-series" in a and self._table and self._table[-1] == "identical":
            self.identical.append(a["data-series"])
        if tag == "tr" and "data-series" in a and self._table and self._table[-1] == "more-differing":
            self.summarised[a["data-series"]] = a
        if tag == "section" and "id" in a:
            self._section = a["id"]
            self.sections.setdefault(self._section, "")
        if tag == "table":
            self._table.append(a.get("class", ""))
            self.rows.setdefault(self._table[-1], [])
        if tag == "tr" and self._table:
            self._row = []
            self.rows[self._table[-1]].append(self._row)
        if tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        if tag == "table" and self._table:
            self._table.pop()

    def handle_data(self, data: str) -> None:
        if self._section is not None:
            self.sections[self._section] += data
        if self._cell is not None:
            self._cell.append(data)


def _step_text(encoded: Any) -> str:
    return format_value(decode_value(encoded))


def _page(path: Path) -> tuple[str, Dom]:
    text = path.read_text(encoding="utf-8")
    return text, Dom(text)


# --- what a page shows, against the same command's --json ------------------------------------


@pytest.mark.slow
def test_diff_page_holds_each_differing_series_its_first_step_and_the_root(tmp_path: Path) -> None:
    doc = json.loads(run_cli("diff", str(RUN1), str(RUN2), "--json").out)
    page = tmp_path / "diff.html"
    result = run_cli("diff", str(RUN1), str(RUN2), "--html", str(page))
    assert result.code == 1, result.text
    assert f"HTML report: {page}" in result.err
    text, dom = _page(page)
    assert doc["mismatched"], "the fixture runs must disagree"
    assert set(dom.articles) == {m["series"] for m in doc["mismatched"]}
    for m in doc["mismatched"]:
        article = dom.articles[m["series"]]
        assert article["data-first-step"] == _step_text(m["step"]), m["series"]
        assert article["data-kind"] == m["kind"]
        assert article["data-step-key"] == m["step_key"]
    assert dom.identical == doc["identical"]
    assert doc["root"]["summary"] in dom.sections["root"]
    following = [m["series"] for m in doc["mismatched"][1:]]
    listed = re.findall(r'<ol class="following">(.*?)</ol>', text)[0]
    assert [html.unescape(n) for n in re.findall(r'<a href="#[^"]+">([^<]*)</a> @ ', listed)] == following
    assert f"{len(doc['excluded'])} series left out of the comparison" in dom.sections["compared"]
    assert [r[0] for r in dom.rows["excluded"][1:]] == sorted(doc["excluded"])
    # every differing series carries the data of its chart (uPlot draws it), and no matplotlib SVG
    assert text.count('class="chart-data"') == len(doc["mismatched"])
    assert '<svg class="plot"' not in text
    # the difference curves start at the first divergence with the figures the text report gives
    charts = {name: json.loads(data) for name, data in re.findall(
        r'<article class="series" id="[^"]*" data-series="([^"]*)".*?class="chart-data">(.*?)</script>', text, re.S)}
    for m in doc["mismatched"]:
        chart = charts[html.unescape(m["series"])]
        x = float(decode_value(m["step"]))
        assert chart["first"] == x
        if m["abs_diff"]:
            curves = {c["label"].split()[0]: c["y"] for c in chart["diff"]["curves"]}
            at = chart["diff"]["x"].index(x)
            assert curves["abs"][at] == pytest.approx(m["abs_diff"], rel=1e-3)
            assert curves["rel"][at] == pytest.approx(m["rel_diff"], rel=1e-3)


@pytest.mark.slow
def test_verify_page_of_a_failing_tiny_recipe_run(tmp_path: Path) -> None:
    args = ("verify", "--metrics", str(RUN2), "--standard", str(TINY_STANDARD))
    doc = json.loads(run_cli(*args, "--json").out)
    assert doc["status"] == "failed"
    page = tmp_path / "verify.html"
    result = run_cli(*args, "--html", str(page))
    assert result.code == 1, result.text
    text, dom = _page(page)
    assert {f["series"] for f in doc["failures"]} == set(dom.articles)
    for f in doc["failures"]:
        assert dom.articles[f["series"]]["data-first-step"] == _step_text(f["step"])
        assert dom.articles[f["series"]]["data-kind"] == f["kind"]
    assert "FAILED" in text.split("</header>")[0]
    # the environment table: exactly the fields that differ, as verify's provenance names them
    rows = dom.rows.get("environment", [])[1:]
    expected = [line for line in doc["provenance"] + doc["package_changes"] if ": standard " in line]
    assert [f"{field}: standard {old}, here {new}" for field, old, new in rows] == list(dict.fromkeys(expected))
    assert str(TINY_STANDARD) in dom.sections["compared"]
    # the root divergence is the failing series whose first divergent point comes first in the run's
    # lines; the others follow in that order (found here from the file itself)
    lines = [json.loads(line) for line in RUN2.read_text().splitlines() if line.strip()]

    def line_of(series: str, step: Any) -> int:
        return next(i + 1 for i, obj in enumerate(lines) if series in obj and obj[obj["step_key"]] == step)

    order = sorted((line_of(f["series"], decode_value(f["step"])), f["series"]) for f in doc["failures"])
    root = dom.sections["root"]
    assert root.split("first difference ")[1].split(" @ ")[0] == order[0][1]
    assert f"(line {order[0][0]} of the run)" in root
    listed = re.findall(r'<ol class="following">(.*?)</ol>', text)[0]
    assert [html.unescape(n) for n in re.findall(r'<a href="#[^"]+">([^<]*)</a> @ ', listed)] == [n for _, n in order[1:]]


@pytest.mark.slow
def test_every_kind_of_divergence_gets_its_panel(tmp_path: Path) -> None:
    """Types, signed zeros, arrays, null, infinities, a missing series, NaN, strings, bools and
    steps that part: each its panel, its kind and step as diff --json says."""
    nan, inf = float("nan"), float("inf")
    a = [{"t": 1, "z": 0.0, "arr": [1.0, 2.0], "none": None, "inf": 1.0, "only_a": 1.0, "f": 1.0, "n": 0.5,
          "str": "a", "b": True, "g": 5.0},
         {"t": 2, "z": 0.0, "arr": [1.0], "none": None, "inf": 2.0, "only_a": 1.0, "f": 2.0, "n": 0.6, "str": "b",
          "b": False, "g": 5.0},
         {"t": 3, "z": 0.0, "arr": [1.0], "none": None, "inf": 3.0, "only_a": 1.0, "f": 3.0, "n": 0.7, "str": "c",
          "b": True, "g": 5.0}]
    b = [{"t": 1.0, "z": -0.0, "arr": [1.0, 2.5], "none": 0.5, "inf": inf, "f": 1.0, "n": 0.5, "str": "a", "b": True,
          "g": 5.0},
         {"t": 2, "z": 0.0, "arr": [1.0], "none": None, "inf": 2.0, "f": 2.0000000001, "n": nan, "str": "x", "b": True,
          "g": 5.0},
         {"t": 3, "z": 0.0, "arr": [1.0], "none": None, "inf": 3.0, "f": 3.0, "n": 0.7, "str": "c", "b": True,
          "g": 5.0}]
    for name, rows, steps in (("a.jsonl", a, (0, 1, 2)), ("b.jsonl", b, (0, 1, 3))):
        (tmp_path / name).write_text("".join(json.dumps({"step_key": "s", "s": step, **row}) + "\n"
                                             for step, row in zip(steps, rows)))
    files = (str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"))
    doc = json.loads(run_cli("diff", *files, "--json").out)
    page = tmp_path / "kinds.html"
    assert run_cli("diff", *files, "--html", str(page)).code == 1
    _, dom = _page(page)
    kinds = {m["series"]: (m["kind"], _step_text(m["step"])) for m in doc["mismatched"]}
    assert {"type", "signed-zero", "value", "missing", "close", "nan", "steps"} <= {k for k, _ in kinds.values()}
    assert {n: (a["data-kind"], a["data-first-step"]) for n, a in dom.articles.items()} == kinds


@pytest.mark.slow
def test_standard_diff_page_names_each_changed_series(tmp_path: Path) -> None:
    old, new = _standard_from(RUN1, tmp_path / "old.json"), _standard_from(RUN2, tmp_path / "new.json")
    doc = json.loads(run_cli("standard", "diff", str(old), str(new), "--json").out)
    page = tmp_path / "review.html"
    result = run_cli("standard", "diff", str(old), str(new), "--html", str(page))
    assert result.code == 1, result.text
    _, dom = _page(page)
    changed = {c["series"]: c for c in doc["series"] if c["status"] != "identical"}
    assert set(dom.articles) == set(changed)
    for name, c in changed.items():
        assert dom.articles[name]["data-first-step"] == _step_text(c["first_step"])
        assert dom.articles[name]["data-kind"] == c["kind"]
    assert sorted(dom.identical) == sorted(c["series"] for c in doc["series"] if c["status"] == "identical")


def _standard_from(metrics: Path, dest: Path) -> Path:
    """A detaudit standard holding one run's series (the library's own reader and writer)."""
    from detaudit.data.compare import SeriesData
    from detaudit.data.metrics import read_metrics
    from detaudit.standards.standard import Standard, render_standard

    run = read_metrics(metrics)
    series = {name: SeriesData.from_run(run, s) for name, s in run.series.items()}
    dest.write_text(render_standard(Standard(series=series, name="tiny")))
    return dest


def _fixture_record(status: str = "disagree") -> Any:
    """The RecordResult of `record --trace` over the fixture runs (their metrics and traces)."""
    from detaudit.data.card import load_card
    from detaudit.data.compare import diff_runs
    from detaudit.data.metrics import read_metrics_many
    from detaudit.flows.results import RecordResult, RecordStatus
    from detaudit.run.spec import RunSpec, RunState, RunStatus
    from detaudit.runner_class import RunnerClass
    from detaudit.trace.compare import audit_runs

    dirs = [FIXTURES / "run1", FIXTURES / "run2"]
    runs = read_metrics_many([d / "metrics.jsonl" for d in dirs])
    states = [RunState(RunSpec(i, ["recipe"], {}, d, d / "run.log", d / "metrics.jsonl", 600), RunStatus.OK, 0, 0.0, 60.0)
              for i, d in enumerate(dirs)]
    return RecordResult(RecordStatus(status), None, states, FIXTURES,
                        report=diff_runs(runs, labels=["run1", "run2"]), trace=audit_runs([d / "trace" for d in dirs]),
                        runner_class=RunnerClass.of(["cpu", "amd-25.1", "avx2"]), metrics=runs,
                        card=load_card(REPO / "recipes" / "sd3_pickscore_nft.toml"))


@pytest.mark.slow
def test_record_page_with_trace_names_the_first_differing_draw_per_process(tmp_path: Path) -> None:
    from detaudit.render.html import write_html
    from detaudit.render.html.views import record_page
    from detaudit.render.trace import runs_trace_lines

    result = _fixture_record()
    page = tmp_path / "record.html"
    write_html(page, record_page(result, "recipes/sd3_pickscore_nft.toml", 2))
    _, dom = _page(page)
    assert set(dom.articles) == {m.series for m in result.report.mismatched}
    trace = dom.sections["trace"]
    for _, line in runs_trace_lines(result.trace):
        assert line in trace
    processes = {row[0]: row for row in dom.rows["processes"][1:]}
    manager = processes["RolloutManager (Ray actor)"]
    assert "torch.randperm" in manager[1] and "never seeded" in manager[1]
    assert [p for p, row in processes.items() if row[1] != "identical"] == ["RolloutManager (Ray actor)"]


def test_scan_findings_that_run_in_the_traced_processes(tmp_path: Path) -> None:
    from detaudit.render.html import write_html
    from detaudit.render.html.findings import read_scan_findings
    from detaudit.render.html.views import record_page

    scan = tmp_path / "scan.json"
    out = run_cli("scan-rng", "recipes", "--format", "json", "--fail-on", "never", "--no-cache", cwd=REPO).out
    scan.write_text(out)
    findings = json.loads(out)["findings"]
    in_manager = [f for f in findings if any(p["entry"] == "RolloutManager (Ray actor)" for p in f["processes"])]
    assert in_manager, "scan-rng finds the RolloutManager's torch.randperm"
    page = tmp_path / "record.html"
    write_html(page, record_page(_fixture_record(), "recipes/sd3_pickscore_nft.toml", 2,
                                 findings=read_scan_findings(scan)))
    _, dom = _page(page)
    matched = [r[0] for r in dom.rows["findings"][1:]]
    others = [r[0] for r in dom.rows.get("findings-others", [])[1:]]
    for f in in_manager:
        assert f"{f['path']}:{f['line']}:{f['col']}" in matched
    assert len(matched) + len(others) == len(findings)
    assert "RolloutManager (Ray actor)" in dom.sections["scan"]
    # without a trace the run's processes are unknown: every finding is listed, and the page says so
    untraced = _fixture_record()
    untraced.trace = None
    write_html(page, record_page(untraced, "recipes/sd3_pickscore_nft.toml", 2, findings=read_scan_findings(scan)),
               overwrite=True)
    _, dom = _page(page)
    assert "not traced" in dom.sections["scan"]
    assert "findings" not in dom.rows and len(dom.rows["findings-others"]) - 1 == len(findings)


# --- the commands that run a card ---------------------------------------------------------------


@pytest.mark.slow
def test_record_html_of_disagreeing_runs_and_verify_suite(tmp_path: Path) -> None:
    card = write_card(tmp_path / "toy.toml", args=["--unseeded"])
    page = tmp_path / "record.html"
    result = run_cli("record", str(card), "--runs", "2", "--no-write", "--no-doctor", "--json", "--html", str(page))
    assert result.code == 1, result.text
    doc = json.loads(result.out)
    text, dom = _page(page)
    assert "RUNS DISAGREE" in text.split("</header>")[0]
    assert set(dom.articles) == {m["series"] for m in doc["diff"]["mismatched"]}
    for m in doc["diff"]["mismatched"]:
        assert dom.articles[m["series"]]["data-first-step"] == _step_text(m["step"])
    # a suite: one card passes, one fails; the page has a row per card and the failing card's series
    cards = tmp_path / "cards"
    cards.mkdir()
    good = write_card(cards / "good.toml", name="good", extra='suite = "s"\n')
    bad = write_card(cards / "bad.toml", name="bad", extra='suite = "s"\n')
    for c in (good, bad):
        assert run_cli("record", str(c), "--runs", "2", "--no-doctor").code == 0
    write_card(cards / "bad.toml", name="bad", args=["--unseeded"], extra='suite = "s"\n')
    suite_page = tmp_path / "suite.html"
    result = run_cli("verify", "--suite", "s", "--cards", str(cards), "--html", str(suite_page))
    assert result.code == 1, result.text
    text, dom = _page(suite_page)
    assert {r[0]: r[1] for r in dom.rows["cards"][1:]} == {"bad": "FAILED", "good": "PASSED"}
    bad_verify = json.loads(run_cli("verify", str(cards / "bad.toml"), "--json").out)
    assert set(dom.articles) == {f["series"] for f in bad_verify["failures"]}


# --- bad input, files ----------------------------------------------------------------------------


@pytest.mark.slow
def test_html_options_bad_input_one_line_exit_2_nothing_written(tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    r = run_cli("verify", "--metrics", str(RUN2), "--standard", str(TINY_STANDARD), "--scan", str(tmp_path / "s.json"))
    assert r.code == 2 and r.err.startswith("detaudit: error: --scan FILE goes into the HTML page") and r.err.count("\n") == 1
    bad_scan = tmp_path / "bad.json"
    bad_scan.write_text('{"not": "a list"}')
    r = run_cli("verify", "--metrics", str(RUN2), "--standard", str(TINY_STANDARD), "--html", str(page),
                "--scan", str(bad_scan))
    assert r.code == 2 and r.err == f"detaudit: error: {bad_scan}: not a scan-rng JSON report (detaudit scan-rng " \
                                     "--format json): expected a list of findings\n"
    assert not page.exists()
    page.write_text("keep me")
    r = run_cli("diff", str(RUN1), str(RUN2), "--html", str(page))
    assert r.code == 2 and r.err == f"detaudit: error: {page}: exists; pass --overwrite-html to replace it\n"
    assert page.read_text() == "keep me" and r.out == ""  # refused before anything ran
    r = run_cli("diff", str(RUN1), str(RUN2), "--html", str(page), "--overwrite-html")
    assert r.code == 1 and page.read_text().startswith("<!DOCTYPE html>")
    r = run_cli("diff", str(RUN1), str(RUN2), "--html", str(tmp_path))
    assert r.code == 2 and "is a directory" in r.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "page.html"]  # no temp file left


# Imports the --html path must never make: the page works on the base install (`pip install detaudit`).
BLOCKED = ("numpy", "matplotlib", "PIL")
BLOCKER = """
import builtins, sys
blocked = {blocked!r}
real_import = builtins.__import__
def guarded(name, *args, **kwargs):
    if name.split(".")[0] in blocked:
        raise ImportError("the --html path imported " + name)
    return real_import(name, *args, **kwargs)
builtins.__import__ = guarded
for name in list(sys.modules):
    if name.split(".")[0] in blocked:
        del sys.modules[name]
from detaudit.cli import main
sys.argv = ["detaudit", *{argv!r}]
main()
"""


@pytest.mark.slow  # over ~3 s on 2 cores (docs/testing.md, the fast set)
def test_the_html_path_imports_no_numpy_and_no_matplotlib(tmp_path: Path) -> None:
    """diff --html and verify --metrics --html with numpy and matplotlib made unimportable: the page is
    written, the verdict is the command's own (exit 1, the runs differ), nothing on stderr but the page's line."""
    for argv in (["diff", str(RUN1), str(RUN2), "--html", str(tmp_path / "diff.html")],
                 ["verify", "--metrics", str(RUN2), "--standard", str(TINY_STANDARD), "--html",
                  str(tmp_path / "verify.html")]):
        proc = subprocess.run([sys.executable, "-c", BLOCKER.format(blocked=BLOCKED, argv=argv)], capture_output=True,
                              text=True, cwd=REPO)
        assert proc.returncode == 1, proc.stderr[-3000:]
        assert "HTML report: " in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and "imported" not in proc.stderr
        assert Path(argv[-1]).read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    # the blocker bites: an import of numpy under it fails
    proc = subprocess.run([sys.executable, "-c", BLOCKER.format(blocked=BLOCKED, argv=["--version"]).replace(
        "from detaudit.cli import main", "import numpy")], capture_output=True, text=True)
    assert proc.returncode != 0 and "the --html path imported numpy" in proc.stderr


# --- self-contained, deterministic, small ----------------------------------------------------------


URL = re.compile(r"(?i)\b(?:https?|ftp|wss?):|(?<![\w:])//[\w.-]+\.[a-z]{2,}")


def external_references(text: str) -> list[str]:
    """Everything in a page that names a host, or would make a browser fetch something."""
    dom = Dom(text)
    found = [m.group(0) for m in URL.finditer(text)]
    for tag, name, value in dom.attributes:
        if name in ("src", "href", "xlink:href", "action", "poster", "srcset", "data") and not value.startswith("#"):
            found.append(f"<{tag} {name}={value!r}>")
    found += [f"<{t}>" for t in dom.tags if t in ("link", "iframe", "object", "embed", "img", "base")]
    found += re.findall(r"(?i)url\((?!\s*['\"]?#)[^)]*\)|@import", text)
    return found


@pytest.mark.slow
def test_pages_name_no_host_and_fetch_nothing(tmp_path: Path) -> None:
    page = tmp_path / "diff.html"
    run_cli("diff", str(RUN1), str(RUN2), "--html", str(page))
    text = page.read_text(encoding="utf-8")
    assert external_references(text) == []
    # the check itself sees what it must
    assert external_references('<img src="x.png"><a href="https://example.org">') \
        == ["https:", "<img src='x.png'>", "<a href='https://example.org'>", "<img>"]


@pytest.mark.slow
def test_same_inputs_give_a_byte_identical_page(tmp_path: Path) -> None:
    a, b = tmp_path / "a.html", tmp_path / "b.html"
    for page in (a, b):
        assert run_cli("diff", str(RUN1), str(RUN2), "--html", str(page)).code == 1
    assert a.read_bytes() == b.read_bytes()


def test_downsampling_keeps_each_buckets_extremes_its_first_nan_and_the_divergence() -> None:
    """The drawn points of a long series, against a brute-force reading of the rule: per bucket the
    minimum, the maximum and the first NaN, the ends, every point near the first divergence."""
    import random
    from array import array

    from detaudit.render.html.series import FULL_AROUND, keep_indices

    rng = random.Random(7)
    y = [rng.gauss(0.0, 1.0) for _ in range(10_000)]
    y[4321], y[4400], y[9000] = math.nan, math.nan, math.inf
    y[1234] = 50.0  # a spike
    buckets, around = 50, 7777
    keep = keep_indices(array("d", y), buckets, around)
    size = -(-len(y) // buckets)
    expected = {0, len(y) - 1} | set(range(around - FULL_AROUND, around + FULL_AROUND + 1))
    for start in range(0, len(y), size):
        chunk = [(v, i) for i, v in enumerate(y[start:start + size], start=start)]
        numbers = [(v, i) for v, i in chunk if not math.isnan(v)]
        expected |= {min(numbers)[1], max(numbers, key=lambda t: (t[0], -t[1]))[1]}
        expected |= {next(i for v, i in chunk if math.isnan(v))} if len(numbers) < len(chunk) else set()
    assert keep == sorted(expected)
    assert {1234, 4321, 9000} <= set(keep)
    assert keep_indices(y[:100], buckets) == list(range(100))  # short series: every point


@pytest.mark.slow
def test_a_long_pair_is_drawn_downsampled_and_marks_the_exact_first_step(tmp_path: Path) -> None:
    from detaudit.render.html.charts import chart_data

    n, first = 60_000, 41_237
    for name, bump in (("a.jsonl", 0.0), ("b.jsonl", 1e-13)):
        with open(tmp_path / name, "w") as fh:
            for i in range(n):
                loss = 1 / (1 + i / 1000) + (bump * math.exp(min((i - first) / 900, 60)) if i >= first else 0.0)
                fh.write(json.dumps({"step_key": "train/step", "train/step": i, "train/loss": loss,
                                     "train/lr": 1e-4}) + "\n")
    page = tmp_path / "long.html"
    assert run_cli("diff", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "--html", str(page)).code == 1
    text, dom = _page(page)
    assert dom.articles["train/loss"]["data-first-step"] == str(first)
    data = json.loads(re.search(r'class="chart-data">(.*?)</script>', text).group(1))
    assert data["first"] == float(first)
    xs = data["values"]["x"]
    assert float(first) in xs and len(xs) < n // 20  # downsampled, the first divergent step kept exactly
    i = xs.index(float(first))
    assert xs[i - 3:i + 4] == [float(s) for s in range(first - 3, first + 4)]  # every point near it is drawn
    diff_x = data["diff"]["x"]
    absolute = data["diff"]["curves"][0]["y"]
    assert diff_x[next(j for j, v in enumerate(absolute) if v is not None)] == float(first)  # the difference starts there
    assert page.stat().st_size < 2_000_000
    _ = chart_data  # the interactive data is what chart_data writes (imported: it is public)


def test_the_wheel_carries_the_page_assets() -> None:
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    globs = data["detaudit.render.html"]
    assets = REPO / "detaudit" / "render" / "html" / "assets"
    names = sorted(p.name for p in assets.iterdir())
    assert {"uPlot.iife.min.js", "uPlot.min.css", "uPlot.LICENSE", "report.js", "report.css"} <= set(names)
    assert all(any(fnmatch(f"assets/{n}", g) for g in globs) for n in names)


# --- a real browser ------------------------------------------------------------------------------


def chromium() -> str:
    """Debian's chromium; its absence fails the test with the install line (never a silent skip)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("headless Chromium is needed for the browser test and is not installed: "
                    "apt-get install -y chromium (Debian's package; .ci/run installs it)")
    return found


QUIET = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-default-apps",
         "--disable-extensions", "--no-default-browser-check", "--host-resolver-rules=MAP * ~NOTFOUND",
         "--enable-logging=stderr", "--v=0"]


def browse(page: Path, tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([chromium(), *QUIET, f"--user-data-dir={tmp / 'profile'}", "--virtual-time-budget=5000",
                           *extra, page.resolve().as_uri()], capture_output=True, text=True, timeout=180)


def page_requests(page: Path, tmp: Path) -> list[str]:
    """URLs the page itself asked for (Chromium's net log; the browser's own requests left out)."""
    log = tmp / "net.json"
    browse(page, tmp, f"--log-net-log={log}", "--dump-dom")
    doc = json.loads(log.read_text())
    start = doc["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return [e["params"]["url"] for e in doc["events"] if e["type"] == start
            and "file://" in e["params"].get("network_isolation_key", "")
            and not e["params"]["url"].startswith(("file:", "data:"))]


@pytest.mark.slow
def test_chromium_renders_the_failing_verify_page(tmp_path: Path) -> None:
    from PIL import Image

    args = ("verify", "--metrics", str(RUN2), "--standard", str(TINY_STANDARD))
    doc = json.loads(run_cli(*args, "--json").out)
    page = tmp_path / "verify.html"
    assert run_cli(*args, "--html", str(page)).code == 1
    # the DOM after the scripts ran: each differing series with its first step, made interactive
    proc = browse(page, tmp_path, "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = Dom(proc.stdout)
    errors = [line for line in proc.stderr.splitlines() if "CONSOLE" in line]
    assert errors == []
    for f in doc["failures"]:
        assert dom.articles[f["series"]]["data-first-step"] == _step_text(f["step"])
    canvases = proc.stdout.count("<canvas")
    assert canvases >= len(doc["failures"])  # uPlot drew every series' chart
    assert proc.stdout.count('class="chart enhanced"') == len(doc["failures"])
    # the screenshot is the page, not a blank: the red verdict on top, plots below
    shot = tmp_path / "shot.png"
    proc = browse(page, tmp_path, f"--screenshot={shot}", "--window-size=1200,1600")
    assert shot.is_file(), proc.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 200
    white = sum(count for count, rgb in colours if min(rgb) > 245)
    assert white < 0.9 * image.width * image.height
    r, g, b = image.getpixel((image.width // 2, 30))
    assert r > 150 and g < 90 and b < 90, "the FAILED header is red"
    # nothing was fetched; and the check sees a fetch where there is one
    assert page_requests(page, tmp_path) == []
    probe = tmp_path / "probe.html"
    probe.write_text('<!DOCTYPE html><img src="http://example.invalid/x.png">')
    assert page_requests(probe, tmp_path) == ["http://example.invalid/x.png"]


@pytest.mark.slow
def test_a_page_of_1000_differing_series_stays_small_and_names_every_one(tmp_path: Path) -> None:
    """Past the first MAX_DRAWN (drawn in the order they first differ) every differing series is a
    row with its first divergence, as --json gives it; the page stays under 2 MB."""
    from detaudit.render.html.page_parts import MAX_DRAWN

    names = [f"train/metric_{i:04d}" for i in range(1000)]
    for file, bump in (("a.jsonl", 0.0), ("b.jsonl", 1e-9)):
        with open(tmp_path / file, "w") as fh:
            for step in range(60):
                fh.write(json.dumps({"step_key": "train/step", "train/step": step, **{
                    n: 1.0 / (1 + step) + i * 1e-3 + (bump * (1 + i % 7) if step >= 20 + i % 30 else 0.0)
                    for i, n in enumerate(names)}}) + "\n")
    files = (str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"))
    doc = json.loads(run_cli("diff", *files, "--json").out)
    assert len(doc["mismatched"]) == 1000
    page = tmp_path / "many.html"
    assert run_cli("diff", *files, "--html", str(page)).code == 1
    text, dom = _page(page)
    order = [m["series"] for m in doc["mismatched"]]
    assert list(dom.articles) == order[:MAX_DRAWN] and list(dom.summarised) == order[MAX_DRAWN:]
    assert text.count('class="chart-data"') == MAX_DRAWN
    for m in doc["mismatched"]:
        entry = dom.articles.get(m["series"]) or dom.summarised[m["series"]]
        assert (entry["data-first-step"], entry["data-kind"]) == (_step_text(m["step"]), m["kind"])
    assert page.stat().st_size < 2_000_000


def test_a_scan_report_is_read_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--scan FILE`` reads at most its limit (one more byte tells it is larger): a huge file or a
    device never takes more memory; a folder is refused by name."""
    from detaudit.errors import InputError
    from detaudit.render.html import findings

    report = tmp_path / "scan.json"
    report.write_text("[]" + " " * 98)
    monkeypatch.setattr(findings, "MAX_SCAN_BYTES", 100)
    assert findings.read_scan_findings(report).path == report
    report.write_text("[]" + " " * 99)
    with pytest.raises(InputError, match="larger than 100 bytes; not a scan-rng report"):
        findings.read_scan_findings(report)
    with pytest.raises(InputError, match="is a directory"):
        findings.read_scan_findings(tmp_path)
