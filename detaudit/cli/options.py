"""Options that several commands share, defined once."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

F = Callable[..., Any]


class FiniteFloatRange(click.FloatRange):
    """A float in a range that is a number: ``nan`` and ``inf`` are refused (exit 2), as a budget
    of NaN seconds would let every suite fit (NaN compares false) and ``inf`` checks nothing."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)


def _stack(*decorators: F) -> F:
    def apply(func: F) -> F:
        for decorator in reversed(decorators):
            func = decorator(func)
        return func

    return apply


def card_and_extra_args(func: F) -> F:
    """CARD (optional: the embedded tiny recipe) and the arguments after ``--``."""
    return _stack(
        click.argument("card", required=False, type=click.Path(dir_okay=False, path_type=Path)),
        click.argument("extra_args", nargs=-1, type=click.UNPROCESSED),
    )(func)


def exclude_include(func: F) -> F:
    return _stack(
        click.option("--exclude", multiple=True, metavar="GLOB", help="Also exclude series matching GLOB (repeatable)."),
        click.option("--include", multiple=True, metavar="GLOB", help="Compare series matching GLOB even if excluded."),
    )(func)


def trace_option(verdict: str = "") -> Callable[[F], F]:
    """``--trace``; ``verdict``: what the trace decides for this command, appended to the help."""
    return click.option(
        "--trace", type=click.Choice(["rng", "modules"]), is_flag=False, flag_value="rng", default=None,
        help="Trace every global-RNG draw in every process of the run(s) (--trace=modules: and every nn.Module "
             "call); name the first that differs." + (f" {verdict}" if verdict else ""))


def perturb_option(first_run: str) -> Callable[[F], F]:
    return click.option(
        "--perturb-schedule", "perturb_schedule", is_flag=True,
        help="Hold back each result of concurrent work (Ray tasks and actor methods, pool futures, asyncio tasks) by "
             "a share, drawn by detaudit per run and call, of half the work's own time plus 0.25 s (at most 2 s) "
             f"({first_run}), so that results gathered in completion order arrive in another order than in another "
             "run; a ray.wait of the program's hands over the results ready within 4 s in the program's order in run 1, "
             "reversed in run 2.")


def cluster_option(what: str) -> Callable[[F], F]:
    return click.option("--cluster", metavar="ADDRESS", help=f"Run {what} as Ray job(s) on this cluster (http://HEAD:8265, or auto).")


def junit_option(what: str) -> Callable[[F], F]:
    return click.option("--junit-xml", type=click.Path(dir_okay=False, path_type=Path),
                        help=f"Also write a JUnit XML report: {what}.")


def json_option(what: str) -> Callable[[F], F]:
    return click.option("--json", "as_json", is_flag=True, help=f"Print {what} as one JSON object on stdout.")


def step_key_option(help_text: str = "Step field for lines without a step_key.") -> Callable[[F], F]:
    return click.option("--step-key", help=help_text)


def workdir_option(help_text: str) -> Callable[[F], F]:
    return click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), help=help_text)
