"""Standards by default: tests/standards/check_training/<test name>.json, beside this file."""

from training import train


def test_loss(detaudit, tmp_path):
    detaudit.verify_metrics(train(tmp_path / "metrics.jsonl"))


def test_loss_scaled(detaudit, tmp_path):
    detaudit.verify_metrics(train(tmp_path / "metrics.jsonl", scale=2.0))
