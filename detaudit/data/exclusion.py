"""Which series are left out of exact comparison, and why.

Wall-clock metrics (timings, throughputs, timestamps) differ on every run by nature, so
comparing them bit for bit would make every standard fail. ``DEFAULT_EXCLUDE`` removes
them; ``--exclude`` / a card's ``exclude`` add patterns, ``--include`` takes a series back
(include wins over every exclude). Every excluded series is reported with its reason.
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
