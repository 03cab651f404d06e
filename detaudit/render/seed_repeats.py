"""English and JSON for seeds repeated within one step (``detaudit.trace.seed_repeats``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # read, never built, here: importing this renderer loads no trace model
    from detaudit.trace.seed_repeats import SeedCheck, SeedRepeat


def repeat_line(r: SeedRepeat) -> str:
    shown = ", ".join(f"{value} x{times}" for value, times in r.repeated[:4])
    more = f" and {r.repeated_values - 4} more" if r.repeated_values > 4 else ""
    steps = f"; {r.steps} steps at this site did" if r.steps > 1 else ""
    where, _, function = r.step.rpartition(" ")
    return (f"seeds repeated within a step: {r.process}: {r.api} at {r.site}, in call {r.call} of {function} ({where}): "
            f"{r.seeds} seeds, {r.distinct} distinct ({shown}{more}): samples seeded alike sample alike "
            f"(a group of identical samples has zero advantage){steps}")


def check_lines(check: SeedCheck) -> list[tuple[str, str]]:
    """(style, line) pairs: each repeat, or what was checked."""
    if check.repeats:
        return [("red", repeat_line(r)) for r in check.repeats]
    if not check.steps:
        return []
    return [("green", f"per-sample seeds: {check.steps} step(s) at {check.sites} call site(s) checked, no seed "
                      "repeated within a step")]


def check_json(check: SeedCheck) -> dict[str, Any]:
    return {"ok": check.ok, "steps": check.steps, "sites": check.sites,
            "repeats": [{"process": r.process, "pid": r.pid, "api": r.api, "site": r.site, "step": r.step,
                         "call": r.call, "seeds": r.seeds, "distinct": r.distinct,
                         "repeated": [list(pair) for pair in r.repeated], "repeated_values": r.repeated_values,
                         "steps": r.steps, "summary": repeat_line(r)} for r in check.repeats],
            "same_seed_steps": len(check.same_seed)}
