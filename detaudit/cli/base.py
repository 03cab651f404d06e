"""What every command shares: exit codes, one-line errors, the embedded default card."""

from __future__ import annotations

import sys
import warnings
from functools import wraps
from pathlib import Path
from typing import Any, Callable

import click

from detaudit.errors import InputError

EXIT_OK, EXIT_FAIL, EXIT_INPUT = 0, 1, 2


def _one_line_warning(message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
    click.echo(f"detaudit: warning: {message}", err=True)


def handle_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn InputError into one stderr line and exit code 2."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        warnings.showwarning = _one_line_warning
        try:
            return func(*args, **kwargs)
        except InputError as exc:
            click.echo(f"detaudit: error: {exc}", err=True)
            sys.exit(EXIT_INPUT)

    return wrapper


class OneLineErrors(click.Group):
    """Usage errors as one line, ``detaudit: error: ...``, exit 2 (not click's usage block)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        kwargs["standalone_mode"] = False
        try:
            code = super().main(*args, **kwargs)
        except click.exceptions.Abort:
            click.echo("detaudit: aborted", err=True)
            sys.exit(EXIT_FAIL)
        except click.ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            where = f"{ctx.info_name}: " if ctx is not None and ctx.parent is not None else ""
            hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
            message = " ".join(exc.format_message().split())
            click.echo(f"detaudit: error: {where}{message}{hint}", err=True)
            sys.exit(EXIT_INPUT)
        sys.exit(code if isinstance(code, int) else EXIT_OK)


def default_card() -> Path:
    """The embedded default: the tiny CPU SD3.5 DiffusionNFT + PickScore recipe."""
    from importlib.resources import files

    return Path(str(files("recipes") / "sd3_pickscore_nft.toml"))


def exit_with(ok: bool) -> None:
    sys.exit(EXIT_OK if ok else EXIT_FAIL)
