"""English and JSON for arrival order: the first gather whose results arrived in another order
in two runs (``detaudit.trace.arrival_order``). Pure functions of the data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # read, never built, here: importing this renderer loads no trace model
    from detaudit.trace.arrival_order import ArrivalDifference


def order_words(order: list[list[Any]]) -> str:
    """``1, 0`` (one result per call), ``(0 2), 1`` (two returned by one call)."""
    return ", ".join(str(g[0]) if len(g) == 1 else "(" + " ".join(map(str, g)) + ")" for g in order)


def arrival_difference_line(d: ArrivalDifference, labels: tuple[str, str], *, named: bool = True) -> str:
    g = d.gather
    lead = f"{d.process}: " if named else ""
    head = f"{lead}{g['api']} at {g['site']}, gather {g['n']} (it fed {g['caller']})"
    if d.kind == "missing":
        return f"{head}: made in {labels[0] if d.a is not None else labels[1]} only"
    if d.kind == "after_kept":
        return (f"{head}: the kept gathers agree, a later one at this site arrived in another order ({labels[0]} vs "
                f"{labels[1]}) (after the first gathers only a hash chain is kept: set DETAUDIT_TRACE_KEEP higher to "
                "name it)")
    assert d.a is not None and d.b is not None
    what = "results" if not g["api"].endswith(("Queue.get", "Queue.get_nowait")) else "items (by who put them)"
    return (f"{head}: {what} arrived in another order: {order_words(d.a['order'])} in {labels[0]}, "
            f"{order_words(d.b['order'])} in {labels[1]} (numbered in the order they were waited for)")


def arrival_json(d: ArrivalDifference, labels: tuple[str, str]) -> dict[str, Any]:
    return {"process": d.process, "kind": d.kind, "api": d.gather["api"], "site": d.gather["site"],
            "gather": d.gather["n"], "caller": d.gather["caller"],
            "order_a": d.a["order"] if d.a is not None else None,
            "order_b": d.b["order"] if d.b is not None else None,
            "summary": arrival_difference_line(d, labels)}
