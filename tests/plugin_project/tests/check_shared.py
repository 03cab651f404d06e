"""Two tests (two parameters) that name one standard: under an update option, an error naming both."""

import pytest

from training import train


@pytest.mark.parametrize("scale", [1.0, 3.0])
def test_shared(detaudit, tmp_path, scale):
    detaudit.verify_metrics(train(tmp_path / "metrics.jsonl", scale=scale), "standards/shared.json")
