"""The schema of scan-rng's per-file facts: the markers their keys use, and the version the
caches are keyed by (a new field or a new meaning bumps it)."""

from __future__ import annotations

import re

FACTS_VERSION = 18
MODULE_BODY = "<module>"  # a module's top-level code, as a function
MAIN_BLOCK = "<main>"  # its `if __name__ == "__main__":` block
LOCAL = ".<local>."  # key part of a function-local name: "mod.f.<local>.fn"

TABLE = ".<table>"  # "mod.LOSSES.<table>": a call of an entry of the dict mod.LOSSES

SUPER = ".<super>."  # "mod.Cls.<super>.m": super().m() inside Cls

# A string literal that names a module attribute by dotted path ("pkg.mod.fn" or "pkg.mod:fn").
# A string literal that names a module attribute by dotted path ("pkg.mod.fn" or "pkg.mod:fn").
DOTTED_STRING = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?::[A-Za-z_][A-Za-z0-9_.]*)?")
