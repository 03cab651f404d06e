"""The marker's arguments: each one it takes is used, any other fails the test."""

from pathlib import Path

import pytest

from training import train


@pytest.mark.detaudit(metrics="out/metrics.jsonl", standard="standards/marked.json")  # metrics: from the cwd
def test_metrics_marker():
    Path("out").mkdir(exist_ok=True)
    train(Path("out") / "metrics.jsonl")


@pytest.mark.detaudit(metric="out/metrics.jsonl")
def test_misspelt_argument():
    pass


@pytest.mark.detaudit("out/metrics.jsonl")
def test_positional_argument():
    pass
