"""What every command shares: exit codes, one-line errors, the card (or the bundled demo), and the
CI reports of a command that ended without a verdict (bad input, interrupted)."""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Iterator, MutableMapping
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from detaudit.errors import InputError, UsageError
from detaudit.render.escapes import one_line

if TYPE_CHECKING:
    from detaudit.data.card import Card

# The card parser (tomllib, shutil, the portable profiles: ~15 ms) is imported by the commands that
# read a card (``card_or_demo``), not at every start-up: diff, scan-rng, standard and verify --metrics read none.

EXIT_OK, EXIT_FAIL, EXIT_INPUT = 0, 1, 2
JUNIT_PARAM = "junit_xml"  # commands with --junit-xml write CI reports on every outcome


def _one_line_warning(message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
    warn(str(message))


def warn(message: str) -> None:
    click.echo(f"detaudit: warning: {one_line(message)}", err=True)


def ci_title(ctx: click.Context) -> str:
    """The title of a command's CI reports: the command and what it checks (card, metrics, suite)."""
    names: list[str] = []
    at = ctx
    while at.parent is not None:  # the root's name may be `python -m detaudit`: always "detaudit"
        names.insert(0, at.info_name or "")
        at = at.parent
    command = " ".join(["detaudit", *names])
    params = ctx.params
    if params.get("suite"):
        return f"{command} --suite {params['suite']}"
    target = params.get("card") or params.get("metrics")
    return f"{command} {target}" if target else command


def ci_error_reports(ctx: click.Context | None, message: str, verdict: str = "ERROR", case: str = "bad input",
                     error: BaseException | None = None) -> None:
    """For a command with --junit-xml that ends without a verdict: a JUnit file holding one
    ``<error>`` case, and the step summary, so CI shows why (pytest does the same for an error
    at collection). Commands without --junit-xml write no CI report; none is written over a path
    the command was given (or refused: ``error``)."""
    if ctx is None or not any(p.name == JUNIT_PARAM for p in ctx.command.params):
        return
    from detaudit.render.ci import write_error_reports

    given = [v for k, v in ctx.params.items() if k != JUNIT_PARAM and isinstance(v, Path)]
    for text in write_error_reports(ctx.params.get(JUNIT_PARAM), ci_title(ctx), f"detaudit.{ctx.info_name}", case,
                                    one_line(message), verdict=verdict, error=error, other_paths=given):
        warn(text)


def handle_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn InputError into one stderr line and exit code 2 (after the CI reports)."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        warnings.showwarning = _one_line_warning
        try:
            return func(*args, **kwargs)
        except InputError as exc:
            click.echo(f"detaudit: error: {one_line(str(exc))}", err=True)
            ci_error_reports(click.get_current_context(silent=True), str(exc), error=exc)
            sys.exit(EXIT_INPUT)
        except click.ClickException as exc:  # raised in the body: OneLineErrors.main reports it
            if getattr(exc, "ctx", None) is None:
                exc.ctx = click.get_current_context(silent=True)  # type: ignore[attr-defined]
            raise

    return wrapper


def _tolerant_streams() -> None:
    """Output never crashes on a terminal or pipe that cannot encode it (``PYTHONIOENCODING=ascii``,
    a C locale): characters it cannot hold are written as backslash escapes."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # a stream that cannot change now keeps its own
                pass


class LazyCommands(MutableMapping[str, click.Command]):
    """A group's commands by name, each imported from its module the first time it is asked for:
    ``detaudit scan-rng`` does not import what ``record`` renders (start-up is much of a cold
    scan of a small tree). ``where`` maps each name to ``"module:attribute"``."""

    def __init__(self, where: dict[str, str]) -> None:
        self._where = dict(where)
        self._loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            module, _, attribute = self._where[name].partition(":")  # KeyError: no such command
            self._loaded[name] = getattr(importlib.import_module(module), attribute)
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded[name] = command
        self._where.setdefault(name, "")

    def __delitem__(self, name: str) -> None:
        del self._where[name]
        self._loaded.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._where))

    def __len__(self) -> int:
        return len(self._where)


class OneLineErrors(click.Group):
    """Usage errors as one line, ``detaudit: error: ...``, exit 2 (not click's usage block);
    no arguments at all: the help, as click prints it."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        _tolerant_streams()
        kwargs["standalone_mode"] = False
        no_args_help = getattr(click.exceptions, "NoArgsIsHelpError", ())
        try:
            code = super().main(*args, **kwargs)
        except click.exceptions.Abort:
            click.echo("detaudit: aborted", err=True)
            sys.exit(EXIT_FAIL)
        except no_args_help as exc:  # `detaudit`, `detaudit standard`: the help, not an error line
            exc.show()
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            where = f"{ctx.info_name}: " if ctx is not None and ctx.parent is not None else ""
            hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
            message = " ".join(exc.format_message().split())
            click.echo(f"detaudit: error: {one_line(where + message + hint)}", err=True)
            ci_error_reports(ctx, message)
            sys.exit(EXIT_INPUT)
        sys.exit(code if isinstance(code, int) else EXIT_OK)


# The bundled demo: the tiny CPU SD3.5 DiffusionNFT + PickScore recipe. It lives in detaudit's
# repository (recipes/), not in the wheel, and needs the recipe extra.
DEMO_CARD = Path("recipes") / "sd3_pickscore_nft.toml"
RECIPE_EXTRA = ("torch", "ray", "diffusers", "transformers", "peft")
MAKE_A_CARD = "detaudit init -- python train.py"


def bundled_demo() -> Path:
    """The demo card, where this detaudit runs from its repository with the recipe extra installed;
    ``UsageError`` otherwise, saying how to make a card for one's own job instead."""
    import detaudit

    root = Path(detaudit.__file__).resolve().parent.parent
    card = root / DEMO_CARD
    if not (card.is_file() and (root / "recipes" / "diffusion_nft").is_dir()):
        why = "the bundled demo recipe is part of detaudit's repository, not of its package"
    else:
        from importlib.util import find_spec

        missing = [name for name in RECIPE_EXTRA if find_spec(name) is None]
        if not missing:
            return card
        why = f"the bundled demo recipe needs the recipe extra ({', '.join(missing)} not installed)"
    raise UsageError(f"no CARD given, and {why}; to gate your own job, write a card beside its script: {MAKE_A_CARD}")


def card_or_demo(card: Path | None) -> Card:
    """The command's card, parsed once; without one, the bundled demo's (said on stderr), never by surprise."""
    from detaudit.data.card import load_card

    if card is not None:
        return load_card(card)
    demo = bundled_demo()
    warn(f"no CARD given: running the bundled demo recipe {demo} (name a card to run your own job; {MAKE_A_CARD} "
         "writes one)")
    return load_card(demo)


def exit_with(ok: bool) -> NoReturn:
    sys.exit(EXIT_OK if ok else EXIT_FAIL)
