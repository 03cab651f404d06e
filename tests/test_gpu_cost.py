"""benchmarks/gpu_cost.py's reading of a run: the figures docs/validation.md reports, from the committed metrics."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from gpu_cost import loop_figures  # noqa: E402

pytestmark = pytest.mark.recipe


def test_loop_figures_of_a_committed_run() -> None:
    fig = loop_figures(REPO / "docs" / "validation" / "cost_flash_nondeterministic.jsonl", 787.3577014301909)
    assert fig["loops_averaged"] == 2  # rollouts 2 and 3; the first is warm-up
    assert fig["pflop_per_loop"] == pytest.approx(7.191063422828544)
    assert fig["loop_s"] == pytest.approx(38.720001736)
    assert fig["mfu"] == pytest.approx(0.23587704105624674)
    assert fig["train_pairs_per_s"] == pytest.approx(22.26344258676959)
    assert loop_figures(REPO / "docs" / "validation" / "cost_flash_nondeterministic.jsonl", None)["mfu"] is None


def test_a_run_without_a_finished_loop_is_refused(tmp_path: Path) -> None:
    lines = (REPO / "docs" / "validation" / "cost_flash_nondeterministic.jsonl").read_text().splitlines()
    partial = tmp_path / "m.jsonl"
    partial.write_text("\n".join(line for line in lines if '"perf/step"' not in line) + "\n")
    with pytest.raises(SystemExit, match="no finished rollout-and-train loop"):
        loop_figures(partial, 787.0)


def test_the_committed_h200_cost_comes_from_the_committed_metrics() -> None:
    """benchmarks/results/h200_cost.json (issue 16's figures) is gpu_cost.py's reading of the runs committed beside it."""
    import json

    report = json.loads((REPO / "benchmarks" / "results" / "h200_cost.json").read_text())
    runs = {mode: loop_figures(REPO / "docs" / "validation" / f"cost_eager_first_{mode}.jsonl", report["peak_tflops"])
            for mode in ("deterministic", "nondeterministic")}
    assert report["mfu_nondeterministic"] == pytest.approx(runs["nondeterministic"]["mfu"])
    assert report["mfu_deterministic"] == pytest.approx(runs["deterministic"]["mfu"])
    assert report["det_overhead"] == pytest.approx(runs["deterministic"]["loop_s"] / runs["nondeterministic"]["loop_s"])
    assert report["first_rollout_s"] == pytest.approx(runs["deterministic"]["first_rollout_s"])
    assert "--compile-blocks" in report["recipe_flags"]


@pytest.mark.slow
def test_the_probes_transformer_set_up_runs_on_the_cpu() -> None:
    """benchmarks/transformer_probe.py (the GPU probes' set-up) with the tiny preset: LoRA alone trains."""
    import torch
    from transformer_probe import image_token_count, kernel_class, lora_transformer, transformer_inputs

    cpu = torch.device("cpu")
    model, lora, cfg = lora_transformer(cpu, preset="tiny", dtype=torch.bfloat16)
    assert lora and all(p.requires_grad for p in lora)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert sum(p.requires_grad for p in model.parameters()) == len(lora)
    gen = torch.Generator().manual_seed(0)
    x = transformer_inputs(model, cfg, 2, gen, cpu, text_tokens=7, timestep_dtype=torch.bfloat16)
    assert x["hidden_states"].shape == (2, 4, 4, 4) and x["encoder_hidden_states"].shape == (2, 7, 64)
    assert x["timestep"].dtype == torch.bfloat16 and 0 <= float(x["timestep"].min()) < 1000
    model(**x, return_dict=False)[0].float().square().mean().backward()
    assert all(p.grad is not None for p in lora)
    assert all(p.grad is None for p in model.parameters() if not p.requires_grad)
    assert image_token_count(model, cfg) == 4  # 4x4 latent, patch 2
    assert [kernel_class(n) for n in ("pytorch_flash::flash_fwd_kernel", "nvjet_tst_128x256", "triton_poi_fused_add_0",
                                      "softmax_warp_forward", "vectorized_elementwise_kernel")] == [
        "attention", "gemm", "triton (fused by inductor)", "softmax (math attention)", "elementwise/copy/reduce"]


def test_each_gpu_processs_peak_memory_is_read_from_the_last_loop_and_the_result_named_by_gpu(tmp_path: Path) -> None:
    """perf/memory/<process>_peak_{allocated,reserved}_gib (written by the driver after each loop,
    peaks so far): the last loop's are the run's."""
    import json

    from gpu_cost import gpu_kind

    lines = (REPO / "docs" / "validation" / "cost_flash_nondeterministic.jsonl").read_text().splitlines()
    out, loop = [], 0
    for line in lines:
        row = json.loads(line)
        if row["step_key"] == "perf/step":
            loop += 1
            row.update({"perf/memory/train0_peak_allocated_gib": 10.0 * loop, "perf/memory/train0_peak_reserved_gib": 11.0 * loop,
                        "perf/memory/engine0_peak_allocated_gib": 5.0})
        out.append(json.dumps(row))
    (tmp_path / "m.jsonl").write_text("\n".join(out) + "\n")
    assert loop > 1
    fig = loop_figures(tmp_path / "m.jsonl", None)
    assert fig["memory_peak_gib"] == {"train0": {"allocated": 10.0 * loop, "reserved": 11.0 * loop},
                                      "engine0": {"allocated": 5.0}}
    assert [gpu_kind(n) for n in ("NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "cpu")] == \
        ["h100", "h200", "a100", "gpu"]
