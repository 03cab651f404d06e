"""Write a command's CI reports: ``--junit-xml FILE`` and, where ``GITHUB_STEP_SUMMARY`` is set,
the job summary. Called on every outcome, bad input and interruption included, so that a CI
page always shows what happened; their paths are among the command's outputs (``OutputPaths``),
checked before anything runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detaudit.errors import InputError
from detaudit.fileio import OutputPaths, OutputRefused
from detaudit.render.ci.summary import SUMMARY_VARIABLE, append_step_summary, step_summary_path, summary_markdown

if TYPE_CHECKING:
    from detaudit.render.ci.cases import Case

# The case builders and the XML writer are imported where a report is written: a command that
# only claims its report paths (a scan with none asked for) does not import them.


def claim_ci_paths(paths: OutputPaths, junit_xml: Path | None, summary: Path | None) -> None:
    """The CI reports' files among the command's outputs (checked before anything runs)."""
    paths.writes(junit_xml, "--junit-xml")
    paths.writes(summary, f"the step summary ({SUMMARY_VARIABLE})", append=True)


def emit_ci(result: Any, reports: Any) -> list[str]:
    """The CI reports of a result (``render.emit``'s CI output): ``--junit-xml`` and the step
    summary, for the commands that write them."""
    if not reports.ci or (reports.junit_xml is None and reports.summary is None):  # nothing to write
        return []
    from detaudit.render.ci.cases import ci_report

    cases, verdict, detail = ci_report(result, reports.subject)
    return write_ci_reports(reports.junit_xml, reports.title, cases, verdict, detail, reports.summary)


def write_ci_reports(junit_xml: Path | None, title: str, cases: list[Case], verdict: str, detail: str = "",
                     summary: Path | None = None) -> list[str]:
    """Write both reports; returns warnings to show (a name XML cannot carry, a summary that
    cannot be written). An unwritable ``--junit-xml`` raises ``InputError``: it was asked for."""
    warnings: list[str] = []
    if junit_xml is not None:  # the XML writer (xml.etree: ~10 ms) only where a JUnit file is asked for
        from detaudit.render.ci.junit import write_junit

        warnings = write_junit(junit_xml, title, cases)
    summary_warning = append_step_summary(summary_markdown(title, cases, verdict, detail), summary)
    return warnings + ([summary_warning] if summary_warning else [])


def write_error_reports(junit_xml: Path | None, title: str, classname: str, name: str, message: str, *,
                        verdict: str = "ERROR", error: BaseException | None = None,
                        other_paths: Iterable[Path] = ()) -> list[str]:
    """The reports of a command that ended without a verdict (bad input, interrupted): one
    JUnit ``<error>`` case holding the one-line reason. Never raises: the command is already
    failing, and its own error is the one to show; a report that cannot be written is a warning.

    The error may have come before the command checked its paths (a bad option): each report
    path is checked here as ``OutputPaths`` would, against ``other_paths`` (the other paths the
    command was given, as far as they were parsed), and one that fails is not written (a warning
    says so); nor is an existing file that is not a JUnit report (an input the failed parse did not
    name yet: the card in `record CARD --junit-xml CARD --runs 1`). A path the command itself
    refused (``OutputRefused``) is not written either."""
    refused = error.refused if isinstance(error, OutputRefused) else ()
    others = list(other_paths)
    warnings: list[str] = []
    usable: list[Path | None] = []
    for path, what, append in ((junit_xml, "--junit-xml", False), (step_summary_path(), SUMMARY_VARIABLE, True)):
        if path is None or any(_same_file(path, r) for r in refused):
            usable.append(None)
            continue
        check = OutputPaths()
        for other in others:
            check.reads(other, "a file this command was given")
        check.writes(path, what, append=append)
        try:
            check.check()
        except OutputRefused as exc:
            warnings.append(f"{exc} (the report of this error: not written)")
            usable.append(None)
            continue
        if not append and not _absent_or_junit(path):  # an option that failed to parse leaves inputs unknown
            warnings.append(f"{path}: exists and is not a JUnit report; the report of this error is not written "
                            "over it")
            usable.append(None)
            continue
        usable.append(path)
    from detaudit.render.ci.cases import error_case

    try:
        return warnings + write_ci_reports(usable[0], title, [error_case(classname, name, message)], verdict, message,
                                           usable[1])
    except InputError as exc:
        return warnings + [f"{exc} (the JUnit report of this error)"]


def _absent_or_junit(path: Path) -> bool:
    """No file there, or one that begins as the JUnit reports written here do."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(256)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return head.startswith(b"<?xml") and b"<testsuites" in head


def _same_file(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)
