"""pytest plugin (``pytest11`` entry point ``detaudit``): check determinism standards inside tests.

Two ways in::

    def test_training_reproduces(detaudit, tmp_path):
        metrics = train(tmp_path)                                   # writes a metrics JSONL
        detaudit.verify_metrics(metrics, "standards/train.json")    # exact, or the test fails

    @pytest.mark.detaudit(card="recipes/tiny.toml")                 # runs the card, verifies it
    def test_tiny_recipe():
        pass

Options:

``--detaudit-update``      re-record only the standards whose check failed (or that are missing)
``--detaudit-update-all``  re-record every standard a test checks
``--detaudit-force-update`` allow either when the ``CI`` variable is set (refused otherwise: a
                           CI job must not rewrite its own gate)

A card is re-recorded with ``record`` (``--detaudit-runs`` runs that must agree, default 2);
a metrics file the test produced is written as the standard (it is the test's own output),
in the existing standard's format. Every update is listed in the terminal summary.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from detaudit.errors import InputError

UPDATE_FAILED, UPDATE_ALL = "failed", "all"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("detaudit", "determinism standards (detaudit)")
    group.addoption("--detaudit-update", action="store_true", help="Re-record only the standards whose check failed.")
    group.addoption("--detaudit-update-all", action="store_true", help="Re-record every standard a test checks.")
    group.addoption("--detaudit-force-update", action="store_true", help="Allow updates when the CI variable is set.")
    group.addoption("--detaudit-runs", type=int, default=2, help="Runs that must agree when re-recording a card (default 2).")


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "detaudit(card=None, metrics=None, standard=None): verify a card, or a metrics file the test "
        "wrote, against its detaudit standard after the test body",
    )
    update = config.getoption("--detaudit-update") or config.getoption("--detaudit-update-all")
    if update and _in_ci() and not config.getoption("--detaudit-force-update"):
        raise pytest.UsageError(
            "detaudit: refusing to update standards in CI (the CI variable is set): a gate must not rewrite itself; "
            "pass --detaudit-force-update to do it anyway"
        )
    config.stash[_STATE] = _State()


@dataclass
class _State:
    updated: list[str] = field(default_factory=list)


_STATE = pytest.StashKey[_State]()


class DetauditChecker:
    """What the ``detaudit`` fixture gives a test."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.mode: str | None = (
            UPDATE_ALL if config.getoption("--detaudit-update-all")
            else UPDATE_FAILED if config.getoption("--detaudit-update") else None
        )
        self.runs: int = config.getoption("--detaudit-runs")

    def _updated(self, what: str) -> None:
        self.config.stash[_STATE].updated.append(what)

    def verify_metrics(self, metrics: str | Path, standard: str | Path, *, step_key: str | None = None) -> None:
        """Fail the test unless the metrics file matches the standard exactly (any standard format)."""
        from detaudit.flows.verify import verify

        standard = Path(standard)
        if self.mode == UPDATE_ALL or (self.mode == UPDATE_FAILED and not standard.exists()):
            self._write_from_metrics(Path(metrics), standard, step_key)
            return
        if not standard.exists():
            pytest.fail(f"detaudit: no standard {standard} (run pytest with --detaudit-update to write it)", pytrace=False)
        result = verify(metrics=metrics, standard=standard, step_key=step_key)
        if result.ok:
            return
        if self.mode == UPDATE_FAILED:
            self._write_from_metrics(Path(metrics), standard, step_key)
            return
        pytest.fail(_failure_text(result), pytrace=False)

    def verify_card(self, card: str | Path) -> None:
        """Run the card once and fail the test unless it matches the card's standard exactly."""
        from detaudit.flows.verify import verify

        if self.mode == UPDATE_ALL:
            self._record(Path(card))
            return
        try:
            result = verify(card)
        except InputError as exc:  # e.g. no standard for this card yet
            if self.mode == UPDATE_FAILED:
                self._record(Path(card))
                return
            pytest.fail(f"detaudit: {exc}", pytrace=False)
        if result.ok:
            return
        if self.mode == UPDATE_FAILED and result.status in ("failed", "not-verified", "empty-standard"):
            self._record(Path(card))
            return
        pytest.fail(_failure_text(result), pytrace=False)

    def _record(self, card: Path) -> None:
        from detaudit.data.card import load_card, standard_path
        from detaudit.flows.record import record
        from detaudit.run.plan import environment_for, resolve_runner

        loaded = load_card(card)
        # The class record will use: probed with the card's environment, as record probes it.
        path = standard_path(loaded, resolve_runner(loaded, environment_for(loaded)))
        result = record(card, runs=self.runs, update=path.exists())
        if not result.ok:
            pytest.fail(f"detaudit: re-recording {card} failed: {result.status} (the runs do not agree)", pytrace=False)
        self._updated(f"{result.standard_path} (card {card}, {self.runs} agreeing runs)")

    def _write_from_metrics(self, metrics: Path, standard: Path, step_key: str | None) -> None:
        from detaudit.data.compare import SeriesData
        from detaudit.data.metrics import read_metrics
        from detaudit.standards.formats import load_any, write_as
        from detaudit.standards.standard import Standard

        fmt = load_any(standard).format if standard.exists() else "detaudit"
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a torn last line is no standard
            run = read_metrics(metrics, default_step_key=step_key)
        series = {name: SeriesData.from_run(run, s) for name, s in run.series.items()}
        if not series:
            pytest.fail(f"detaudit: {metrics} has no series to record", pytrace=False)
        new = Standard(series=series, name=standard.stem, recorded={"metrics": str(metrics), "by": "pytest --detaudit-update"},
                       excluded={"series": run.excluded})
        write_as(standard, new, fmt, overwrite=True)
        self._updated(f"{standard} (from {metrics})")


def _failure_text(result: Any) -> str:
    from detaudit.render.diff import divergence_line
    from detaudit.render.suite import status_detail
    from detaudit.results import VerifyStatus

    lines = [f"detaudit: {VerifyStatus(result.status).label} against {result.standard_path}"]
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
    return DetauditChecker(request.config)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """A ``@pytest.mark.detaudit`` test: after its body passed, verify its card or metrics file."""
    result = yield  # the body's own failure propagates first
    marker = item.get_closest_marker("detaudit")
    if marker is not None:
        checker = DetauditChecker(item.config)
        card, metrics, standard = (marker.kwargs.get(k) for k in ("card", "metrics", "standard"))
        if card is not None:
            checker.verify_card(card)
        elif metrics is not None and standard is not None:
            checker.verify_metrics(metrics, standard, step_key=marker.kwargs.get("step_key"))
        else:
            pytest.fail("@pytest.mark.detaudit needs card=..., or metrics=... and standard=...", pytrace=False)
    return result


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is None or not state.updated:
        return
    terminalreporter.section("detaudit standards updated")
    for line in state.updated:
        terminalreporter.write_line(f"re-recorded {line}")
