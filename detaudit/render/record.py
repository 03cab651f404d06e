"""``detaudit record``: the outcome in English and as ``--json``."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from detaudit.flows.results import RecordResult, RecordStatus
from detaudit.render.console import PREFIX
from detaudit.render.diff import diff_document, print_diff
from detaudit.render.review import review_lines
from detaudit.render.runs import print_failed_runs, print_workdir_note, runner_mismatch_message, runs_document
from detaudit.render.trace import failure_reason, print_runs_trace, record_trace_line, runs_trace_json


def record_document(result: RecordResult, card: str, runs: int) -> dict[str, Any]:
    """``detaudit record --json``: the outcome, the runs' diff, and the trace report."""
    written = result.status == RecordStatus.WRITTEN
    return {
        "command": "record", "card": card, "status": result.status, "ok": result.ok, "runs_requested": runs,
        "runner_class": result.runner_class or (result.standard.runner_class if result.standard else None),
        "standard": str(result.standard_path) if result.standard_path and written else None,
        "series_written": len(result.standard.series) if result.standard is not None and written else 0,
        "dropped": sorted(result.dropped), "nan_dropped": list(result.nan_dropped),
        "review": result.review.to_json() if result.review is not None else None,
        "diff": diff_document(result.report) if result.report is not None else None,
        "trace": runs_trace_json(result.trace) if result.trace is not None else None,
        "why_not_ok": [{"reason": str(f), "summary": failure_reason(result.trace, f)}
                       for f in result.trace_failures] if result.trace is not None else [],
        "standard_trace": str(result.standard_trace) if result.standard_trace else None,
        "compile_cache": str(result.compile_cache) if result.compile_cache else None,
        "runs": runs_document(result.runs),
        "workdir": str(result.workdir) if result.workdir else None, "workdir_removed": result.workdir_removed,
    }


def print_record(result: RecordResult, card: str, runs: int, *, written_word: str, out: Console, err: Console) -> None:
    """The outcome of a record, for people. ``written_word``: what a failure leaves behind
    ("no standard written", or "nothing written" with --no-write)."""
    status = RecordStatus(result.status)
    if status == RecordStatus.RUN_FAILED:
        print_failed_runs(err, result.runs)
        err.print(f"[red]{PREFIX} record failed: a run did not finish; {written_word}[/red]")
        print_workdir_note(err, result.workdir, False, False)
        return
    if status == RecordStatus.RUNNER_MISMATCH:
        message = runner_mismatch_message(result.runner_class, result.runs, written_word)
        err.print(f"[red]{PREFIX} {escape(message)}[/red]")
        print_workdir_note(err, result.workdir, False, False)
        return
    assert result.report is not None
    if status == RecordStatus.DISAGREE:
        print_diff(result.report, out, title=f"detaudit record {card}")
        print_runs_trace(out, result.trace)
        out.print(f"[red]{PREFIX} runs disagree: {written_word}"
                  + (f" ({escape(str(result.standard_path))})" if result.standard_path else "") + "[/red]")
        print_workdir_note(err, result.workdir, False, False)
        return
    if status == RecordStatus.TRACE_NOT_OK:
        assert result.trace is not None
        print_runs_trace(out, result.trace)
        line = record_trace_line(result.trace_failures, result.trace, written_word)
        out.print(f"[red]{PREFIX} {escape(line)}"
                  + (f" ({escape(str(result.standard_path))})" if result.standard_path else "") + "[/red]")
        print_workdir_note(err, result.workdir, False, False)
        return
    if status == RecordStatus.EMPTY:
        excluded = len(result.report.excluded)
        out.print(f"[red]{PREFIX} {written_word}: no metric series left to compare ({excluded} excluded: "
                  f"{escape(', '.join(sorted(result.report.excluded)[:10]))}); a standard with 0 series "
                  "would pass any run. Use --include GLOB or the card's include to compare them.[/red]")
        print_workdir_note(err, result.workdir, False, False)
        return
    n_identical = len(result.report.identical)
    excluded = len(result.report.excluded)
    if status == RecordStatus.AGREED:
        print_runs_trace(out, result.trace)
        out.print(f"[green]{PREFIX} AGREE: {n_identical} metric series identical across {runs} runs; "
                  f"nothing written (--no-write)[/green]" + (f" ({excluded} excluded)" if excluded else ""))
        print_workdir_note(err, result.workdir, result.workdir_removed, True)
        return
    n = len(result.standard.series) if result.standard else 0
    if result.dropped:
        out.print(f"[yellow]{PREFIX} --allow-partial: dropped {len(result.dropped)} disagreeing series:[/yellow]")
        for name, info in sorted(result.dropped.items()):
            out.print(f"  {escape(name)} ({info['kind']})")
    for name in result.nan_dropped:
        out.print(f"[yellow]{PREFIX} --drop-nan-series: dropped {escape(name)} (holds NaN)[/yellow]")
    if result.review is not None:  # what `detaudit standard diff OLD NEW` prints
        for line in review_lines(result.review):
            out.print(f"{PREFIX} update: {escape(line)}")
    print_runs_trace(out, result.trace)
    if result.standard_trace is not None:
        out.print(f"{PREFIX} run 1's trace saved with the standard: {escape(str(result.standard_trace))} "
                  "(verify traces its run and compares it with this one)")
    if result.compile_cache is not None:
        out.print(f"{PREFIX} run 1's compile artifacts shipped with the standard: {escape(str(result.compile_cache))} "
                  "(verify loads those made by its own torch, CUDA and device; bits are checked either way)")
    if result.stale_trace_removed is not None:
        out.print(f"{PREFIX} removed {escape(str(result.stale_trace_removed))}: the replaced standard's "
                  "trace (record with --trace to keep one)")
    out.print(f"[green]{PREFIX} RECORDED: {n} metric series identical across {runs} runs -> "
              f"{escape(str(result.standard_path))}[/green]"
              + (f" ({excluded} excluded series listed in the file)" if excluded else ""))
    print_workdir_note(err, result.workdir, result.workdir_removed, True)
