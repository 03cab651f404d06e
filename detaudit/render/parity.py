"""English and JSON for trainer-engine parity (``detaudit.trace.parity``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # read, never built, here: importing this renderer loads no trace model
    from detaudit.trace.parity import ParityDifference, ParityReport


def _dtypes(d: ParityDifference) -> str:
    a = ", ".join(o["dtype"] for o in d.a.outputs) or "?"
    b = ", ".join(o["dtype"] for o in d.b.outputs) or "?"
    return f"dtype {a}" if a == b else f"dtype {a} in {d.a.process.label}, {b} in {d.b.process.label}"


def difference_line(report: ParityReport, d: ParityDifference) -> str:
    a, b = report.sides
    m = d.a.call
    if d.max_ulp is None:
        ulp = f"max ULP unknown: {d.why_unknown}"
    elif math.isinf(d.max_ulp):
        ulp = "NaN in one output only"
    else:
        ulp = f"max {d.max_ulp:.0f} ULP (of {d.ulp_dtype})"
    return (f"parity {a} vs {b}: first module with the same inputs and different outputs: {m.name} ({m.cls}), "
            f"call {m.n} in {a} at {d.a.site or '?'}, call {d.b.call.n} in {b} at {d.b.site or '?'}: "
            f"{_dtypes(d)}, {ulp}; {report.agreed} of {report.matched} matched pairs agreed bit for bit")


def parity_lines(report: ParityReport) -> list[tuple[str, str]]:
    """(style, line) pairs."""
    a, b = report.sides
    if report.problems:
        return [("red", f"parity {a} vs {b}: not compared: {problem}") for problem in report.problems]
    if report.first is not None:
        return [("red", difference_line(report, report.first))]
    if not report.matched:
        return [("red", f"parity {a} vs {b}: none of the {report.calls} kept module calls of {a} has a call of {b} "
                        "with the same module name and inputs: nothing compared (same batch, dtype and arguments "
                        "are needed on both sides)")]
    return [("green", f"parity {a} vs {b}: {report.matched} module calls of {a} matched a call of {b} by module name "
                      f"and inputs, and all {report.agreed} agreed bit for bit ({report.calls - report.matched} "
                      "calls had no partner)")]


def parity_json(report: ParityReport) -> dict[str, Any]:
    d = report.first
    first = None
    if d is not None:
        first = {"module": d.a.call.name, "class": d.a.call.cls, "call_a": d.a.call.n, "call_b": d.b.call.n,
                 "site_a": d.a.site, "site_b": d.b.site, "dtypes_a": [o["dtype"] for o in d.a.outputs],
                 "dtypes_b": [o["dtype"] for o in d.b.outputs],
                 "max_ulp": None if d.max_ulp is None or math.isinf(d.max_ulp) else d.max_ulp,
                 "nan_in_one": d.max_ulp is not None and math.isinf(d.max_ulp),
                 "ulp_dtype": d.ulp_dtype, "why_unknown": d.why_unknown}
    return {"sides": list(report.sides), "processes": [list(report.processes[0]), list(report.processes[1])],
            "ok": report.ok, "calls": report.calls, "matched": report.matched, "agreed": report.agreed,
            "differing": report.differing, "first": first, "problems": report.problems,
            "summary": [line for _, line in parity_lines(report)]}
