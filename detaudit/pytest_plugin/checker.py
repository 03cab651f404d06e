"""The ``detaudit`` fixture's object: checks a test's metrics file or card against its standard, and
under an update option re-records it through the record flow (``detaudit.flows.record``)."""

from __future__ import annotations

import hashlib
import os
import shutil
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import pytest

from detaudit.errors import InputError, UsageError
from detaudit.pytest_plugin.session import (
    COLLECT_OPTION,
    STANDARDS_DIR_INI,
    STATE,
    RunFailed,
    collect_runs,
    copy_collected,
    probe_here,
)

UPDATE_FAILED, UPDATE_ALL = "failed", "all"
_CALLS = pytest.StashKey[int]()  # checks made so far by one test (collect mode names its copies by them)


def update_mode(config: pytest.Config) -> str | None:
    if config.getoption("--detaudit-update-all"):
        return UPDATE_ALL
    return UPDATE_FAILED if config.getoption("--detaudit-update") else None


def fail(message: str) -> NoReturn:
    """Fail the test with ``message`` only: no traceback, and no chain of the error it replaces."""
    raise pytest.fail.Exception(message, pytrace=False) from None


class DetauditChecker:
    """What the ``detaudit`` fixture gives a test."""

    def __init__(self, item: pytest.Item) -> None:
        self.item = item
        self.config = item.config
        self.mode = update_mode(self.config)
        self.runs: int = self.config.getoption("--detaudit-runs")
        self.state = self.config.stash[STATE]
        collect = self.config.getoption(COLLECT_OPTION)
        self.collect_to = Path(collect) if collect else None

    # -- where things are ---------------------------------------------------------------

    @property
    def test_dir(self) -> Path:
        return Path(self.item.path).parent

    def standard_path(self, standard: str | Path | None = None) -> Path:
        """The standard a test checks: ``standard`` from the test file's folder, or by default
        ``<test folder>/<detaudit_standards_dir>/<test module>/<test name>.json`` (a long test
        name cut, with a hash of the whole)."""
        from detaudit.standards.store import standard_of_test

        if standard is not None:
            return self.test_dir / Path(standard)  # an absolute path stays as it is
        return standard_of_test(Path(self.item.path), self.item.name, self.config.getini(STANDARDS_DIR_INI))

    def _shown(self, path: Path) -> str:
        """A path as reports and standards give it: relative to the project where it is inside."""
        return project_relative(self.config, path) or str(path)

    # -- checks ---------------------------------------------------------------------------

    def verify_metrics(self, metrics: str | Path, standard: str | Path | None = None, *,
                       step_key: str | None = None, card: str | Path | None = None) -> None:
        """Fail the test unless the metrics file matches the standard exactly (any standard format).
        ``card``: the standard is the card's for this runner class (its step_key and rename apply)."""
        call = self._next_call()
        if self.collect_to is not None:  # a fresh run for a standard from agreeing runs: hand the file over
            copy_collected(self.collect_to, call, Path(metrics))
            return
        with one_line_failures():
            if card is not None:
                self._verify_with_card(Path(metrics), self._card(card), standard, step_key)
            else:
                self._verify_metrics(Path(metrics), self.standard_path(standard), step_key, call)

    def verify_card(self, card: str | Path, *, standard: str | Path | None = None, step_key: str | None = None) -> None:
        """Run the card once and fail the test unless it matches the card's standard exactly."""
        self._next_call()
        if self.collect_to is not None:
            return  # a card is recorded by `detaudit record`, in fresh runs of its own
        with one_line_failures():
            self._verify_card(self._card(card), standard, step_key)

    def _card(self, card: str | Path) -> Path:
        return Path(self.config.rootpath) / Path(card)

    def _next_call(self) -> int:
        call = self.item.stash.get(_CALLS, 0) + 1
        self.item.stash[_CALLS] = call
        return call

    def _verify_metrics(self, metrics: Path, standard: Path, step_key: str | None, call: int) -> None:
        from detaudit.flows.verify import verify

        self._claim(standard)
        self._event("checked", standard)
        exists = standard.exists()
        if self.mode == UPDATE_ALL or (self.mode == UPDATE_FAILED and not exists):
            self._record_metrics(metrics, standard, step_key, call)
            return
        if not exists:
            fail(f"detaudit: no standard {self._shown(standard)} (run pytest with --detaudit-update to write it)")
        old = _runner_class_of(standard)
        here = probe_here(self.state)[1] if old is not None else None  # a standard naming no class: nothing to probe
        result = verify(metrics=metrics, standard=standard, step_key=step_key, runner_class=here)
        if result.ok and not (self.mode == UPDATE_FAILED and adds_series(result)):
            self._note_new_series(result)
            return
        if self.mode == UPDATE_FAILED:
            self._record_metrics(metrics, standard, step_key, call)
            return
        self._write_obtained(result, standard, metrics)
        fail(failure_text(result, self._shown(standard)))

    def _verify_with_card(self, metrics: Path, card: Path, standard: str | Path | None, step_key: str | None) -> None:
        """A metrics file the test wrote, against its card's standard: nothing runs."""
        from detaudit.flows.verify import verify

        self._claim(card)
        path = self.test_dir / Path(standard) if standard is not None else None
        if self.mode is not None:
            fail(f"detaudit: {self._shown(card)} with metrics=: a card's standard is recorded from its own runs "
                 "(`detaudit record CARD`, or the test's card= alone under --detaudit-update)")
        result = verify(card, metrics=metrics, standard=path, step_key=step_key)
        self._event("checked", Path(result.standard_path))
        if result.ok:
            self._note_new_series(result)
            return
        self._write_obtained(result, Path(result.standard_path), metrics)
        fail(failure_text(result, self._shown(Path(result.standard_path))))

    def _verify_card(self, card: Path, standard: str | Path | None, step_key: str | None) -> None:
        from detaudit.flows.verify import verify

        self._claim(card)
        path = self.test_dir / Path(standard) if standard is not None else None
        if self.mode == UPDATE_ALL and path is None:
            self._record(card)
            return
        try:
            result = verify(card, standard=path, step_key=step_key)
        except InputError:  # e.g. no standard for this card yet
            if self.mode == UPDATE_FAILED and path is None:
                self._record(card)
                return
            raise
        self._event("checked", Path(result.standard_path))
        if result.ok and not (self.mode == UPDATE_FAILED and adds_series(result)):
            self._note_new_series(result)
            return
        if self.mode == UPDATE_FAILED and path is None and result.status in ("failed", "not-verified",
                                                                             "empty-standard", "passed"):
            self._record(card)
            return
        if result.metrics_path is not None:
            self._write_obtained(result, Path(result.standard_path), result.metrics_path)
        fail(failure_text(result, self._shown(result.standard_path)))

    # -- what a failure leaves ---------------------------------------------------------------

    def _write_obtained(self, result: Any, standard: Path, metrics: Path) -> None:
        """``<standard>.obtained.jsonl`` (the run's metrics) beside the standard, and with
        --detaudit-html the page ``<standard>.obtained.html``: what the failure is about, to look at."""
        from detaudit.fileio import OutputPaths, write_atomic
        from detaudit.standards.store import obtained_path

        if not metrics.is_file() or not standard.parent.is_dir():
            return
        target = obtained_path(standard, ".jsonl")
        html = bool(self.config.getoption("--detaudit-html"))
        page_path = obtained_path(standard, ".html")
        # As every command's outputs: never over what the check read, a device, a FIFO or a folder.
        outputs = OutputPaths()
        outputs.reads(metrics, "the test's metrics")
        outputs.reads(standard, "the standard")
        outputs.writes(target, "the obtained metrics")
        outputs.writes(page_path if html else None, "the obtained page")
        try:
            outputs.check()
            write_atomic(target, metrics.read_text(encoding="utf-8", errors="surrogateescape"), overwrite=True)
        except (InputError, UsageError, OSError) as exc:
            self._event("obtained-failed", target, str(exc))
            return
        self._event("obtained", target)
        if html:
            from detaudit.render.html import write_html
            from detaudit.render.html.verify_view import verify_page

            try:
                write_html(page_path, verify_page(result, None, title=f"{self.item.nodeid}: FAILED"), overwrite=True)
            except (InputError, OSError, ImportError) as exc:
                self._event("obtained-failed", page_path, str(exc))
            else:
                self._event("obtained", page_path)

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
            fail(f"detaudit: {self._shown(target)} is checked by two tests under an update option: {holder} and "
                 f"{me}; give each test its own standard (they would overwrite each other)")

    def _event(self, kind: str, standard: Path, detail: str = "") -> None:
        shown = self._shown(standard)
        self.state.events.append({"kind": kind, "standard": shown, "path": os.path.abspath(standard),
                                  "test": self.item.nodeid, "detail": detail})

    def _note_new_series(self, result: Any) -> None:
        """Series the run has and the standard lacks: they pass unchecked, so the summary says so."""
        if result.extra_series:
            how = ("pytest --detaudit-update adds them" if adds_series(result)
                   else f"a {result.standard.format} golden keeps the series it has")
            self._event("new-series", Path(result.standard_path), f"{', '.join(sorted(result.extra_series))} ({how})")

    def _record(self, card: Path) -> None:
        from detaudit.flows.record import record

        result = record(card, runs=self.runs, update=True)  # an update option is the explicit flag
        if not result.ok:
            fail(f"detaudit: re-recording {self._shown(card)} failed: {result.status} (the runs do not agree)")
        assert result.standard_path is not None  # record() writes by default, and an ok record wrote its standard
        self._event("updated", Path(result.standard_path), f"card {self._shown(card)}, {self.runs} agreeing runs")

    def _record_metrics(self, metrics: Path, standard: Path, step_key: str | None, call: int) -> None:
        """The standard from this run and ``--detaudit-runs`` - 1 fresh runs of the test, through
        the record flow: written only if all agree, with the runner class and provenance of here."""
        from detaudit.flows.record import record_metrics
        from detaudit.standards.formats import comparison_of, load_any

        old = load_any(standard) if standard.exists() else None
        try:
            more = collect_runs(self.config, self.item, self.runs - 1, call) if self.runs > 1 else []
        except RunFailed as exc:
            fail(f"detaudit: {exc}")
        info, here = probe_here(self.state)
        files = [metrics, *more]
        # The metrics files are not named: they lie in tmp_path, a new folder every run.
        recorded = {"by": "pytest --detaudit-update", "test": self.item.nodeid, "runs": len(files)}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # a torn last line is no standard
                result = record_metrics(files, out=standard, update=True, step_key=step_key, runner_class=here,
                                        environment=info, name=standard.stem, recorded=recorded, keep_unchanged=True,
                                        min_runs=1)
        finally:
            if more:
                shutil.rmtree(more[0].parent.parent, ignore_errors=True)
        if not result.ok:
            from detaudit.render.diff import divergence_line
            from detaudit.render.escapes import one_line as visible

            report = result.report
            lines = [f"detaudit: {len(files)} runs of {self.item.nodeid} do not agree ({result.status}); "
                     f"{self._shown(standard)} not written"]
            if report is not None:
                lines += ["  " + visible(divergence_line(m.series, m.first, left="run 1", right="another run"))
                          for m in report.mismatched[:10]]
            fail("\n".join(lines))
        run_series = set(result.report.compared) if result.report is not None else set()
        notes = []
        if old is not None:
            added = sorted(run_series - set(old.series))
            removed = sorted(set(old.series) - run_series)
            if added:
                notes.append(f"not added to this {old.format} golden (it keeps the series it has): {', '.join(added)}"
                             if comparison_of(old).sample_run is not None else f"new series: {', '.join(added)}")
            if removed:
                notes.append(f"series no longer in the run, removed: {', '.join(removed)}")
        change = "; ".join(notes)
        if result.unchanged:
            self._event("unchanged", standard, change)
            return
        self._event("updated", standard, f"from {self._shown(metrics)}, {len(files)} agreeing runs"
                    + (f"; {change}" if change else ""))


def _runner_class_of(standard: Path) -> Any:
    from detaudit.standards.formats import load_any

    return load_any(standard).runner_class


def adds_series(result: Any) -> bool:
    """The run has series its standard lacks, and an update would add them (not to a sampled golden)."""
    from detaudit.standards.formats import comparison_of

    return (bool(result.extra_series) and result.standard is not None
            and comparison_of(result.standard).sample_run is None)


def project_relative(config: pytest.Config, path: Path) -> str | None:
    """``path`` relative to the project root (posix), or None when it lies outside."""
    try:
        return Path(os.path.abspath(path)).relative_to(Path(config.rootpath).resolve()).as_posix()
    except ValueError:
        return None


@contextmanager
def one_line_failures() -> Iterator[None]:
    """Bad input (a malformed metrics line, an unreadable standard) fails the test with the one
    line the CLI would print, not a traceback through detaudit."""
    reason = None
    try:
        yield
    except (InputError, Warning) as exc:
        reason = str(exc)
    if reason is not None:  # failed outside the except block: no "during handling" chain in the report
        fail(f"detaudit: {reason}")


def failure_text(result: Any, standard: str) -> str:
    from detaudit.flows.results import VerifyStatus
    from detaudit.render.diff import divergence_line
    from detaudit.render.escapes import one_line as visible
    from detaudit.render.suite import status_detail

    lines = [f"detaudit: {VerifyStatus(result.status).label} against {standard}"]
    if result.status == "failed":
        lines[0] += f": {len(result.failures)} of {result.compared} series differ"
        lines += ["  " + visible(divergence_line(name, d)) for name, d in result.failures]
    else:
        lines[0] += f": {status_detail(result.status, result)}"
    if result.runner_unchecked:
        lines.append(f"  runner class not checked: {result.runner_unchecked}")
    lines.append("(pytest --detaudit-update re-records what failed)")
    return "\n".join(lines)
