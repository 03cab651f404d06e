"""TorchTitan loss files (``tests/assets/losses/*.txt``): one ``step value`` per line::

    1 8.048324584960938
    2 7.751155376434326

One series, read as ``loss`` (a card's ``rename`` maps the run's name to it, e.g.
``"loss_metrics/global_avg_loss" = "loss"``). Read as TorchTitan's ``read_losses_from_file``
reads it: every line exactly two tokens, the step an integer, the value ``float()`` (so ``8``
is 8.0, ``nan`` and ``inf`` are floats); a blank line is an error there and here. A step twice
is an error here (TorchTitan keeps the later line silently). Written as its
``export_losses_to_file`` writes: ascending steps, ``f"{step} {value!r}"`` and a newline each;
a file that spells a number otherwise (``8``, ``NaN``) gets it spelled the same way back.

Verdict (``assert_losses_equal``): the run's set of steps must equal the file's (an extra or a
missing step fails), then per step Python ``==`` (a NaN never matches; 0.0 matches -0.0).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from detaudit.data.compare import ABSENT, PairDivergence, SeriesData, classify
from detaudit.data.values import format_value
from detaudit.errors import InputError
from detaudit.standards.formats.common import (
    Format,
    JsonLayout,
    Source,
    is_number,
    last_by_step,
    require_int_steps,
    require_number,
)
from detaudit.standards.model import Standard

NAME = "torchtitan"
SERIES = "loss"
_FIRST = re.compile(r"^\s*-?[0-9]+\s+\S+\s*$")
_STEP = re.compile(r"-?[0-9]+\Z")


def detect(source: Source) -> bool:
    # The first line decides; a later bad line is then reported with its line number.
    first = next((line for line in source.text.splitlines() if line.strip()), None)
    return first is not None and _FIRST.match(first) is not None


def load(path: Path, source: Source) -> Standard:
    text = source.text
    lines = text.split("\n")
    final_newline = lines[-1] == ""
    if final_newline:
        lines.pop()
    steps: list[int] = []
    values: list[float] = []
    seen: dict[int, int] = {}
    spellings: dict[str, str] = {}
    for lineno, line in enumerate(lines, 1):
        tokens = line.split()
        if not tokens:
            raise InputError(path, "blank line (TorchTitan's reader refuses it: every line is `STEP VALUE`)", lineno)
        if len(tokens) != 2 or not _STEP.match(tokens[0]):
            raise InputError(path, f"expected `STEP VALUE` (integer step, number), got {line.strip()[:60]!r}", lineno)
        try:
            value = float(tokens[1])
        except ValueError:
            raise InputError(path, f"value {tokens[1][:40]!r} is not a number", lineno) from None
        step = int(tokens[0])
        if step in seen:
            raise InputError(path, f"step {step} appears twice (lines {seen[step]} and {lineno}; TorchTitan's "
                                   "reader keeps the later one silently)", lineno)
        if steps and step < steps[-1]:
            raise InputError(path, f"step {step} follows step {steps[-1]} (steps must increase)", lineno)
        if repr(value) != tokens[1]:
            spellings.setdefault(repr(value), tokens[1])
        seen[step] = lineno
        steps.append(step)
        values.append(value)
    if not steps:
        raise InputError(path, "empty loss file (TorchTitan's check fails on an empty one)")
    native: dict[str, Any] = {}
    if spellings or not final_newline:
        native = {"format": NAME, "layout": JsonLayout(final_newline=final_newline, spellings=spellings).to_json()}
    return Standard(series={SERIES: SeriesData(SERIES, "", steps, values)}, format=NAME, native=native,
                    path=path, source_text=text)


def render(standard: Standard, target: str) -> str:
    names = list(standard.series)
    if len(names) != 1:
        raise InputError(
            target,
            f"{NAME} holds one series and this standard has {len(names)} "
            f"({', '.join(sorted(names)[:8])}{', ...' if len(names) > 8 else ''}); pick one with --series",
        )
    data = standard.series[names[0]]
    require_int_steps(target, NAME, data)
    layout = standard.layout if standard.native.get("format") == NAME else {}
    spellings = layout.get("spellings", {})
    lines = []
    for step, value in data.points():
        require_number(target, NAME, data.name, step, value, nonfinite=True)
        if type(value) is not float:
            raise InputError(target, f"{NAME} holds floats only (its reader uses float()): series {data.name!r} step "
                                     f"{step}: value {format_value(value)} is an int")
        text = repr(value)
        lines.append(f"{step} {spellings.get(text, text)}")
    return "\n".join(lines) + ("\n" if layout.get("final_newline", True) else "")


def compare(expected: SeriesData, native: dict[str, Any], actual: SeriesData | None) -> PairDivergence | None:
    if actual is None:
        return PairDivergence(1, 0, "missing", expected.steps[0] if len(expected) else ABSENT,
                              expected.values[0] if len(expected) else ABSENT, ABSENT, len_a=len(expected))
    run = last_by_step(actual)
    for index, (step, value) in enumerate(expected.points()):
        hit = run.get(step)
        if hit is None:
            return PairDivergence(1, index, "steps", step, value, ABSENT, step, ABSENT, len(expected), len(run))
        if not (is_number(hit[1]) and hit[1] == value):
            return PairDivergence(1, index, classify(value, hit[1]), step, value, hit[1], step, actual.steps[hit[0]],
                                  len(expected), len(run))
    wanted = set(expected.steps)
    extra = next((i for i, step in enumerate(actual.steps) if step not in wanted), None)
    if extra is not None:  # the step sets must be equal: a step the file lacks fails
        step = actual.steps[extra]
        return PairDivergence(1, len(expected), "steps", step, ABSENT, actual.values[extra], ABSENT, step,
                              len(expected), len(run))
    return None


FORMAT = Format(
    name=NAME,
    title="TorchTitan loss file",
    shape="`STEP VALUE` lines (TorchTitan)",
    order=3,
    detect=detect,
    load=load,
    render=render,
    compare=compare,
    rule="TorchTitan's loss_compare.py: the run's steps must be the file's steps, no more, no fewer; per step "
         "Python == (a NaN never matches; 0.0 matches -0.0)",
    holds_step_types=False,
    holds_series=1,
)
