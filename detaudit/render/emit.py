"""The one step that writes a command's outcome (``emit``); what the command was asked to write
(``Reports``, checked with its inputs before anything runs) is ``render.reports``.

Outputs, in this order (``OUTPUTS``): the CI reports (``--junit-xml``, and the GitHub step
summary where ``GITHUB_STEP_SUMMARY`` is set), first, because CI must see them whatever follows;
the text report or ``--json`` on stdout; the ``--html`` page. Each is fed by the result object
alone (``detaudit.flows.results``: it carries the parsed card, standard, metrics and traces); no
output reads a file again.

A new output format: a module with an ``emit_FORMAT(result, reports, out, err) -> warnings``
that handles each result kind, a line in ``OUTPUTS``, and its option in ``render.reports.Reports``.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console

from detaudit.render.reports import Reports, Result

Output = Callable[[Result, Reports, Console, Console], list[str]]


def _ci(result: Result, reports: Reports, out: Console, err: Console) -> list[str]:
    from detaudit.render.ci import emit_ci

    return emit_ci(result, reports)


def _stdout(result: Result, reports: Reports, out: Console, err: Console) -> list[str]:
    from detaudit.render.stdout import emit_stdout

    return emit_stdout(result, reports, out, err)


def _html(result: Result, reports: Reports, out: Console, err: Console) -> list[str]:
    from detaudit.render.html import emit_html

    return emit_html(result, reports, err)


OUTPUTS: tuple[Output, ...] = (_ci, _stdout, _html)


def emit(result: Result, reports: Reports, out: Console, err: Console) -> list[str]:
    """Write every output the command was asked for; returns the warnings to show (a name XML
    cannot carry, a step summary that could not be appended to)."""
    warnings: list[str] = []
    for output in OUTPUTS:
        warnings += output(result, reports, out, err)
    return warnings
