"""pytest plugin (``pytest11`` entry point ``detaudit``): check determinism standards inside tests.

Two ways in::

    def test_training_reproduces(detaudit, tmp_path):
        metrics = train(tmp_path)                   # writes a metrics JSONL
        detaudit.verify_metrics(metrics)            # against the standard beside this test file

    @pytest.mark.detaudit(card="recipes/tiny.toml")  # runs the card, verifies it
    def test_tiny_recipe():
        pass

Where standards live, as syrupy and pytest-regressions keep snapshots: beside the test file,
``<test folder>/standards/<test module>/<test name>.json`` (the folder name is the ini option
``detaudit_standards_dir``). ``verify_metrics(metrics, "name.json")`` names one explicitly: a
relative path is taken from the test file's folder, never from the current directory (pytest
may be run from anywhere). A card path is taken from the project root (pytest's rootdir);
a metrics path, which the test wrote, as the test gave it.

Options:

``--detaudit-update``       write the standards that are missing, whose check failed, or whose
                            run has series the standard lacks
``--detaudit-update-all``   re-record every standard a test checks
``--detaudit-force-update`` allow either on a CI system (refused there otherwise: a CI job must not
                            rewrite its own gate); CI is any of ``ci.CI_VARIABLES`` set
``--detaudit-runs``         runs that must agree when a card is re-recorded (default 2)

A metrics file the test produced is written as the standard (it is the test's own output):
in the existing standard's format, and for a sampled golden (Megatron-LM, NeMo-RL, TorchTitan)
at its steps only, with its headers kept. Paths in a written standard are relative to the
project, or left out; an update that changes no value leaves the file's bytes as they were.
Within one session a standard belongs to one test: a second test that checks the same standard
under an update option fails, naming both (also across ``pytest -n`` workers). A malformed
metrics line or standard fails the test with the one-line reason. New series (in the run, not
in the standard) and every update are listed in the terminal summary, also under ``pytest -n``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import pytest

from detaudit.errors import InputError
from detaudit.render.ci.environment import ci_variable

UPDATE_FAILED, UPDATE_ALL = "failed", "all"
STANDARDS_DIR_INI = "detaudit_standards_dir"
_CLAIMS_KEY = "detaudit_claims"  # workerinput: the session's claims folder, shared by xdist workers
_EVENTS_KEY = "detaudit_events"  # workeroutput: what a worker updated and found
_UNSAFE_NAME = re.compile(r"[^\w.\[\]=,+-]")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("detaudit", "determinism standards (detaudit)")
    group.addoption("--detaudit-update", action="store_true",
                    help="Write the standards that are missing, failed, or lack series the run has.")
    group.addoption("--detaudit-update-all", action="store_true", help="Re-record every standard a test checks.")
    group.addoption("--detaudit-force-update", action="store_true",
                    help="Allow updates on a CI system (CI, GITHUB_ACTIONS, GITLAB_CI, BUILDKITE or JENKINS_URL set).")
    group.addoption("--detaudit-runs", type=int, default=2, help="Runs that must agree when re-recording a card (default 2).")
    parser.addini(STANDARDS_DIR_INI, "Folder of the standards, beside each test file (default: standards).",
                  default="standards")


def _update_mode(config: pytest.Config) -> str | None:
    if config.getoption("--detaudit-update-all"):
        return UPDATE_ALL
    return UPDATE_FAILED if config.getoption("--detaudit-update") else None


@dataclasses.dataclass
class _State:
    events: list[dict[str, str]] = dataclasses.field(default_factory=list)
    claims: Path | None = None  # set under an update option
    own_claims: bool = False  # this process made the folder (the controller): it removes it


_STATE = pytest.StashKey[_State]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "detaudit(card=None, metrics=None, standard=None, step_key=None): verify a card, or a metrics file "
        "the test wrote, against its detaudit standard after the test body",
    )
    state = _State()
    config.stash[_STATE] = state
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:  # an xdist worker: report to the controller, share its claims
        config.workeroutput[_EVENTS_KEY] = state.events  # type: ignore[attr-defined]
        claims = workerinput.get(_CLAIMS_KEY)
        state.claims = Path(claims) if claims else None
        return
    if _update_mode(config) is None:
        return
    variable = ci_variable()
    if variable and not config.getoption("--detaudit-force-update"):
        raise pytest.UsageError(
            f"detaudit: refusing to update standards on a CI system ({variable} is set): a gate must not rewrite "
            "itself; pass --detaudit-force-update to do it anyway"
        )
    state.claims, state.own_claims = Path(tempfile.mkdtemp(prefix="detaudit-claims-")), True


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist: each worker claims standards in the controller's folder."""
    state = node.config.stash.get(_STATE, None)
    if state is not None and state.claims is not None:
        node.workerinput[_CLAIMS_KEY] = str(state.claims)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist: collect what the worker updated and found, for the summary."""
    state = node.config.stash.get(_STATE, None)
    if state is not None:
        state.events.extend(getattr(node, "workeroutput", {}).get(_EVENTS_KEY, []))


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is not None and state.own_claims and state.claims is not None:
        shutil.rmtree(state.claims, ignore_errors=True)


def _fail(message: str) -> NoReturn:
    """Fail the test with ``message`` only: no traceback, and no chain of the error it replaces."""
    raise pytest.fail.Exception(message, pytrace=False) from None


class DetauditChecker:
    """What the ``detaudit`` fixture gives a test."""

    def __init__(self, item: pytest.Item) -> None:
        self.item = item
        self.config = item.config
        self.mode = _update_mode(self.config)
        self.runs: int = self.config.getoption("--detaudit-runs")
        self.state = self.config.stash[_STATE]

    # -- where things are ---------------------------------------------------------------

    @property
    def test_dir(self) -> Path:
        return Path(self.item.path).parent

    def standard_path(self, standard: str | Path | None = None) -> Path:
        """The standard a test checks: ``standard`` from the test file's folder, or by default
        ``<test folder>/<detaudit_standards_dir>/<test module>/<test name>.json``."""
        if standard is not None:
            return self.test_dir / Path(standard)  # an absolute path stays as it is
        folder = Path(self.config.getini(STANDARDS_DIR_INI))
        return self.test_dir / folder / Path(self.item.path).stem / f"{_UNSAFE_NAME.sub('_', self.item.name)}.json"

    def _shown(self, path: Path) -> str:
        """A path as reports and standards give it: relative to the project where it is inside."""
        return _project_relative(self.config, path) or str(path)

    # -- checks ---------------------------------------------------------------------------

    def verify_metrics(self, metrics: str | Path, standard: str | Path | None = None, *,
                       step_key: str | None = None) -> None:
        """Fail the test unless the metrics file matches the standard exactly (any standard format)."""
        path = self.standard_path(standard)
        with _one_line_failures():
            self._verify_metrics(Path(metrics), path, step_key)

    def verify_card(self, card: str | Path) -> None:
        """Run the card once and fail the test unless it matches the card's standard exactly."""
        path = Path(self.config.rootpath) / Path(card)
        with _one_line_failures():
            self._verify_card(path)

    def _verify_metrics(self, metrics: Path, standard: Path, step_key: str | None) -> None:
        from detaudit.flows.verify import verify

        self._claim(standard)
        exists = standard.exists()
        if self.mode == UPDATE_ALL or (self.mode == UPDATE_FAILED and not exists):
            self._write_from_metrics(metrics, standard, step_key)
            return
        if not exists:
            _fail(f"detaudit: no standard {self._shown(standard)} (run pytest with --detaudit-update to write it)")
        result = verify(metrics=metrics, standard=standard, step_key=step_key)
        if result.ok and not (self.mode == UPDATE_FAILED and _adds_series(result)):
            self._note_new_series(result)
            return
        if self.mode == UPDATE_FAILED:
            self._write_from_metrics(metrics, standard, step_key)
            return
        _fail(_failure_text(result, self._shown(standard)))

    def _verify_card(self, card: Path) -> None:
        from detaudit.flows.verify import verify

        self._claim(card)
        if self.mode == UPDATE_ALL:
            self._record(card)
            return
        try:
            result = verify(card)
        except InputError:  # e.g. no standard for this card yet
            if self.mode == UPDATE_FAILED:
                self._record(card)
                return
            raise
        if result.ok and not (self.mode == UPDATE_FAILED and _adds_series(result)):
            self._note_new_series(result)
            return
        if self.mode == UPDATE_FAILED and result.status in ("failed", "not-verified", "empty-standard", "passed"):
            self._record(card)
            return
        _fail(_failure_text(result, self._shown(result.standard_path)))

    # -- updates ------------------------------------------------------------------------------

    def _claim(self, target: Path) -> None:
        """Under an update option a standard (or card) belongs to one test of the session: a second
        test checking it fails, naming both (they would overwrite each other)."""
        if self.state.claims is None:
            return
        me = self.item.nodeid
        key = self.state.claims / hashlib.sha256(str(target.resolve()).encode()).hexdigest()
        tmp = key.with_name(f"{key.name}.{os.getpid()}.tmp")
        tmp.write_text(me, encoding="utf-8")
        try:
            os.link(tmp, key)  # atomic: exactly one test creates the claim, with its name in it
            holder = me
        except FileExistsError:
            holder = key.read_text(encoding="utf-8")
        finally:
            tmp.unlink()
        if holder != me:
            _fail(f"detaudit: {self._shown(target)} is checked by two tests under an update option: {holder} and "
                  f"{me}; give each test its own standard (they would overwrite each other)")

    def _event(self, kind: str, standard: Path, detail: str = "") -> None:
        self.state.events.append({"kind": kind, "standard": self._shown(standard), "test": self.item.nodeid,
                                  "detail": detail})

    def _note_new_series(self, result: Any) -> None:
        """Series the run has and the standard lacks: they pass unchecked, so the summary says so."""
        if result.extra_series:
            how = ("pytest --detaudit-update adds them" if _adds_series(result)
                   else f"a {result.standard.format} golden keeps the series it has")
            self._event("new-series", Path(result.standard_path), f"{', '.join(sorted(result.extra_series))} ({how})")

    def _record(self, card: Path) -> None:
        from detaudit.data.card import load_card, standard_path
        from detaudit.flows.record import record
        from detaudit.run.plan import environment_for, resolve_runner

        loaded = load_card(card)
        # The class record will use: probed with the card's environment, as record probes it.
        path = standard_path(loaded, resolve_runner(loaded, environment_for(loaded)))
        result = record(card, runs=self.runs, update=path.exists())
        if not result.ok:
            _fail(f"detaudit: re-recording {self._shown(card)} failed: {result.status} (the runs do not agree)")
        assert result.standard_path is not None  # record() writes by default, and an ok record wrote its standard
        self._event("updated", Path(result.standard_path), f"card {self._shown(card)}, {self.runs} agreeing runs")

    def _write_from_metrics(self, metrics: Path, standard: Path, step_key: str | None) -> None:
        from detaudit.data.compare import SeriesData
        from detaudit.data.metrics import read_metrics
        from detaudit.fileio import write_atomic
        from detaudit.standards.formats import load_any, render_as

        old = load_any(standard) if standard.exists() else None
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a torn last line is no standard
            run = read_metrics(metrics, default_step_key=step_key)
        series = {name: SeriesData.from_run(run, s) for name, s in run.series.items()}
        # The metrics file is not named: it lies in the test's tmp_path, a new folder every run.
        recorded = {"by": "pytest --detaudit-update", "test": self.item.nodeid}
        new, change = _updated_standard(old, series, name=standard.stem, recorded=recorded,
                                        excluded={"series": run.excluded})
        if not new.series:
            _fail(f"detaudit: {metrics} has no series to record in {self._shown(standard)}")
        text = render_as(new, new.format, target=standard, previous=old)  # the replaced file's byte layout kept
        if old is not None and standard.read_text(encoding="utf-8") == text:
            self._event("unchanged", standard, change)
            return
        write_atomic(standard, text, overwrite=True)
        self._event("updated", standard, f"from {self._shown(metrics)}" + (f"; {change}" if change else ""))


def _updated_standard(old: Any, series: dict[str, Any], *, name: str, recorded: dict[str, str],
                      excluded: dict[str, Any]) -> tuple[Any, str]:
    """The standard to write from a run's series, and what changed in its series.

    A new standard, or one in our formats, holds every series of the run. A sampled golden
    (Megatron-LM, NeMo-RL, TorchTitan) keeps its format, its series, its steps and headers: the
    run is taken at the golden's steps (as verify compares it); series it lacks are reported,
    not added (which steps to sample is the golden's owners' choice).
    """
    from detaudit.standards.formats import comparison_of
    from detaudit.standards.standard import Standard

    if old is None:
        return Standard(series=series, name=name, recorded=recorded, excluded=excluded), ""
    added = sorted(set(series) - set(old.series))
    removed = sorted(set(old.series) - set(series))
    notes = []
    sample_run = comparison_of(old).sample_run
    if sample_run is not None:
        kept = {n: sample_run(old.series[n], old.native_series(n), series[n]) for n in old.series if n in series}
        new = dataclasses.replace(old, series=kept)
        if added:
            notes.append(f"not added to this {old.format} golden (it keeps the series it has): {', '.join(added)}")
    else:
        new = dataclasses.replace(old, series=series, recorded=recorded, excluded=excluded, runner={}, dropped={})
        if added:
            notes.append(f"new series: {', '.join(added)}")
    if removed:
        notes.append(f"series no longer in the run, removed: {', '.join(removed)}")
    return new, "; ".join(notes)


def _adds_series(result: Any) -> bool:
    """The run has series its standard lacks, and an update would add them (not to a sampled golden)."""
    from detaudit.standards.formats import comparison_of

    return (bool(result.extra_series) and result.standard is not None
            and comparison_of(result.standard).sample_run is None)


def _project_relative(config: pytest.Config, path: Path) -> str | None:
    """``path`` relative to the project root (posix), or None when it lies outside."""
    try:
        return Path(os.path.abspath(path)).relative_to(Path(config.rootpath).resolve()).as_posix()
    except ValueError:
        return None


@contextmanager
def _one_line_failures() -> Iterator[None]:
    """Bad input (a malformed metrics line, an unreadable standard) fails the test with the one
    line the CLI would print, not a traceback through detaudit."""
    reason = None
    try:
        yield
    except (InputError, Warning) as exc:
        reason = str(exc)
    if reason is not None:  # failed outside the except block: no "during handling" chain in the report
        _fail(f"detaudit: {reason}")


def _failure_text(result: Any, standard: str) -> str:
    from detaudit.render.diff import divergence_line
    from detaudit.render.suite import status_detail
    from detaudit.results import VerifyStatus

    lines = [f"detaudit: {VerifyStatus(result.status).label} against {standard}"]
    if result.status == "failed":
        lines[0] += f": {len(result.failures)} of {result.compared} series differ"
        lines += ["  " + divergence_line(name, d) for name, d in result.failures]
    else:
        lines[0] += f": {status_detail(result.status, result)}"
    lines.append("(pytest --detaudit-update re-records what failed)")
    return "\n".join(lines)


@pytest.fixture
def detaudit(request: pytest.FixtureRequest) -> DetauditChecker:
    """Verify metrics files or cards against their standards inside a test."""
    return DetauditChecker(request.node)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A ``@pytest.mark.detaudit`` test: after its body passed, verify its card or metrics file."""
    result = yield  # the body's own failure propagates first
    marker = item.get_closest_marker("detaudit")
    if marker is not None:
        checker = DetauditChecker(item)
        card, metrics, standard = (marker.kwargs.get(k) for k in ("card", "metrics", "standard"))
        if card is not None:
            checker.verify_card(card)
        elif metrics is not None:
            checker.verify_metrics(metrics, standard, step_key=marker.kwargs.get("step_key"))
        else:
            _fail("@pytest.mark.detaudit needs card=... or metrics=... (standard=... optional)")
    return result


_SUMMARY = {"updated": "re-recorded", "unchanged": "unchanged (same bytes, not rewritten)",
            "new-series": "new series, not in the standard, unchecked"}


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is None or not state.events or hasattr(config, "workerinput"):
        return
    events = sorted(state.events, key=lambda e: (e["kind"] != "updated", e["kind"], e["standard"], e["test"]))
    if any(e["kind"] == "updated" for e in events):
        terminalreporter.section("detaudit standards updated")
    else:
        terminalreporter.section("detaudit standards")
    for e in events:
        detail = f" ({e['detail']})" if e["detail"] else ""
        if e["kind"] == "new-series":
            terminalreporter.write_line(f"{_SUMMARY['new-series']}: {e['standard']}: {e['detail']} [{e['test']}]")
        else:
            terminalreporter.write_line(f"{_SUMMARY[e['kind']]} {e['standard']}{detail}")
