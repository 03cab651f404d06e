"""Errors that the CLI turns into a one-line message and exit code 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class InputError(Exception):
    """Bad input: a file that cannot be read, parsed or trusted.

    ``str(err)`` is the one line the CLI prints: ``FILE[:LINE]: what is wrong``.
    """

    def __init__(self, path: str | Path | None, message: str, line: int | None = None) -> None:
        self.path = str(path) if path is not None else None
        self.line = line
        self.message = message
        where = self.path or ""
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {message}" if where else message)

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:  # survives pickling (errors from parallel readers)
        return (InputError, (self.path, self.message, self.line))


class UsageError(InputError):
    """A command used wrongly (conflicting options, a standard that exists without --update)."""

    def __init__(self, message: str, path: str | Path | None = None) -> None:
        super().__init__(path, message)

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return (UsageError, (self.message, self.path))
