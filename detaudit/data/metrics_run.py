"""A parsed metrics file in memory (``MetricsRun``): per series a column (``Series``) of line
indices and values, the step of each line, and the file line number of each kept line.
``metrics.read_metrics`` builds it."""

from __future__ import annotations

from array import array
from bisect import bisect_right
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

LINE_INDEX = "<line>"


def steps_at(line_steps: list[Any], lines: array) -> list[Any]:
    """The steps of the given line indices (one C call for the common many-line case)."""
    if len(lines) > 1:
        return list(itemgetter(*lines)(line_steps))
    return [line_steps[i] for i in lines]  # the step key of lines that have no step_key and no default


@dataclass
class Series:
    """One metric's points: line indices into ``MetricsRun.line_steps`` and values."""

    name: str
    step_key: str
    lines: array = field(default_factory=lambda: array("I"))
    values: array | list = field(default_factory=lambda: array("d"))
    order: int = 0  # position of the series' first appearance, for emission order

    def __len__(self) -> int:
        return len(self.lines)

    def steps(self, run: MetricsRun) -> list[Any]:
        return steps_at(run.line_steps, self.lines)


@dataclass
class MetricsRun:
    """A parsed metrics file."""

    path: str
    series: dict[str, Series]
    line_steps: list[Any]  # the step of each kept line, by 0-based line index
    excluded: dict[str, str]  # series name -> reason it was excluded
    torn_last_line: bool = False
    # (kept-line index, file line number) wherever blank lines shifted the numbering
    line_offsets: list[tuple[int, int]] = field(default_factory=list)
    # (line indices, step key) per line shape; the per-line step key is derived on demand
    shape_lines: list[tuple[array, str]] = field(default_factory=list, repr=False)
    # step fields taken from STEP_KEYS because lines named none (reports say so), in file order
    detected_step_keys: list[str] = field(default_factory=list)
    _line_step_keys: list[str] | None = field(default=None, repr=False)

    def line_number(self, index: int) -> int:
        """1-based line number in the file of the kept line ``index``."""
        return line_number(self.line_offsets, index)

    @property
    def line_step_keys(self) -> list[str]:
        """The step key of each kept line (built once, when a report needs it)."""
        if self._line_step_keys is None:
            keys = [LINE_INDEX] * len(self.line_steps)
            for lines, step_key in self.shape_lines:
                for i in lines:
                    keys[i] = step_key
            self._line_step_keys = keys
        return self._line_step_keys


def line_number(line_offsets: list[tuple[int, int]], index: int) -> int:
    at = bisect_right(line_offsets, (index, 1 << 62)) - 1
    if at < 0:
        return index + 1
    first_index, first_line = line_offsets[at]
    return first_line + (index - first_index)
