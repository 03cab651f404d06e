"""Write a command's CI reports: ``--junit-xml FILE`` and, where ``GITHUB_STEP_SUMMARY`` is set,
the job summary. Called on every outcome, bad input and interruption included, so that a CI
page always shows what happened.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from detaudit.ci.cases import Case, error_case
from detaudit.ci.junit import write_junit
from detaudit.ci.summary import append_step_summary, summary_markdown
from detaudit.errors import InputError


def write_ci_reports(junit_xml: Path | None, title: str, cases: list[Case], verdict: str, detail: str = "",
                     env: Mapping[str, str] | None = None) -> list[str]:
    """Write both reports; returns warnings to show (a name XML cannot carry, a summary that
    cannot be written). An unwritable ``--junit-xml`` raises ``InputError``: it was asked for."""
    warnings = write_junit(junit_xml, title, cases) if junit_xml is not None else []
    summary_warning = append_step_summary(summary_markdown(title, cases, verdict, detail), env)
    return warnings + ([summary_warning] if summary_warning else [])


def write_error_reports(junit_xml: Path | None, title: str, classname: str, name: str, message: str, *,
                        verdict: str = "ERROR", env: Mapping[str, str] | None = None) -> list[str]:
    """The reports of a command that ended without a verdict (bad input, interrupted): one
    JUnit ``<error>`` case holding the one-line reason. Never raises: the command is already
    failing, and its own error is the one to show; a report that cannot be written is a warning."""
    try:
        return write_ci_reports(junit_xml, title, [error_case(classname, name, message)], verdict, message, env)
    except InputError as exc:
        return [f"{exc} (the JUnit report of this error)"]
