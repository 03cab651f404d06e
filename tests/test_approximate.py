"""Approximate standards: per-series tolerances for a named runner class, opt in, never "identical"."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from detaudit.runner_class import RunnerClass
from detaudit.data.card import load_card
from detaudit.errors import InputError
from detaudit.data.approximate import Tolerance, approximate_rule

from conftest import TOY, run_cli


def card_text(tmp_path: Path, runner: str, approximate: str = "") -> str:
    command = json.dumps(["{python}", str(TOY)])
    return (f'name = "toy"\ncommand = {command}\ntimeout_s = 60\nrunner = {runner}\n'
            f'standards_dir = "{tmp_path / "standards"}"\n{approximate}')


def test_tolerance_rules() -> None:
    tol = Tolerance(rtol=1e-9)
    assert tol.allows(1.0, 1.0 + 1e-12) and not tol.allows(1.0, 1.0 + 1e-6)
    assert not tol.allows(1.0, math.nan) and tol.allows(math.nan, math.nan)
    assert not tol.allows(1, 1.0)  # types still match exactly
    assert Tolerance(max_ulps=2).allows(0.1, math.nextafter(0.1, 1)) and not Tolerance(max_ulps=0).allows(0.1, 0.2)
    assert Tolerance(atol=1).allows(3, 2) and not Tolerance(atol=0.5).allows(3, 2)


def test_card_validation(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(card_text(tmp_path, '["cpu", "b"]', '[approximate."cpu-b"]\nagainst = "cpu-a"\n"x/*" = { rtol = -1 }\n'))
    with pytest.raises(InputError, match=r"approximate.cpu-b.x/\*.rtol: must be a non-negative number"):
        approximate_rule(load_card(path), RunnerClass(("cpu", "b")))
    path.write_text(card_text(tmp_path, '["cpu", "b"]', '[approximate."cpu-b"]\n"x" = { rtol = 0.1 }\n'))
    with pytest.raises(InputError, match="needs against"):
        approximate_rule(load_card(path), RunnerClass(("cpu", "b")))
    assert approximate_rule(load_card(path), RunnerClass(("cpu", "c"))) is None


@pytest.mark.slow
def test_verify_on_another_class_within_tolerance_is_approximate_never_identical(tmp_path: Path) -> None:
    card = tmp_path / "toy.toml"
    card.write_text(card_text(tmp_path, '["cpu", "ref"]'))
    assert run_cli("record", str(card), "--runs", "2", "--no-doctor").code == 0
    # Exact stays the default on the recorded class: a reordered sum fails.
    exact = run_cli("verify", str(card), "--", "--reorder")  # --reorder always changes the last bits
    assert exact.code == 1 and "FAILED" in exact.out, exact.text
    tolerances = ('[approximate."cpu-other"]\nagainst = "cpu-ref"\n'
                  '"rollout/reward/raw_mean" = { rtol = 1e-12 }\n"train/*" = { rtol = 1e-12 }\n')
    card.write_text(card_text(tmp_path, '["cpu", "other"]', tolerances))
    approx = run_cli("verify", str(card), "--", "--reorder")
    assert approx.code == 0, approx.text
    assert "PASSED (approximate, not identical)" in approx.out and "within tolerance (approximate)" in approx.out
    assert "against the cpu-ref standard" in approx.out and "PASSED:" not in approx.out
    # A series the card gives no tolerance stays exact.
    card.write_text(card_text(tmp_path, '["cpu", "other"]',
                              '[approximate."cpu-other"]\nagainst = "cpu-ref"\n"rollout/reward/raw_mean" = { rtol = 1e-12 }\n'))
    strict = run_cli("verify", str(card), "--", "--reorder")
    assert strict.code == 1 and "train/loss: step" in strict.out, strict.text
    # Without an approximate entry, another class is NOT VERIFIED (fail closed).
    card.write_text(card_text(tmp_path, '["cpu", "other"]'))
    assert run_cli("verify", str(card)).code == 1


def test_an_infinite_standard_value_is_no_licence_for_any_run_value() -> None:
    for tol in (Tolerance(rtol=0.5), Tolerance(atol=1e300), Tolerance(rtol=1e300, atol=1e300)):
        assert not tol.allows(math.inf, 1.0) and not tol.allows(math.inf, -math.inf)
        assert not tol.allows(-math.inf, 1e308) and not tol.allows(1e308, math.inf)
        assert tol.allows(math.inf, math.inf) and tol.allows(-math.inf, -math.inf)  # the very same value


def test_integers_beyond_float_range_are_compared_exactly_without_a_traceback() -> None:
    from detaudit.data.approximate import compare_within
    from detaudit.data.compare import SeriesData

    big = 10 ** 400
    assert Tolerance(rtol=1e-9).allows(big, big + 1) and not Tolerance(rtol=1e-9).allows(big, 2 * big)
    assert Tolerance(atol=5).allows(big, big + 5) and not Tolerance(atol=5).allows(big, big + 6)
    assert Tolerance(rtol=2.0).allows(1e308, -1e308)  # |a - b| = 2e308 is over float range, still exactly <= 2 * 1e308
    expected = SeriesData("n", "s", [1, 2], [big, 1])
    assert compare_within(expected, SeriesData("n", "s", [1, 2], [big + 1, 1]), Tolerance(rtol=1e-9)) is None
    divergence = compare_within(expected, SeriesData("n", "s", [1, 2], [3 * big, 1]), Tolerance(rtol=1e-9))
    assert divergence is not None and divergence.step == 1
