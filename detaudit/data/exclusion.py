"""Which series are left out of exact comparison, and why.

Wall-clock metrics (timings, throughputs, timestamps) differ on every run by nature, so
comparing them bit for bit would make every standard fail. ``DEFAULT_EXCLUDE`` removes
them; ``--exclude`` / a card's ``exclude`` add patterns, ``--include`` takes a series back
(include wins over every exclude); a standard's format may leave out series its framework
checks only approximately (``rule``). Every excluded series is reported with its reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from detaudit.data.card import Card

# Globs over series names (fnmatch, case-sensitive; '*' also crosses '/').
DEFAULT_EXCLUDE: tuple[str, ...] = (
    "perf/*",  # miles' timing namespace
    "time/*",
    "timing/*",
    "*_time",
    "*_time_s",
    "*/time",
    "*elapsed*",
    "*timestamp*",
    "*wall_clock*",
    "*_runtime",  # wandb's _runtime
    "*throughput*",
    "*_per_sec",
    "*per_second*",
    "*tflops*",
    "*mfu*",
)


@dataclass(frozen=True)
class Exclusion:
    """Decides, per series name, whether it is compared; remembers why not."""

    defaults: tuple[str, ...] = DEFAULT_EXCLUDE
    card: tuple[str, ...] = ()
    cli: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    # A standard format's own rule (Megatron-LM's approximate-only series): its name, globs, and why
    rule: tuple[str, tuple[str, ...], str] | None = None
    _cache: dict[str, str | None] = field(default_factory=dict, compare=False, repr=False)

    def reason(self, name: str) -> str | None:
        """Return why ``name`` is excluded ("default wall-clock pattern 'perf/*'"), or None."""
        try:
            return self._cache[name]
        except KeyError:
            pass
        result: str | None = None
        if not any(fnmatchcase(name, pattern) for pattern in self.include):
            for source, patterns in (
                ("default wall-clock pattern", self.defaults),
                ("card exclude", self.card),
                ("--exclude", self.cli),
            ):
                hit = next((p for p in patterns if fnmatchcase(name, p)), None)
                if hit is not None:
                    result = f"{source} {hit!r}"
                    break
            if result is None and self.rule is not None:
                owner, patterns, why = self.rule
                hit = next((p for p in patterns if fnmatchcase(name, p)), None)
                if hit is not None:
                    result = f"the {owner} format's rule {hit!r}: {why}"
        self._cache[name] = result
        return result

    def patterns(self) -> dict[str, list[str]]:
        return {
            "default": list(self.defaults),
            "card": list(self.card),
            "cli": list(self.cli),
            "include": list(self.include),
        }


def exclusion_for(card: Card | None, exclude: Sequence[str] = (), include: Sequence[str] = ()) -> Exclusion:
    """The card's exclude/include patterns plus the command line's."""
    return Exclusion(
        card=card.exclude if card else (),
        cli=tuple(exclude),
        include=tuple(include) + (card.include if card else ()),
    )


def reasons_summary(left_out: dict[str, str], limit: int = 3) -> str:
    """What left series out, most frequent first: "2 by --exclude 'mem-*'; 1 by ..."."""
    counts: dict[str, int] = {}
    for reason in left_out.values():
        counts[reason] = counts.get(reason, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    shown = "; ".join(f"{n} by {reason}" for reason, n in ranked[:limit])
    return shown + (f"; {len(ranked) - limit} more reasons" if len(ranked) > limit else "")
