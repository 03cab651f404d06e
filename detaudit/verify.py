"""``detaudit verify``: the CI gate. One run (or an existing JSONL) against a standard."""

from __future__ import annotations

import glob
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from detaudit.card import Card, load_card, standard_path
from detaudit.compare import PairDivergence, SeriesData, compare_series
from detaudit.errors import InputError, UsageError
from detaudit.metrics import read_metrics
from detaudit.provenance import detect_environment, provenance_differences
from detaudit.record import exclusion_for, make_specs, resolve_runner
from detaudit.runner import RunState, run_batch
from detaudit.standard import Standard, load_standard


@dataclass
class VerifyResult:
    """``status``: passed, failed, skipped (runner class differs), run-failed."""

    status: str
    standard_path: Path | None  # None: a --cluster run that failed before its runner class was known
    standard: Standard | None = None
    failures: list[tuple[str, PairDivergence]] = field(default_factory=list)
    compared: int = 0
    extra_series: list[str] = field(default_factory=list)  # in the run, not in the standard
    runner_here: list[str] | None = None
    runner_standard: list[str] | None = None
    provenance: list[str] = field(default_factory=list)  # how this environment differs
    run: RunState | None = None
    metrics_path: Path | None = None

    @property
    def ok(self) -> bool:
        return self.status in ("passed", "skipped")


def verify(
    card_path: str | Path | None = None,
    *,
    metrics: str | Path | None = None,
    standard: str | Path | None = None,
    strict_runner: bool = False,
    step_key: str | None = None,
    extra_args: tuple[str, ...] = (),
    workdir: str | Path | None = None,
    cluster: str | None = None,
    on_update: Callable[[list[RunState]], None] | None = None,
) -> VerifyResult:
    """Compare one run with a standard; see the module doc of ``detaudit.cli`` for exits.

    With ``cluster`` (a Ray job server address) the run is a Ray job; its runner class and
    environment are the ones its node reports, and they pick the standard.
    """
    if card_path is None and metrics is None:
        raise UsageError("give a CARD to run, or --metrics RUN.jsonl")
    if card_path is None and standard is None:
        raise UsageError("--metrics without a CARD needs --standard FILE")
    card: Card | None = load_card(card_path) if card_path is not None else None
    info: dict[str, Any] | None = None
    here: list[str] | None = None
    cluster_run: RunState | None = None
    if card is not None and metrics is None and cluster is not None:
        from detaudit.cluster import run_jobs

        spec = make_specs(card, 1, _base_dir(card, workdir), extra_args)[0]
        cluster_run = run_jobs(card, Path(card_path), [spec], cluster, extra_args=extra_args, on_update=on_update)[0]
        if not cluster_run.ok:
            return VerifyResult("run-failed", Path(standard) if standard is not None else None, run=cluster_run)
        info, here = cluster_run.environment or {}, cluster_run.runner_class
        metrics = spec.metrics_path
    elif card is not None:
        info = detect_environment()
        here = resolve_runner(card, info)
    path = Path(standard) if standard is not None else standard_path(card, here)  # type: ignore[arg-type]
    if standard is None and card is not None and not path.exists():
        # No standard for this runner class: one recorded on another class means SKIPPED.
        others = sorted(Path(card.standards_dir).glob(f"{glob.escape(card.name)}.*.json"))
        if others:
            other = load_standard(others[0])
            return VerifyResult("skipped", others[0], other, runner_here=here, runner_standard=other.runner_class)
        raise InputError(path, f"no standard for card {card.name!r} (record one with `detaudit record {card.path}`)")
    std = load_standard(path)
    result = VerifyResult("passed", path, std, runner_here=here, runner_standard=std.runner_class, run=cluster_run)
    if here is not None and std.runner_class is not None and here != std.runner_class:
        result.status = "skipped"
        return result
    if metrics is None:
        assert card is not None
        base = _base_dir(card, workdir)
        spec = make_specs(card, 1, base, extra_args)[0]
        state = run_batch([spec], on_update=on_update)[0]
        result.run = state
        if not state.ok:
            result.status = "run-failed"
            return result
        metrics = spec.metrics_path
    result.metrics_path = Path(metrics)
    default_step_key = step_key or (card.step_key if card else None)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        # The standard's series are always compared, whatever the exclude patterns say.
        keep = tuple(glob.escape(name) for name in std.series)
        run = read_metrics(metrics, default_step_key=default_step_key, exclusion=exclusion_for(card, include=keep))
    lenient = std.format == "miles"
    for name, expected in sorted(std.series.items()):
        actual = SeriesData.from_run(run, run.series[name]) if name in run.series else None
        divergence = compare_series(expected, actual, 1, lenient_steps=lenient)
        if divergence is not None:
            result.failures.append((name, divergence))
    result.compared = len(std.series)
    result.extra_series = sorted(n for n in run.series if n not in std.series and n not in std.dropped)
    if result.failures:
        result.status = "failed"
        current = info if info is not None else detect_environment()
        result.provenance = provenance_differences(std.runner, current)
    return result


def _base_dir(card: Card, workdir: str | Path | None) -> Path:
    return Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=f"detaudit-verify-{card.name}-"))
