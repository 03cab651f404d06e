"""Suites of cards: plan them against a CI time budget, and verify them all in one go.

Cards carry ``est_time`` (seconds for one run), ``gpus_per_run`` and ``suite``. ``plan_suite``
lists a suite's cards with those and the total; ``verify_suite`` runs ``verify`` on each card
and keeps every outcome, so one table and one exit code cover the suite.

Fail closed: a suite with no cards is an error (an empty gate proves nothing), and a budget
check with a card that has no ``est_time`` cannot be proven to fit, so it does not.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from detaudit.data.card import Card, load_card
from detaudit.errors import InputError, UsageError
from detaudit.flows.results import CardOutcome, SuitePlan, SuiteResult, VerifyStatus
from detaudit.flows.verify import verify

DEFAULT_CARDS_DIR = "recipes"


def find_cards(cards_dir: str | Path = DEFAULT_CARDS_DIR, suite: str | None = None) -> list[Card]:
    """Every card (``*.toml``) in ``cards_dir``, sorted by path; only ``suite``'s when given.

    A TOML file there that is not a valid card is an error (``InputError``), not skipped.
    """
    folder = Path(cards_dir)
    if not folder.is_dir():
        raise InputError(folder, "cards folder not found")
    cards = [load_card(path) for path in sorted(folder.glob("*.toml"))]
    if suite is not None:
        cards = [c for c in cards if c.suite == suite]
        if not cards:
            known = sorted({c.suite for c in (load_card(p) for p in sorted(folder.glob("*.toml"))) if c.suite})
            raise UsageError(f"no card in suite {suite!r} (suites here: {', '.join(known) or 'none'})", folder)
    elif not cards:
        raise UsageError("no cards (*.toml) here", folder)
    return cards


def plan_suite(cards_dir: str | Path = DEFAULT_CARDS_DIR, suite: str | None = None, budget: float | None = None) -> SuitePlan:
    return SuitePlan(suite, find_cards(cards_dir, suite), budget)


def over_estimate(card: Card, elapsed: float) -> bool:
    """True when a run took longer than the card's ``est_time`` (plans built on it are wrong)."""
    return card.est_time is not None and elapsed > card.est_time


def verify_suite(
    cards: list[Card],
    *,
    suite: str | None = None,
    allow_other_runner: bool = False,
    on_card: Callable[[Card], None] | None = None,
    on_update: Callable[[list[Any]], None] | None = None,
    workdir: str | Path | None = None,
) -> SuiteResult:
    """Verify each card in turn, keeping going after a failure so the table covers the suite.

    ``workdir``: each card's run dir goes under ``WORKDIR/<card file stem>`` and is kept (default:
    a new temp dir per card, removed when its run passed)."""
    result = SuiteResult(suite)
    for card in cards:
        if on_card:
            on_card(card)
        started = time.monotonic()
        try:
            outcome = verify(card, allow_other_runner=allow_other_runner, on_update=on_update,  # parsed once
                             workdir=Path(workdir) / card.path.stem if workdir is not None else None)
        except InputError as exc:
            result.outcomes.append(CardOutcome(card, VerifyStatus.ERROR, error=str(exc), elapsed=time.monotonic() - started))
            continue
        result.outcomes.append(CardOutcome(card, outcome.status, outcome, elapsed=time.monotonic() - started))
    return result
