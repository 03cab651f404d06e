"""Package attributes imported on first use (PEP 562): a package's public names stay where users
import them from, and a command that needs none of them does not pay for their imports (much of
a cold ``scan-rng`` of a small tree is start-up)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(package: str, names_of: Mapping[str, tuple[str, ...]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each name in ``names_of[module]`` is imported from
    that module the first time it is read, then kept in the package's namespace."""
    where = {name: module for module, names in names_of.items() for name in names}

    def attribute(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        parent = importlib.import_module(module)
        # a submodule (`detaudit.env`'s `determinism`) is an attribute only once it is imported
        value = getattr(parent, name) if hasattr(parent, name) else importlib.import_module(f"{module}.{name}")
        setattr(importlib.import_module(package), name, value)
        return value

    return attribute
