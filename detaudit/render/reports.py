"""What a command was asked to write besides its text (``Reports``), checked with its inputs
before anything runs, and the result kinds an output is made from (``Result``). ``render.emit``
writes them; each output module (stdout, CI reports, the page) reads ``Reports`` from here."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Union

from detaudit.errors import UsageError
from detaudit.fileio import OutputPaths
from detaudit.flows.results import DiffResult, RecordResult, ReviewResult, SuiteResult, VerifyResult

if TYPE_CHECKING:
    from detaudit.render.html.findings import Findings

Result = Union[RecordResult, VerifyResult, SuiteResult, DiffResult, ReviewResult]  # noqa: UP007 (a runtime alias)


@dataclass
class Reports:
    """What a command writes besides its text: ``--json`` (stdout), ``--junit-xml`` and the step
    summary (``ci``: the command writes CI reports), ``--html`` (and ``--scan FILE`` for it).

    ``prepare`` states every output path with the command's inputs in one ``OutputPaths`` and
    checks them; a flow that finds a path of its own later (the standard a record writes, the one
    a verify reads) adds it to ``paths`` and checks again, before its first run."""

    title: str  # "detaudit verify CARD": the CI reports' title
    card: str | None = None  # the card as the user named it (None: no card, e.g. verify --metrics)
    subject: str | None = None  # what the command checks, as named: the card, else the metrics file
    as_json: bool = False
    ci: bool = False
    junit_xml: Path | None = None
    html: Path | None = None
    overwrite_html: bool = False
    scan_report: Path | None = None
    paths: OutputPaths = field(default_factory=OutputPaths)
    summary: Path | None = None  # the step summary file, found by ``prepare``
    findings: Findings | None = None  # --scan FILE, read by ``prepare``

    def prepare(self, inputs: Iterable[tuple[Path | None, str]] = ()) -> None:
        """Before anything runs: the options agree, no output path is unfit (``OutputPaths``),
        and the scan report (if any) is read."""
        if self.html is None:
            if self.scan_report is not None:
                raise UsageError("--scan FILE goes into the HTML page: give --html PATH too")
            if self.overwrite_html:
                raise UsageError("--overwrite-html without --html")
        for path, what in inputs:
            self.paths.reads(path, what)
        self.paths.reads(self.scan_report, "the scan report (--scan)")
        if self.ci:
            from detaudit.render.ci import claim_ci_paths, step_summary_path

            self.summary = step_summary_path()
            claim_ci_paths(self.paths, self.junit_xml, self.summary)
        self.paths.writes(self.html, "--html", replace_flag="--overwrite-html", overwrite=self.overwrite_html)
        self.paths.check()
        if self.scan_report is not None:
            from detaudit.render.html.findings import read_scan_findings

            self.findings = read_scan_findings(self.scan_report)
