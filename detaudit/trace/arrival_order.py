"""Compare arrival orders (the ``arrival`` records ``arrival.py`` writes) of two runs: per pair of
matched processes, the first gather, by call site and number, whose results arrived in another
order, or that only one run made.

Returns data only; ``detaudit.render.arrival`` words it. A gather whose results could not be put
in an order that means the same in every run (a set of futures made where the tracer could not
number them) is never called different: it is counted apart (``unordered``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from detaudit.trace.files import ProcessTrace


@dataclass
class ArrivalDifference:
    """``kind``: ``order`` (the results of gather ``n`` at ``site`` arrived in another order),
    ``missing`` (that gather was made in one run only: ``a`` or ``b`` is None), ``after_kept``
    (only the hash chain of the gathers after the kept ones differs: ``a``/``b`` are the last
    kept ones)."""

    process: str
    kind: str
    a: dict[str, Any] | None
    b: dict[str, Any] | None

    @property
    def gather(self) -> dict[str, Any]:
        found = self.a if self.a is not None else self.b
        assert found is not None  # a difference holds the gather of at least one run
        return found


def _gathers(p: ProcessTrace) -> dict[tuple[str, int], dict[str, Any]]:
    return {(g["site"], g["n"]): g for g in p.arrivals}


def first_arrival_difference(a: ProcessTrace, b: ProcessTrace) -> ArrivalDifference | None:
    """The first gather (in the first run's order) whose arrival order differs between ``a`` and
    ``b``; else a site whose gathers beyond the kept ones differ; else None."""
    by_a, by_b = _gathers(a), _gathers(b)
    keys = sorted(set(by_a) | set(by_b), key=lambda k: (by_a.get(k) or by_b[k])["seq"])
    for key in keys:
        x, y = by_a.get(key), by_b.get(key)
        if x is None or y is None:
            return ArrivalDifference(a.display, "missing", x, y)
        if x["stable"] and y["stable"] and x["order"] != y["order"]:
            return ArrivalDifference(a.display, "order", x, y)
    for site in sorted(set(a.arrival_chains) | set(b.arrival_chains)):
        ca, cb = a.arrival_chains.get(site), b.arrival_chains.get(site)
        if ca is None or cb is None or ca.differs(cb):
            last_a = max((g for g in a.arrivals if g["site"] == site), key=lambda g: g["n"], default=None)
            last_b = max((g for g in b.arrivals if g["site"] == site), key=lambda g: g["n"], default=None)
            return ArrivalDifference(a.display, "after_kept", last_a, last_b)
    return None


def unordered_gathers(p: ProcessTrace) -> int:
    """Gathers of ``p`` whose order is not compared (see the module doc)."""
    return sum(1 for g in p.arrivals if not g["stable"])
