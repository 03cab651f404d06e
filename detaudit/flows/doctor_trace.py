"""``detaudit doctor --trace DIR``: rows read from a run's trace, beside the preflight's: per
process, whether samples of one step got the same seed (``detaudit.trace.seed_repeats``).

DIR is a run's trace folder (``runN/trace``) or a trace saved with ``trace --save`` / carried by
a standard. Fail closed: a trace that is incomplete is a failing row (its missing records may hold
the repeat); a run with no step that seeds two or more samples passes as "n/a".
"""

from __future__ import annotations

from pathlib import Path

from detaudit.env.doctor import Row
from detaudit.trace.files import RunTrace, read_trace
from detaudit.trace.saved import read_saved
from detaudit.trace.seed_repeats import seed_check

FIX = ("derive each sample's seed from the sample, not from its group or step alone (e.g. hash the rollout, "
       "prompt and sample index), so that no two samples of a step share one")


def read_any_trace(directory: Path) -> RunTrace:
    """A run's trace folder, or a saved one (``meta.json`` beside ``trace/``)."""
    if (directory / "meta.json").is_file():
        return read_saved(directory)[1]
    return read_trace(directory)


def seed_rows(directory: Path) -> list[Row]:
    run = read_any_trace(directory)
    check = seed_check(run)
    rows = []
    for problem in run.problems:
        rows.append(Row("trace", "trace complete", False, problem, "trace the run again; a process whose ledger is "
                        "incomplete may have seeded samples the trace does not show"))
    by_process: dict[str, list[str]] = {}
    for r in check.repeats:
        where, _, function = r.step.rpartition(" ")
        shown = ", ".join(f"{value} x{times}" for value, times in r.repeated[:3])
        by_process.setdefault(r.process, []).append(
            f"{r.api} at {r.site}: {r.seeds} seeds in call {r.call} of {function} ({where}), {r.distinct} distinct "
            f"({shown}){f'; {r.steps} steps' if r.steps > 1 else ''}")
    for process, lines in sorted(by_process.items()):
        rows.append(Row(process, "per-sample seeds", False, "; ".join(lines), FIX))
    if not check.repeats:
        if check.steps:
            rows.append(Row("trace", "per-sample seeds", True, f"{check.steps} step(s) at {check.sites} call site(s): "
                            "no seed repeated within a step"))
        else:  # as the GPU rows without a GPU: nothing of the kind to check
            rows.append(Row("trace", "per-sample seeds", True, "n/a: no step of the traced run seeded two or more "
                            "samples"))
    return rows
