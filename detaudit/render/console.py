"""Consoles and the live progress of runs."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from detaudit.render.escapes import one_line

if TYPE_CHECKING:
    from rich.live import Live

    from detaudit.run.spec import RunState

# Deferred: the live table (rich.live, rich.table) is drawn on a terminal only, and the run modules
# (subprocess) are loaded by runs that report progress: ~12 ms of every command's start-up otherwise.

PREFIX = "\\[detaudit]"  # "[detaudit]", escaped for rich markup


class SafeConsole(Console):
    """A rich console that never writes a control character it was given in a string: every
    string it prints is one line, control characters (newline included) and lone surrogates shown
    as escapes (``render.escapes``), so that a series name or path from someone else's file can
    neither drive the reader's terminal nor start a line of its own. A text of several lines (a
    run's log tail) is printed a line at a time."""

    def render_str(self, text: str, **kwargs: Any) -> Any:  # every str rich prints, table cells included
        return super().render_str(one_line(text), **kwargs)


def console(stderr: bool = False) -> Console:
    """A console on stdout or stderr. Off a terminal (CI logs, pipes) nothing is hard-wrapped: a
    line stays one line and tables take the width they need (grep and diff see whole lines).
    Control characters in what it prints are shown as escapes."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return SafeConsole(stderr=stderr, highlight=False)
    return SafeConsole(stderr=stderr, highlight=False, width=100_000, soft_wrap=True)


class RunDisplay:
    """Progress of the runs: a live table on a terminal, one line per change otherwise."""

    def __init__(self, out: Console, total: int, label: str) -> None:
        self.console = out
        self.total = total
        self.label = label
        self.live: Live | None = None
        self.seen: dict[int, str] = {}

    def __enter__(self) -> RunDisplay:
        if self.console.is_terminal:
            from rich.live import Live

            self.live = Live(console=self.console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def update(self, states: list[RunState]) -> None:
        from detaudit.run.spec import RunStatus

        if self.live is not None:
            from rich.table import Table

            from detaudit.run.local import last_log_line

            table = Table(title=self.label, title_justify="left", header_style="bold")
            for col, width in (("run", 5), ("status", 7), ("elapsed", 8), ("GPUs", 4)):
                table.add_column(col, min_width=width, no_wrap=True)
            table.add_column("last log line", overflow="ellipsis", no_wrap=True, ratio=1)
            for s in states:
                last = last_log_line(s.spec.log_path) if s.started is not None else ""
                gpus = ",".join(s.spec.gpus) if s.spec.gpus else "-"
                table.add_row(f"{s.spec.index + 1}/{self.total}", str(s.status), f"{s.elapsed:.1f}s", gpus, escape(last[-100:]))
            self.live.update(table)
            return
        for s in states:
            if self.seen.get(s.spec.index) != s.status and s.status != RunStatus.WAITING:
                self.seen[s.spec.index] = s.status
                extra = f" in {s.elapsed:.1f}s" if s.status != RunStatus.RUNNING else f" (log {s.spec.log_path})"
                self.console.print(f"{PREFIX} run {s.spec.index + 1}/{self.total} {s.status}{extra}")
