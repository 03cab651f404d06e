#!/usr/bin/env bash
# GPU validation on a 2-GPU H200 machine (docs/validation.md). Run from the repo root:
#   bash benchmarks/gpu_validate.sh A   # GPU standard (3 runs, 2 at a time) + seeded/unseeded pairs
#   bash benchmarks/gpu_validate.sh B   # determinism overhead, cost at SD3.5-medium shapes, 100-rollout curve
#   CURVE_ARGS="..." bash benchmarks/gpu_validate.sh C   # --attention any under determinism; cost; curve
#   COMMIT=<sha> bash benchmarks/gpu_validate.sh D       # issue 16: attention probe + re-record (GPU 1), cost (GPU 0)
# Results go to $OUT (or ./gpu-results) as <stage>.tar.gz plus <stage>.log.
set -uo pipefail
stage=${1:?stage A or B}
out=${OUT:-gpu-results}; mkdir -p "$out"
work=/tmp/gpuval/$stage; rm -rf "$work"; mkdir -p "$work"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
log() { echo "=== $(date +%T) $*"; }
{
log "machine"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
python3 -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])'
python3 benchmarks/matmul_peak.py | tee "$work/peak.json"
card=recipes/sd3_pickscore_nft_gpu.toml
if [ "$stage" = A ]; then
  log "record: 3 seeded runs, 2 at a time on disjoint GPUs"
  timeout 330 python3 -m detaudit record $card --runs 3 --parallel 2 --workdir "$work/record" --out "$work/standard.json"
  echo "record exit $?"
  log "two runs with --no-seed-rollout-manager"
  timeout 200 python3 -m detaudit record $card --runs 2 --parallel 2 --workdir "$work/unseeded" --out "$work/unseeded.json" -- --no-seed-rollout-manager
  echo "unseeded record exit $?"
  for pair in record unseeded; do
    python3 -m detaudit diff "$work/$pair/run1/metrics.jsonl" "$work/$pair/run2/metrics.jsonl" --json > "$work/diff_$pair.json"
    python3 -m detaudit diff "$work/$pair/run1/metrics.jsonl" "$work/$pair/run2/metrics.jsonl" | tail -25
  done
elif [ "$stage" = D ]; then
  log "GPU 1: attention probe, then the 1-GPU standard (3 runs); GPU 0: benchmarks/gpu_cost.py (det, then not)"
  ( CUDA_VISIBLE_DEVICES=1 timeout 120 python3 benchmarks/gpu_attention_probe.py --out "$out/probe.json" > "$work/probe.log" 2>&1
    echo "probe exit $?" >> "$work/probe.log"
    CUDA_VISIBLE_DEVICES=1 timeout 270 python3 -m detaudit record $card --runs 3 --workdir "$work/rec1" --out "$out/std_gpu.json" > "$work/rec1.log" 2>&1
    echo "record exit $?" >> "$work/rec1.log" ) &
  CUDA_VISIBLE_DEVICES=0 timeout 390 python3 benchmarks/gpu_cost.py --rollouts 3 --workdir "$work/cost" --out "$out/h200_cost.json" --commit "${COMMIT:-}" > "$work/cost.log" 2>&1
  echo "cost exit $?"; wait
  cat "$work/probe.log" "$work/cost.log"; tail -n 30 "$work/rec1.log"
  log "the 2-GPU standard (3 runs)"
  timeout ${GPU2_TIMEOUT:-200} python3 -m detaudit record recipes/sd3_pickscore_nft_gpu2.toml --runs 3 --workdir "$work/rec2" --out "$out/std_gpu2.json" > "$work/rec2.log" 2>&1
  echo "record gpu2 exit $?"; tail -n 30 "$work/rec2.log"
elif [ "$stage" = C ]; then
  log "--deterministic-mode with flash/mem-efficient attention allowed (--attention any): one run per GPU"
  common="--preset sd35m-shapes --rollouts 5 --prompts-per-rollout 2 --group-size 4 --precision bf16 --device cuda --deterministic-mode --attention any"
  CUDA_VISIBLE_DEVICES=0 MILES_METRICS_JSONL=$work/any0.jsonl timeout 200 python3 -m recipes.diffusion_nft $common > "$work/any0.log" 2>&1 &
  p0=$!
  CUDA_VISIBLE_DEVICES=1 MILES_METRICS_JSONL=$work/any1.jsonl timeout 200 python3 -m recipes.diffusion_nft $common > "$work/any1.log" 2>&1 &
  p1=$!
  wait $p0; r0=$?; wait $p1; r1=$?
  tail -n 3 "$work/any0.log" "$work/any1.log"
  att=math
  if [ $r0 = 0 ] && [ $r1 = 0 ] && python3 -m detaudit diff "$work/any0.jsonl" "$work/any1.jsonl"; then att=any; fi
  log "cost: 8 prompts x 8 samples, 512x512, deterministic, --attention $att (GPU 1); 100-rollout curve (GPU 0)"
  CUDA_VISIBLE_DEVICES=1 MILES_METRICS_JSONL=$work/cost.jsonl timeout 300 python3 -m recipes.diffusion_nft --preset sd35m-shapes --rollouts 3 --precision bf16 --device cuda --deterministic-mode --attention $att > "$work/cost.log" 2>&1 &
  CUDA_VISIBLE_DEVICES=0 MILES_METRICS_JSONL=$work/curve.jsonl timeout 300 python3 -m recipes.diffusion_nft $CURVE_ARGS > "$work/curve.log" 2>&1 &
  wait; tail -n 3 "$work/cost.log" "$work/curve.log"
else
  log "determinism overhead (GPU 0: --deterministic-mode, GPU 1: without) and then cost + curve"
  common="--preset sd35m-shapes --rollouts 5 --prompts-per-rollout 2 --group-size 4 --precision bf16 --device cuda"
  CUDA_VISIBLE_DEVICES=0 MILES_METRICS_JSONL=$work/det.jsonl timeout 280 python3 -m recipes.diffusion_nft $common --deterministic-mode > "$work/det.log" 2>&1 &
  CUDA_VISIBLE_DEVICES=1 MILES_METRICS_JSONL=$work/nondet.jsonl timeout 280 python3 -m recipes.diffusion_nft $common > "$work/nondet.log" 2>&1 &
  wait; tail -n 3 "$work/det.log" "$work/nondet.log"
  log "cost: SD3.5-medium shapes, 8 prompts x 8 samples, 512x512 (GPU 0); 100-rollout compressibility curve (GPU 1)"
  CUDA_VISIBLE_DEVICES=0 MILES_METRICS_JSONL=$work/cost.jsonl timeout 260 python3 -m recipes.diffusion_nft --preset sd35m-shapes --rollouts 3 --precision bf16 --device cuda --deterministic-mode > "$work/cost.log" 2>&1 &
  CUDA_VISIBLE_DEVICES=1 MILES_METRICS_JSONL=$work/curve.jsonl timeout 260 python3 -m recipes.diffusion_nft --preset tiny --reward compressibility --rollouts 100 --prompts-per-rollout 4 --group-size 8 --lr 3e-3 --precision bf16 --device cuda --deterministic-mode > "$work/curve.log" 2>&1 &
  wait; tail -n 3 "$work/cost.log" "$work/curve.log"
fi
log "done"
} 2>&1 | tee "$out/$stage.log"
tar czf "$out/$stage.tar.gz" --exclude="*.png" -C /tmp/gpuval "$stage"
ls -la "$out"
