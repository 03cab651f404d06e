"""A Megatron-LM golden (every 5th step of 201) checked against a run that logs every step."""

from training import train


def test_megatron_golden(detaudit, tmp_path):
    detaudit.verify_metrics(train(tmp_path / "metrics.jsonl", steps=201, key="lm loss"),
                            "golden/golden_values_dev.json")
