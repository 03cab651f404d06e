"""``detaudit record``: run a card N times, and write a standard only if all runs agree."""

from __future__ import annotations

import datetime as _dt
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from detaudit import __version__
from detaudit.card import Card, load_card, run_argv, run_env, standard_path
from detaudit.compare import ABSENT, DiffReport, SeriesData, compare_series_sets, diff_runs
from detaudit.errors import UsageError
from detaudit.exclusion import Exclusion
from detaudit.floats import encode_value, format_value
from detaudit.metrics import MetricsRun, read_metrics_many
from detaudit.provenance import detect_environment, git_state, runner_class
from detaudit.runner import RunSpec, RunState, gpu_slots, run_batch
from detaudit.standard import Standard, load_standard, render_standard, standard_lock, write_atomic


@dataclass
class RecordResult:
    """What a record did. ``status``: written, disagree, run-failed, runner-mismatch (--cluster)."""

    status: str
    standard_path: Path | None  # None: a --cluster record that failed before the runs' class was known
    runs: list[RunState]
    workdir: Path
    report: DiffReport | None = None
    standard: Standard | None = None
    changes: list[str] = field(default_factory=list)  # with update: what changed vs the old file
    dropped: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "written"


def exclusion_for(card: Card | None, exclude: tuple[str, ...] = (), include: tuple[str, ...] = ()) -> Exclusion:
    return Exclusion(card=card.exclude if card else (), cli=tuple(exclude), include=tuple(include) + (card.include if card else ()))


def make_specs(card: Card, count: int, workdir: Path, extra_args: tuple[str, ...] = ()) -> list[RunSpec]:
    specs = []
    for i in range(count):
        run_dir = workdir / f"run{i + 1}"
        metrics = run_dir / "metrics.jsonl"
        specs.append(
            RunSpec(
                index=i,
                argv=run_argv(card, run_dir, metrics, extra_args),
                env=run_env(card, run_dir, metrics, i),
                workdir=run_dir,
                log_path=run_dir / "run.log",
                metrics_path=metrics,
                timeout_s=card.timeout_s,
            )
        )
    return specs


def resolve_runner(card: Card, info: dict[str, Any]) -> list[str]:
    return list(card.runner) if card.runner is not None else runner_class(info, card.gpus_per_run)


def record(
    card_path: str | Path,
    *,
    runs: int = 3,
    parallel: int = 1,
    out: str | Path | None = None,
    update: bool = False,
    allow_partial: bool = False,
    fmt: str = "detaudit",
    extra_args: tuple[str, ...] = (),
    exclude: tuple[str, ...] = (),
    include: tuple[str, ...] = (),
    workdir: str | Path | None = None,
    cluster: str | None = None,
    on_update: Callable[[list[RunState]], None] | None = None,
    on_start: Callable[[Path, list[str] | None], None] | None = None,
) -> RecordResult:
    """Run the card ``runs`` times and write its standard if every compared series agrees.

    Raises ``UsageError`` before running anything when the standard exists and ``update``
    is false, or when another record of the same standard holds its lock. With ``cluster``
    (a Ray job server address) the runs are Ray jobs (``detaudit.cluster``); the runner
    class is the one the nodes report, so without ``out`` the standard's name, and whether
    it exists, is known only after the runs.
    """
    if runs < 2:
        raise UsageError("--runs must be at least 2: a standard needs runs that agree")
    if fmt not in ("detaudit", "miles"):
        raise UsageError(f"unknown --format {fmt!r} (detaudit or miles)")
    card = load_card(card_path)
    if cluster is not None:
        return _record_on_cluster(card, Path(card_path), cluster, runs=runs, parallel=parallel, out=out, update=update,
                                  allow_partial=allow_partial, fmt=fmt, extra_args=extra_args, exclude=exclude,
                                  include=include, workdir=workdir, on_update=on_update, on_start=on_start)
    info = detect_environment()
    cls = resolve_runner(card, info)
    path = Path(out) if out is not None else standard_path(card, cls)
    old = _existing(path, update)
    with standard_lock(path):
        base = _base_dir(card, workdir)
        specs = make_specs(card, runs, base, extra_args)
        if on_start:
            on_start(base, cls)
        slots = gpu_slots(card.gpus_per_run, parallel)
        states = run_batch(specs, parallel=parallel, gpu_sets=slots, on_update=on_update)
        if not all(s.ok for s in states):
            return RecordResult("run-failed", path, states, base)
        return _compare_and_write(card, cls, info, specs, states, base, path, old, update=update,
                                  allow_partial=allow_partial, fmt=fmt, extra_args=extra_args, exclude=exclude,
                                  include=include)


def _record_on_cluster(card: Card, card_path: Path, cluster: str, *, runs: int, parallel: int, out: str | Path | None,
                       update: bool, allow_partial: bool, fmt: str, extra_args: tuple[str, ...],
                       exclude: tuple[str, ...], include: tuple[str, ...], workdir: str | Path | None,
                       on_update: Callable[[list[RunState]], None] | None,
                       on_start: Callable[[Path, list[str] | None], None] | None) -> RecordResult:
    from detaudit.cluster import common_runner_class, run_jobs

    path = Path(out) if out is not None else None
    if path is not None:
        _existing(path, update)
    base = _base_dir(card, workdir)
    specs = make_specs(card, runs, base, extra_args)
    if on_start:
        on_start(base, None)
    states = run_jobs(card, card_path, specs, cluster, parallel=parallel, extra_args=extra_args, on_update=on_update)
    if not all(s.ok for s in states):
        return RecordResult("run-failed", path, list(states), base)
    cls = common_runner_class(states)
    if cls is None:
        return RecordResult("runner-mismatch", path, list(states), base)
    path = path if path is not None else standard_path(card, cls)
    old = _existing(path, update)
    with standard_lock(path):
        return _compare_and_write(card, cls, states[0].environment or {}, specs, list(states), base, path, old,
                                  update=update, allow_partial=allow_partial, fmt=fmt, extra_args=extra_args,
                                  exclude=exclude, include=include)


def _existing(path: Path, update: bool) -> Standard | None:
    """The standard at ``path`` if ``update`` may replace it; ``UsageError`` if it may not."""
    if path.exists() and not update:
        raise UsageError("exists; pass --update to replace it", path)
    return load_standard(path) if path.exists() else None


def _base_dir(card: Card, workdir: str | Path | None) -> Path:
    base = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=f"detaudit-{card.name}-"))
    base.mkdir(parents=True, exist_ok=True)
    return base


def _compare_and_write(card: Card, cls: list[str], info: dict[str, Any], specs: list[RunSpec], states: list[RunState],
                       base: Path, path: Path, old: Standard | None, *, update: bool, allow_partial: bool, fmt: str,
                       extra_args: tuple[str, ...], exclude: tuple[str, ...], include: tuple[str, ...]) -> RecordResult:
    exclusion = exclusion_for(card, exclude, include)
    parsed = _read_runs(specs, card, exclusion)
    report = diff_runs(parsed, labels=[f"run{i + 1}" for i in range(len(specs))])
    report.exclude_patterns = exclusion.patterns()
    if not report.ok and not allow_partial:
        return RecordResult("disagree", path, states, base, report=report)
    standard = build_standard(card, cls, info, parsed[0], report, extra_args, fmt)
    text = render_standard(standard)
    write_atomic(path, text, overwrite=update)
    standard.path = path
    changes = describe_changes(old, standard) if old is not None else []
    return RecordResult(
        "written", path, states, base, report=report, standard=standard, changes=changes, dropped=standard.dropped
    )


def _read_runs(specs: list[RunSpec], card: Card, exclusion: Exclusion) -> list[MetricsRun]:
    return read_metrics_many([s.metrics_path for s in specs], default_step_key=card.step_key, exclusion=exclusion)


def build_standard(
    card: Card,
    cls: list[str],
    info: dict[str, Any],
    first: MetricsRun,
    report: DiffReport,
    extra_args: tuple[str, ...],
    fmt: str,
) -> Standard:
    """The standard from the first run's agreeing series (all of them unless partial)."""
    keep = set(report.identical)
    series = {
        name: SeriesData.from_run(first, s) for name, s in first.series.items() if name in keep
    }
    dropped = {
        m.series: {"kind": m.kind, "step": encode_value(m.step), "disagreeing_runs": [r + 1 for r in m.disagreeing_runs]}
        for m in report.mismatched
    }
    git = git_state(card.path)
    command = list(card.command) + list(extra_args)
    if fmt == "miles":
        meta = {"commit": git["commit"], "source": f"detaudit record {card.path} ({len(report.runs)} agreeing runs)"}
        return Standard(series=series, format="miles", meta=meta, name=card.name, dropped=dropped)
    runner: dict[str, Any] = {"class": cls}
    for key in ("gpu", "driver", "cuda", "torch", "python", "cpu_capability"):
        if info.get(key) is not None:
            runner[key] = info[key]
    agreeing = len(report.runs) - len({r for m in report.mismatched for r in m.disagreeing_runs})
    recorded = {
        "runs": len(report.runs),
        "agreeing": agreeing,
        "commit": git["commit"],
        "dirty": git["dirty"],
        "card": str(card.path),
        "command": command,
        "detaudit": __version__,
        "date": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
    }
    excluded = {"patterns": report.exclude_patterns, "series": report.excluded}
    return Standard(
        series=series,
        format="detaudit",
        name=card.name,
        runner=runner,
        recorded=recorded,
        excluded=excluded,
        dropped=dropped,
    )


def describe_changes(old: Standard, new: Standard) -> list[str]:
    """Lines saying how ``new``'s series differ from ``old``'s (for ``--update``)."""
    compared, identical, mismatched = compare_series_sets(
        [old.series, new.series], lenient_steps=old.format == "miles" or new.format == "miles"
    )
    lines = []
    for m in sorted(mismatched, key=lambda m: m.series):
        first = m.first
        if first.kind == "missing":
            lines.append(f"{'added' if m.series not in old.series else 'removed'}: {m.series}")
        else:
            lines.append(
                f"changed: {m.series} from step {format_value(first.step)} ({first.kind}): "
                f"{_fmt(first.value_a)} -> {_fmt(first.value_b)}"
            )
    if not lines:
        lines.append(f"series unchanged ({len(identical)} identical)")
    return lines


def _fmt(value: Any) -> str:
    return "absent" if value is ABSENT else format_value(value)
