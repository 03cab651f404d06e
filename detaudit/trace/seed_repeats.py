"""Seeds repeated within one step (the ``seed_group`` records ``seeds.py`` writes): per process
and call site, the steps in which samples got the same seed.

A step is repeated when its site gave two or more distinct seeds and at least one of them more
than once: samples that should differ were seeded alike (a group seed reused for every sample
of the group). A step whose every seed was the same (a fixed seed applied again on purpose, or
one sample per step) is counted apart (``same_seed``), never as a repeat.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from detaudit.trace.files import RunTrace


@dataclass
class SeedRepeat:
    """The first step of one site of one process whose samples got repeated seeds, and how many
    steps there did."""

    process: str
    pid: int
    api: str
    site: str
    step: str             # the function whose call is the step (``engine.py:131 generate``)
    call: int             # which call of it
    seeds: int            # seeds given in that step
    distinct: int
    repeated: list[tuple[str, int]]  # (seed, times) given more than once, most first
    repeated_values: int
    steps: int = 1        # steps of this site that repeated seeds


@dataclass
class SeedCheck:
    repeats: list[SeedRepeat] = field(default_factory=list)
    steps: int = 0        # steps checked (a site that seeded two or more samples in one step)
    sites: int = 0
    same_seed: list[dict[str, Any]] = field(default_factory=list)  # steps whose every seed was one value

    @property
    def ok(self) -> bool:
        return not self.repeats


def seed_check(run: RunTrace) -> SeedCheck:
    out = SeedCheck()
    sites: set[tuple[int, str, str]] = set()
    for p in run.processes:
        found: dict[tuple[str, str], SeedRepeat] = {}
        for g in sorted(p.seed_groups, key=lambda g: g["seq"]):
            out.steps += 1
            sites.add((p.pid, g["api"], g["site"]))
            if g["distinct"] >= 2 and g["repeated"]:
                key = (g["api"], g["site"])
                if key in found:
                    found[key].steps += 1
                else:
                    found[key] = SeedRepeat(p.display, p.pid, g["api"], g["site"], g["step"], g["call"], g["seeds"],
                                            g["distinct"], [(str(v), int(n)) for v, n in g["repeated"]],
                                            g["repeated_values"])
            elif g["distinct"] == 1 and g["seeds"] >= 2:
                out.same_seed.append({"process": p.display, **g})
        out.repeats += list(found.values())
    out.sites = len(sites)
    return out
