"""Test ids longer than a file name may be: each standard's name is cut and ends with a hash."""

import pytest

from training import train

LONG = "x" * 290


@pytest.mark.parametrize("scale", [1.0, 2.0], ids=[LONG + "-one", LONG + "-two"])
def test_long(detaudit, tmp_path, scale):
    detaudit.verify_metrics(train(tmp_path / "metrics.jsonl", scale=scale))
