"""The stdout of a command's outcome: the text report for people, or with ``--json`` one JSON
document (``render.jsonout``), per result kind. Run details (a failed run's log tail, where
the run dirs are) go to stderr either way."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click
from rich.console import Console

from detaudit.flows.results import DiffResult, RecordResult, ReviewResult, SuiteResult, VerifyResult, VerifyStatus
from detaudit.render.jsonout import dump_json

if TYPE_CHECKING:
    from detaudit.render.reports import Reports, Result


def emit_stdout(result: Result, reports: Reports, out: Console, err: Console) -> list[str]:
    from detaudit.render.runs import print_failed_runs, print_workdir_note

    if isinstance(result, RecordResult):
        from detaudit.render.record import print_record, record_document

        runs = len(result.runs) or len(result.metrics_files)  # record --metrics: nothing ran
        written_word = "nothing written" if result.standard_path is None else "no standard written"
        if reports.as_json:
            if result.status == "run-failed":
                print_failed_runs(err, result.runs)
            click.echo(dump_json(record_document(result, reports.card or "", runs)))
            print_workdir_note(err, result.workdir, result.workdir_removed, result.ok)
        else:
            print_record(result, reports.card or "", runs, written_word=written_word, out=out, err=err)
    elif isinstance(result, VerifyResult):
        from detaudit.render.verify import print_verify, verify_document

        if reports.as_json:
            if result.status == VerifyStatus.RUN_FAILED and result.run is not None:
                print_failed_runs(err, [result.run])
            click.echo(dump_json(verify_document(result, reports.card)))
            if result.workdir is not None:
                print_workdir_note(err, result.workdir, result.workdir_removed, result.ok)
        else:
            print_verify(result, out=out, err=err)
    elif isinstance(result, SuiteResult):
        from detaudit.render.suite import print_suite

        print_suite(result, out)
    elif isinstance(result, DiffResult):
        from detaudit.render.diff import diff_json, print_diff

        if reports.as_json:
            click.echo(diff_json(result.report))
        else:
            print_diff(result.report, out)
    elif isinstance(result, ReviewResult):
        from detaudit.render.review import print_review, review_json

        if reports.as_json:
            click.echo(review_json(result.diff))
        else:
            print_review(result.diff, out)
    return []
