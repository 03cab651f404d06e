"""``detaudit verify``: the verdict in English and as ``--json``."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from detaudit.flows.results import VerifyResult, VerifyStatus
from detaudit.render.console import PREFIX
from detaudit.render.diff import detected_steps_line, divergence_document, divergence_line, names_text
from detaudit.render.runs import print_failed_runs, print_workdir_note, runner_mismatch_message, runs_document
from detaudit.render.suite import approximate_line, other_classes_text
from detaudit.render.trace import print_runs_trace, runs_trace_json
from detaudit.runner_class import class_text


def verify_document(result: VerifyResult, card: str | None) -> dict[str, Any]:
    """``detaudit verify --json``: the outcome, each failing series, the environment's
    differences from the standard's, and the trace report."""
    return {
        "command": "verify", "card": card, "status": result.status, "ok": result.ok,
        "standard": str(result.standard_path), "compared": result.compared,
        "failures": [divergence_document(name, d) for name, d in result.failures],
        "extra_series": list(result.extra_series),
        "left_out": dict(result.left_out), "renamed": dict(result.renamed),
        "detected_step_keys": list(result.run_metrics.detected_step_keys) if result.run_metrics is not None else [],
        "approximate": [{"series": s, "tolerance": t} for s, t in result.approximate],
        "runner_class": result.runner_here, "standard_runner_class": result.runner_standard,
        "other_classes": list(result.other_classes), "refusal": result.refusal,
        "provenance": list(result.provenance), "package_changes": list(result.package_changes),
        "bit_packages": list(result.bit_packages), "runner_unchecked": result.runner_unchecked,
        "trace": runs_trace_json(result.trace) if result.trace is not None else None,
        "standard_trace": str(result.standard_trace) if result.standard_trace else None,
        "compile_cache": str(result.compile_cache) if result.compile_cache else None,
        "runs": runs_document([result.run]) if result.run is not None else [],
        "metrics": str(result.metrics_path) if result.metrics_path else None,
        "workdir": str(result.workdir) if result.workdir else None, "workdir_removed": result.workdir_removed,
    }


def print_selection(result: VerifyResult, out: Console) -> None:
    """Which series were renamed, left out, or are in the run only: what the verdict did not cover."""
    if result.renamed:
        out.print(f"{PREFIX} renamed: " + escape(", ".join(f"{a} -> {b}" for a, b in sorted(result.renamed.items()))))
    if result.left_out:
        reasons = sorted(set(result.left_out.values()))
        out.print(f"{PREFIX} left out ({len(result.left_out)}, by {escape('; '.join(reasons))}): "
                  + escape(names_text(sorted(result.left_out))))
    if result.extra_series:
        out.print(f"{PREFIX} note: {len(result.extra_series)} series not in the standard: "
                  + escape(names_text(result.extra_series)))
    if result.run_metrics is not None and result.run_metrics.detected_step_keys:
        out.print(f"{PREFIX} " + escape(detected_steps_line(result.run_metrics.detected_step_keys)))


def env_diff_command(result: VerifyResult) -> str:
    """The command that lists every difference between this environment and the standard's."""
    card = f"{result.card.path} " if result.card is not None else ""
    return f"detaudit env {card}--diff {result.standard_path}"


def package_summary(result: VerifyResult) -> str:
    """The differing packages that can change bits, by name and version, and the rest as one count."""
    rest = len(result.package_changes) - len(result.bit_packages)
    named = "; ".join(result.bit_packages)
    if not named:
        return (f"{rest} package version(s) differ, none of torch, CUDA/cuDNN, numpy or the card's imports "
                f"(`{env_diff_command(result)}` lists them)")
    more = f"; and {rest} other package(s) (`{env_diff_command(result)}` lists them)" if rest else ""
    return named + more


def print_verify(result: VerifyResult, *, out: Console, err: Console) -> None:
    """The verdict of a verify, for people: what passed, what differs from where, or why nothing was proven."""
    path = escape(str(result.standard_path))
    status = VerifyStatus(result.status)
    if status == VerifyStatus.RUNNER_MISMATCH:
        message = runner_mismatch_message(result.runner_here, [result.run], "not verified")
        out.print(f"[red]{PREFIX} NOT VERIFIED: {escape(message)}[/red]")
        return
    if status in (VerifyStatus.SKIPPED, VerifyStatus.NOT_VERIFIED):
        here, others = class_text(result.runner_here), escape(other_classes_text(result))
        if status == VerifyStatus.SKIPPED:
            out.print(f"[yellow]{PREFIX} SKIPPED: no standard for runner class {here} (standards exist for "
                      f"{others}: {path}); bitwise agreement is only promised on the class a standard "
                      "was recorded on (--allow-other-runner)[/yellow]")
            return
        out.print(f"[red]{PREFIX} NOT VERIFIED: no standard for runner class {here} (standards exist for "
                  f"{others}: {path}); record one on this class, or pass --allow-other-runner to exit 0[/red]")
        return
    if status == VerifyStatus.PROFILE_REFUSED:
        out.print(f"[red]{PREFIX} NOT VERIFIED: {escape(result.refusal or '')}; the portable standard {path} is only "
                  "promised on machines that honour its profile[/red]")
        return
    if status == VerifyStatus.EMPTY_STANDARD:
        out.print(f"[red]{PREFIX} NOT VERIFIED: the standard {path} has no metric series, so it "
                  "proves nothing; re-record it with series to compare[/red]")
        return
    if status == VerifyStatus.RUN_FAILED:
        assert result.run is not None
        print_failed_runs(err, [result.run])
        out.print(f"[red]{PREFIX} FAILED: the run did not finish[/red]")
        print_workdir_note(err, result.workdir, False, False)
        return
    if status == VerifyStatus.APPROXIMATE:
        print_runs_trace(out, result.trace)
        out.print(f"[yellow]{PREFIX} PASSED (approximate, not identical): {escape(approximate_line(result))} "
                  f"({path})[/yellow]")
        print_selection(result, out)
        print_workdir_note(err, result.workdir, result.workdir_removed, True)
        return
    if status == VerifyStatus.PASSED:
        print_runs_trace(out, result.trace)
        out.print(f"[green]{PREFIX} PASSED: {result.compared} metric series match {path}[/green]")
        print_selection(result, out)
        if result.runner_unchecked:
            out.print(f"[yellow]{PREFIX} runner class not checked: {escape(result.runner_unchecked)}[/yellow]")
        if result.package_changes:
            err.print(f"[yellow]detaudit: warning: the bits match, but {len(result.package_changes)} package "
                      "version(s) differ from the standard's: " + escape(package_summary(result)) + "[/yellow]")
        print_workdir_note(err, result.workdir, result.workdir_removed, True)
        return
    if not result.failures:  # failed on the trace: seeds repeated within a step
        out.print(f"[red]{PREFIX} FAILED: the {result.compared} metric series match {path}, but the trace found "
                  "samples of one step seeded alike:[/red]")
    else:
        out.print(f"[red]{PREFIX} FAILED: {len(result.failures)} of {result.compared} metric series differ from "
                  f"{path}[/red]")
    for name, d in result.failures:
        out.print("  " + escape(divergence_line(name, d)))
    print_selection(result, out)
    if result.runner_unchecked:
        out.print(f"[yellow]{PREFIX} runner class not checked: {escape(result.runner_unchecked)}[/yellow]")
    print_runs_trace(out, result.trace)
    if result.provenance:
        out.print(f"[yellow]{PREFIX} this environment differs from the standard's:[/yellow]")
        packages = set(result.package_changes)
        for line in result.provenance:
            if line not in packages:
                out.print("  " + escape(line))
        if packages:
            out.print("  packages: " + escape(package_summary(result)))
    print_workdir_note(err, result.workdir, result.workdir_removed, False)
