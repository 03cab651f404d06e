"""CI rows (``Case``) from what record, verify and ``verify --suite`` return, and the verdict
line that heads their reports (``ci_report``).

One case per series for a single card (so a CI page lists each series), one per card for
a suite. A failing case's text gives the first divergences, as the terminal report does. A
series the comparison left out (``verify --exclude``, a format's own rule) is a skipped case
with the reason, never a passing one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detaudit.flows.results import RecordResult, SuiteResult, VerifyResult, VerifyStatus
from detaudit.render.diff import divergence_line
from detaudit.render.suite import outcome_detail, status_detail, suite_passed_text

FIRST_DIVERGENCES = 10  # failing series listed in a suite case's text
# NOT VERIFIED on a runner class without a standard (a new CI runner): the way forward.
NOT_VERIFIED_HINT = (
    "record a standard on this runner class (detaudit record CARD; in CI, the workflow's record job uploads it "
    "as an artifact), review it (detaudit standard show) and commit it; or, where the team chooses it, "
    "verify --allow-other-runner reports SKIPPED instead"
)


@dataclass
class Case:
    """One test case. ``status``: passed, failed, skipped, error.

    ``approximate``: passed only within the card's tolerances; every report shows it as a
    pass marked approximate (never as a failure: the exit code is 0).
    """

    classname: str
    name: str
    status: str
    time_s: float = 0.0
    message: str = ""  # one line
    text: str = ""  # the failure's details: the first divergences
    approximate: bool = False

    @property
    def ok(self) -> bool:
        return self.status in ("passed", "skipped")

    @property
    def skipped(self) -> bool:
        return self.status == "skipped"


def error_case(classname: str, name: str, message: str, time_s: float = 0.0) -> Case:
    """The one case of a command that ended on bad input or an interruption (JUnit ``<error>``)."""
    return Case(classname, name, "error", time_s, message, message)


def _not_per_series(classname: str, result: Any, status_text: str, message: str, time_s: float) -> list[Case]:
    status = "skipped" if result.status == "skipped" else "failed"
    if result.status == VerifyStatus.NOT_VERIFIED:
        message = f"{message}; {NOT_VERIFIED_HINT}"
    return [Case(classname, status_text, status, time_s, message, message)]


def cases_from_verify(result: Any, classname: str, *, time_s: float = 0.0) -> list[Case]:
    """Per series of the standard: passed, or failed with its first divergence."""
    if result.status not in ("passed", "failed", "approximate"):
        detail = status_detail(result.status, result)
        return _not_per_series(classname, result, VerifyStatus(result.status).label, detail, time_s)
    failing = dict(result.failures)
    within = dict(result.approximate)
    left_out = dict(getattr(result, "left_out", {}) or {})
    cases = []
    for name in sorted(result.standard.series):
        if name in left_out:
            cases.append(Case(classname, name, "skipped", 0.0, f"left out of the comparison: {left_out[name]}"))
        elif name in within:
            cases.append(Case(classname, name, "passed", 0.0, f"within tolerance (approximate): {within[name]}",
                              approximate=True))
        elif name in failing:
            line = divergence_line(name, failing[name])
            cases.append(Case(classname, name, "failed", 0.0, line, line))
        elif result.status == VerifyStatus.APPROXIMATE:  # identical, but to another runner class's standard
            cases.append(Case(classname, name, "passed", 0.0, f"identical to the {result.approximate_against} standard "
                              "(approximate: another runner class)", approximate=True))
        else:
            cases.append(Case(classname, name, "passed"))
    if cases:
        cases[0].time_s = time_s
    return cases


def cases_from_suite(suite: Any) -> list[Case]:
    """One case per card: passed, skipped, failed (first divergences in the text), error."""
    cases = []
    classname = f"detaudit.suite.{suite.suite}"
    for o in suite.outcomes:
        status = {"passed": "passed", "approximate": "passed", "skipped": "skipped", "error": "error"}.get(o.status, "failed")
        approximate = o.status == VerifyStatus.APPROXIMATE
        message = f"{VerifyStatus(o.status).label}: {outcome_detail(o, limit=1)}"
        text = ""
        if o.status == "failed":
            lines = [divergence_line(name, d) for name, d in o.result.failures[:FIRST_DIVERGENCES]]
            more = len(o.result.failures) - FIRST_DIVERGENCES
            text = "\n".join(lines + ([f"... and {more} more series"] if more > 0 else []))
        elif status != "passed":
            text = outcome_detail(o)
        if o.status == VerifyStatus.NOT_VERIFIED:
            text = f"{text}\n{NOT_VERIFIED_HINT}"
        shown = message if status != "passed" or approximate else ""
        cases.append(Case(classname, o.card.name, status, o.elapsed, shown, text, approximate=approximate))
    return cases


def cases_from_record(result: Any, classname: str) -> list[Case]:
    """Per compared series: identical across the runs, or failed with where runs first differ."""
    report = result.report
    if report is None:  # a run failed before anything was compared
        bad = [s for s in result.runs if not s.ok]
        message = "; ".join(f"run {s.spec.index + 1} {s.status} (log {s.spec.log_path})" for s in bad) or result.status
        return [Case(classname, "runs", "failed", max((s.elapsed for s in result.runs), default=0.0), message, message)]
    mismatched = {m.series: m for m in report.mismatched}
    cases = []
    for name in report.compared:
        m = mismatched.get(name)
        if m is None:
            cases.append(Case(classname, name, "passed"))
            continue
        runs = ", ".join(f"run {r + 1}" for r in m.disagreeing_runs)
        line = divergence_line(name, m.first, left="run 1", right=f"run {m.first.run + 1}")
        cases.append(Case(classname, name, "failed", 0.0, line, f"{line}\ndiffers in: {runs}"))
    if result.status == "empty":
        cases.append(Case(classname, "standard", "failed", 0.0, "no metric series left to compare"))
    if result.status == "trace-not-ok":  # every series agreed: the failing case is the trace's
        reasons = ", ".join(result.trace_failures)
        cases.append(Case(classname, "trace", "failed", 0.0, f"trace not ok: {reasons}"))
    return cases


def ci_report(result: RecordResult | VerifyResult | SuiteResult, subject: str | None) -> tuple[list[Case], str, str]:
    """The cases of a command's CI reports, its verdict and its one-line detail. ``subject``: the
    card (or, for ``verify --metrics``, the metrics file) as the user named it."""
    stem = Path(subject).stem if subject else "run"
    if isinstance(result, RecordResult):
        cases = cases_from_record(result, f"detaudit.record.{stem}")
        failed = sum(1 for c in cases if not c.ok)
        return cases, str(result.status).upper(), \
            f"{len(cases) - failed} of {len(cases)} series identical across {len(result.runs)} runs"
    if isinstance(result, VerifyResult):
        status = VerifyStatus(result.status)
        cases = cases_from_verify(result, f"detaudit.verify.{stem}", time_s=result.run.elapsed if result.run else 0.0)
        return cases, status.label, f"{status_detail(status, result)} ({result.standard_path})"
    return cases_from_suite(result), {0: "PASSED", 1: "FAILED"}.get(result.exit_code, "ERROR"), suite_passed_text(result)
