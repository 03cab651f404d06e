"""Suites: ``detaudit plan``, ``verify --suite``, and the one-line verdict detail that CI reports reuse."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from detaudit.flows.results import CardOutcome, SuitePlan, SuiteResult, VerifyResult, VerifyStatus
from detaudit.render.console import PREFIX
from detaudit.render.diff import divergence_line
from detaudit.render.runs import runner_mismatch_message, seconds_text
from detaudit.runner_class import class_text

# rich.table (~6 ms) is imported by the two tables' functions: verify's report lines (this module's
# other functions) draw none.


def print_plan(plan: SuitePlan, console: Console) -> None:
    title = f"suite {plan.suite}" if plan.suite else "all cards"
    from rich.table import Table

    table = Table(title=title, title_justify="left", header_style="bold")
    for col, justify in (("card", "left"), ("file", "left"), ("suite", "left"), ("est_time", "right"),
                         ("GPUs", "right"), ("timeout", "right")):
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for card in plan.cards:
        table.add_row(escape(card.name), escape(str(card.path)), escape(card.suite or "-"), seconds_text(card.est_time),
                      str(card.gpus_per_run), seconds_text(card.timeout_s))
    console.print(table)
    line = f"total: {seconds_text(plan.total)} for {len(plan.cards)} cards run one after another"
    if plan.gpu_seconds:
        line += f", {plan.gpu_seconds:.0f} GPU-seconds"
    console.print(line)
    if plan.unknown:
        console.print(f"[yellow]no est_time (not in the total): {escape(', '.join(plan.unknown))}[/yellow]")
    if plan.budget is not None:
        if plan.fits:
            console.print(f"[green]within the budget of {seconds_text(plan.budget)} "
                          f"({seconds_text(plan.budget - plan.total)} to spare)[/green]")
        elif plan.unknown:
            console.print(f"[red]OVER BUDGET: cannot show the suite fits {seconds_text(plan.budget)}: "
                          f"{len(plan.unknown)} card(s) have no est_time[/red]")
        else:
            console.print(f"[red]OVER BUDGET: {seconds_text(plan.total)} > {seconds_text(plan.budget)} "
                          f"(by {seconds_text(plan.total - plan.budget)})[/red]")


def plan_document(plan: SuitePlan) -> dict[str, Any]:
    return {
        "suite": plan.suite,
        "cards": [{"name": c.name, "path": str(c.path), "suite": c.suite, "est_time": c.est_time,
                   "gpus_per_run": c.gpus_per_run} for c in plan.cards],
        "total_s": plan.total,
        "gpu_seconds": plan.gpu_seconds,
        "unknown_est_time": plan.unknown,
        "budget_s": plan.budget,
        "fits": plan.fits,
    }


def status_detail(status: VerifyStatus, result: Any, error: str | None = None, limit: int = 3) -> str:
    """One line for a verify outcome: what matched, the first divergences, or why it was not verified."""
    if status == "error":
        return error or ""
    if status == "passed":
        return f"{result.compared} series match"
    if status == "approximate":
        return approximate_line(result)
    if status == "failed":
        lines = [divergence_line(name, d) for name, d in result.failures[:limit]]
        more = len(result.failures) - limit
        return f"{len(result.failures)} of {result.compared} differ: " + "; ".join(lines) + (f"; +{more} more" if more > 0 else "")
    if status in ("not-verified", "skipped"):
        here = class_text(result.runner_here)
        others = other_classes_text(result)
        return f"no standard for runner class {here} (standards for {others})"
    if status == "profile-refused":
        return result.refusal or ""
    if status == "empty-standard":
        return "the standard has no series"
    if status == "run-failed":
        run = result.run
        return f"the run ended with {run.status} (exit code {run.returncode}); log {run.spec.log_path}"
    if status == "runner-mismatch":
        return runner_mismatch_message(result.runner_here, [result.run], "not verified")
    return ""


def approximate_line(result: Any) -> str:
    """How an approximate verify passed: identical series, and those only within tolerance."""
    within = ", ".join(f"{name} ({tol})" for name, tol in result.approximate)
    identical = result.compared - len(result.approximate)
    return (f"runner class {class_text(result.runner_here)} against the {result.approximate_against} standard: "
            f"{identical} series identical, {len(result.approximate)} within tolerance (approximate)"
            + (f": {within}" if within else ""))


def outcome_detail(outcome: CardOutcome, limit: int = 3) -> str:
    """A suite row's detail (``status_detail`` of the card's verify)."""
    return status_detail(outcome.status, outcome.result, outcome.error, limit)


def print_suite(result: SuiteResult, console: Console) -> None:
    from rich.table import Table

    table = Table(title=f"detaudit verify --suite {result.suite}", title_justify="left", header_style="bold")
    for col, justify in (("card", "left"), ("status", "left"), ("time", "right"), ("est_time", "right"),
                         ("detail", "left")):
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for o in result.outcomes:
        style = "green" if o.status == "passed" else "yellow" if o.status in ("skipped", "approximate") else "red"
        table.add_row(escape(o.card.name), f"[{style}]{VerifyStatus(o.status).label}[/{style}]",
                      seconds_text(o.elapsed), seconds_text(o.card.est_time), escape(outcome_detail(o)))
    console.print(table)
    style = "green" if result.exit_code == 0 else "red"
    console.print(f"[{style}]{PREFIX} suite {escape(str(result.suite))}: {suite_passed_text(result)}"
                  f"{'' if result.exit_code == 0 else ' — FAILED'}[/{style}]")


def suite_passed_text(result: SuiteResult) -> str:
    """``N of M cards passed``: an approximate pass is a pass (exit 0), and is said to be one."""
    passed = sum(1 for o in result.outcomes if o.status in (VerifyStatus.PASSED, VerifyStatus.APPROXIMATE))
    approximate = sum(1 for o in result.outcomes if o.status == VerifyStatus.APPROXIMATE)
    return (f"{passed} of {len(result.outcomes)} cards passed"
            + (f" ({approximate} approximate)" if approximate else ""))


def other_classes_text(result: VerifyResult) -> str:
    """The classes that do have a standard of the card, for NOT VERIFIED / SKIPPED lines."""
    return ", ".join(sorted({str(c) for c in result.other_classes})) or class_text(result.runner_standard)
