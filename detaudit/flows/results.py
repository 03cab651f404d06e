"""What each use case returns: typed results and their statuses (data only, no rendering).

Statuses are ``StrEnum`` members: they compare equal to their text and serialise as it, so a
JSON report and an ``if result.status == VerifyStatus.PASSED`` read the same value. Which
statuses count as success is said here, once, by each enum's ``ok``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Every module below is named in annotations only (strings here): every command imports this module,
# and none pays for the card parser, the run spec (subprocess) or the trace comparison through it.
if TYPE_CHECKING:
    from detaudit.data.card import Card
    from detaudit.data.compare import DiffReport, PairDivergence
    from detaudit.data.metrics import MetricsRun
    from detaudit.run.spec import RunState
    from detaudit.runner_class import RunnerClass
    from detaudit.standards.diff import StandardDiff
    from detaudit.standards.standard import Standard
    from detaudit.trace.compare import (
        Collision,
        RunsTraceReport,
        TraceComparison,
        UnseededUse,
    )
    from detaudit.trace.files import RunTrace
    from detaudit.trace.parity import ParityReport
    from detaudit.trace.seed_repeats import SeedCheck


class RecordStatus(StrEnum):
    WRITTEN = "written"
    AGREED = "agreed"  # write=False: the runs agree, nothing written
    DISAGREE = "disagree"
    EMPTY = "empty"  # no series left to compare: nothing a standard could hold
    RUN_FAILED = "run-failed"
    RUNNER_MISMATCH = "runner-mismatch"  # cluster runs on another runner class than the probe's
    # --trace: the metrics agree, but the traces differ or cannot prove the runs always will
    # (unseeded draws, seed collisions, seeds repeated within a step, an incomplete trace)
    TRACE_NOT_OK = "trace-not-ok"

    @property
    def ok(self) -> bool:
        return self in (RecordStatus.WRITTEN, RecordStatus.AGREED)


class VerifyStatus(StrEnum):
    PASSED = "passed"
    APPROXIMATE = "approximate"  # passed within the card's tolerances for this class, never "passed"
    SKIPPED = "skipped"  # the standard is for another class, and other runners are allowed
    FAILED = "failed"
    RUN_FAILED = "run-failed"
    NOT_VERIFIED = "not-verified"  # the standard is for another runner class
    EMPTY_STANDARD = "empty-standard"  # it has no series, so proves nothing
    RUNNER_MISMATCH = "runner-mismatch"  # a --cluster run landed on another class than its probe
    PROFILE_REFUSED = "profile-refused"  # the card's portable profile cannot be honoured on this machine
    ERROR = "error"  # a suite card with bad input (the message is in CardOutcome.error)

    @property
    def ok(self) -> bool:
        return self in (VerifyStatus.PASSED, VerifyStatus.APPROXIMATE, VerifyStatus.SKIPPED)

    @property
    def label(self) -> str:
        """The verdict as reports print it."""
        return _VERIFY_LABELS[self]


_VERIFY_LABELS = {
    VerifyStatus.PASSED: "PASSED", VerifyStatus.FAILED: "FAILED", VerifyStatus.RUN_FAILED: "RUN FAILED",
    VerifyStatus.NOT_VERIFIED: "NOT VERIFIED", VerifyStatus.SKIPPED: "SKIPPED",
    VerifyStatus.APPROXIMATE: "PASSED (approximate)", VerifyStatus.EMPTY_STANDARD: "NOT VERIFIED (empty standard)",
    VerifyStatus.RUNNER_MISMATCH: "NOT VERIFIED (runner mismatch)", VerifyStatus.ERROR: "ERROR",
    VerifyStatus.PROFILE_REFUSED: "NOT VERIFIED (portable profile)",
}


class TraceStatus(StrEnum):
    OK = "ok"
    RUN_FAILED = "run-failed"


class TraceFailure(StrEnum):
    """Why ``detaudit trace`` is not ok: each a reason of its own (``TraceResult.failures``)."""

    RUN_FAILED = "run-failed"
    INCOMPLETE = "incomplete"          # a process not traced, or killed before its ledger ended: proves nothing
    TRACES_DIFFER = "traces-differ"    # --against: this run's trace differs from the saved one
    UNSEEDED = "unseeded"              # the program drew from a generator its process never seeded (or seeded from the OS)
    SEED_COLLISION = "seed-collision"  # replicas drew identical streams: seeded alike
    SEEDS_REPEATED = "seeds-repeated"  # samples of one step given the same seed
    PARITY = "parity"                  # --parity: a pair differs, or nothing was paired


def trace_failures(incomplete: bool, comparison: TraceComparison | None, unseeded: list[UnseededUse],
                   collisions: list[Collision], seeds: SeedCheck | None) -> list[TraceFailure]:
    """Why a trace is not ok, in this order (``trace``, and ``record --trace`` whose runs' metrics
    agree). A draw made inside library internals only (no frame of the program on the stack, such
    as Ray's own ``random``) is listed apart and does not fail."""
    out = []
    if incomplete:
        out.append(TraceFailure.INCOMPLETE)
    if comparison is not None and not comparison.identical:
        out.append(TraceFailure.TRACES_DIFFER)
    if any(not u.library_only for u in unseeded):
        out.append(TraceFailure.UNSEEDED)
    if collisions:
        out.append(TraceFailure.SEED_COLLISION)
    if seeds is not None and not seeds.ok:
        out.append(TraceFailure.SEEDS_REPEATED)
    return out


def runs_trace_failures(report: RunsTraceReport) -> list[TraceFailure]:
    """Why ``record --trace`` writes no standard although the runs' metrics agree: the traces of
    the runs differ (the same metrics by luck), or the first run's trace cannot prove that the
    next run will draw alike. Replicas seeded alike stay a warning here: identical initial weights
    (what data-parallel ranks and engine replicas need) draw identical streams by design, and
    the same standard holds either way; ``detaudit trace`` fails on them."""
    incomplete = bool(report.missing or report.incomplete) or not report.first_complete
    return trace_failures(incomplete, report.comparison, report.unseeded, [], report.seeds)


@dataclass
class RecordResult:
    """What a record did (see ``RecordStatus``)."""

    status: RecordStatus
    standard_path: Path | None
    runs: list[RunState]
    workdir: Path | None  # None: nothing ran (``record --metrics``)
    report: DiffReport | None = None
    standard: Standard | None = None
    dropped: dict[str, Any] = field(default_factory=dict)
    workdir_removed: bool = False
    nan_dropped: list[str] = field(default_factory=list)  # --drop-nan-series: series left out for holding NaN
    review: StandardDiff | None = None  # with update: the old standard against the new (``standard diff``)
    trace: RunsTraceReport | None = None  # with ``trace``: the runs' traces compared
    runner_class: RunnerClass | None = None  # the class the runs were planned for
    standard_trace: Path | None = None  # traced and written: run 1's trace, saved next to the standard
    stale_trace_removed: Path | None = None  # --update without --trace: the old standard's trace, removed
    card: Card | None = field(default=None, repr=False)  # the card as parsed (reports read it from here)
    metrics: list[MetricsRun] | None = field(default=None, repr=False)  # the runs' metrics as compared
    metrics_files: list[Path] = field(default_factory=list)  # ``record --metrics``: the files compared
    unchanged: bool = False  # an update with identical series that left the file's bytes (keep_unchanged)
    compile_cache: Path | None = None  # run 1's compile artifacts, shipped next to the standard
    trace_failures: list[TraceFailure] = field(default_factory=list)  # TRACE_NOT_OK: why, in order

    @property
    def ok(self) -> bool:
        return RecordStatus(self.status).ok


@dataclass
class VerifyResult:
    """What a verify found (see ``VerifyStatus``)."""

    status: VerifyStatus
    standard_path: Path
    standard: Standard | None = None
    failures: list[tuple[str, PairDivergence]] = field(default_factory=list)
    compared: int = 0
    extra_series: list[str] = field(default_factory=list)  # in the run, not in the standard
    runner_here: RunnerClass | None = None
    runner_standard: RunnerClass | None = None
    other_classes: list[RunnerClass] = field(default_factory=list)  # classes that have a standard of the card
    provenance: list[str] = field(default_factory=list)  # how this environment differs (on failure)
    package_changes: list[str] = field(default_factory=list)  # package versions that differ, even on a pass
    # The package_changes that can change bits (torch and its build, CUDA/cuDNN, numpy, the card's own
    # imports): reports name these and count the rest (``detaudit env CARD --diff STANDARD`` lists all).
    bit_packages: list[str] = field(default_factory=list)
    run: RunState | None = None
    metrics_path: Path | None = None
    workdir: Path | None = None
    workdir_removed: bool = False
    trace: RunsTraceReport | None = None  # with ``trace``: the run's unseeded draws and collisions
    standard_trace: Path | None = None  # the trace the standard carries, compared with this run's
    compile_cache: Path | None = None  # the compile artifacts the standard ships, offered to the run
    approximate: list[tuple[str, str]] = field(default_factory=list)  # (series, tolerance) passed only within tolerance
    approximate_against: str | None = None  # set when checked approximately: the standard's runner class
    left_out: dict[str, str] = field(default_factory=dict)  # standard series not compared (--exclude) -> why
    renamed: dict[str, str] = field(default_factory=dict)  # run series -> standard series it was compared as
    refusal: str | None = None  # PROFILE_REFUSED: why this machine cannot honour the card's portable profile
    run_metrics: MetricsRun | None = field(default=None, repr=False)  # the run as the comparison read it (reports draw it)
    card: Card | None = field(default=None, repr=False)  # the card as parsed (None with --metrics alone)
    # Why the run's runner class was not checked against the standard's (None: it was, or no class
    # is known on either side): ``verify --metrics`` without a card or ``--runner-class``.
    runner_unchecked: str | None = None

    @property
    def ok(self) -> bool:
        return VerifyStatus(self.status).ok


@dataclass
class TraceResult:
    """One traced run of a card, summarised, saved or compared (see ``TraceStatus``)."""

    status: TraceStatus
    mode: str
    run: RunState
    trace_dir: Path
    trace: RunTrace | None = None
    unseeded: list[UnseededUse] = field(default_factory=list)
    collisions: list[Collision] = field(default_factory=list)
    comparison: TraceComparison | None = None
    saved: Path | None = None
    against: Path | None = None
    seeds: SeedCheck | None = None  # seeds repeated within a step
    parity: ParityReport | None = None  # with --parity: the two processes' module calls compared

    @property
    def failures(self) -> list[TraceFailure]:
        """Why the trace is not ok, in this order; none: ok. Fail closed: a draw from a generator the
        program's own code never seeded fails; draws made inside library internals only (no frame of
        the program on the stack, such as Ray's own ``random``) are listed apart and do not."""
        if self.status != TraceStatus.OK:
            return [TraceFailure.RUN_FAILED]
        out = trace_failures(self.trace is None or bool(self.trace.problems), self.comparison, self.unseeded,
                             self.collisions, self.seeds)
        if self.parity is not None and not self.parity.ok:
            out.append(TraceFailure.PARITY)
        return out

    @property
    def ok(self) -> bool:
        return not self.failures


@dataclass
class DiffResult:
    """``detaudit diff``: the runs' comparison and the runs as read."""

    report: DiffReport
    runs: list[MetricsRun] = field(repr=False)

    @property
    def ok(self) -> bool:
        return self.report.ok


@dataclass
class ReviewResult:
    """``detaudit standard diff``: the two standards, as read, and how they differ."""

    diff: StandardDiff
    old: Standard = field(repr=False)
    new: Standard = field(repr=False)

    @property
    def ok(self) -> bool:
        return self.diff.identical


@dataclass
class SuitePlan:
    suite: str | None
    cards: list[Card]
    budget: float | None = None

    @property
    def unknown(self) -> list[str]:
        """Cards without ``est_time``: their time cannot be planned."""
        return [c.name for c in self.cards if c.est_time is None]

    @property
    def total(self) -> float:
        """Sum of the known ``est_time`` (runs one after another)."""
        return sum(c.est_time or 0.0 for c in self.cards)

    @property
    def gpu_seconds(self) -> float:
        return sum((c.est_time or 0.0) * c.gpus_per_run for c in self.cards)

    @property
    def fits(self) -> bool | None:
        """None without a budget; False over it, or when any card's time is unknown."""
        if self.budget is None:
            return None
        return not self.unknown and self.total <= self.budget


@dataclass
class CardOutcome:
    """One card of a suite verify: verify's status, or ``error`` (bad input, message in ``error``)."""

    card: Card
    status: VerifyStatus
    result: VerifyResult | None = None
    error: str | None = None
    elapsed: float = 0.0  # wall time of the card's verify, run included

    @property
    def ok(self) -> bool:
        return VerifyStatus(self.status).ok

    @property
    def run_elapsed(self) -> float | None:
        run = self.result.run if self.result is not None else None
        return run.elapsed if run is not None and run.started is not None else None


@dataclass
class SuiteResult:
    suite: str | None
    outcomes: list[CardOutcome] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 every card passed (or skipped), 2 a card had bad input, else 1."""
        if any(o.status == VerifyStatus.ERROR for o in self.outcomes):
            return 2
        return 0 if all(o.ok for o in self.outcomes) else 1
