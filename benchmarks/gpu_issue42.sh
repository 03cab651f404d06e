#!/usr/bin/env bash
# Issue #42 on a lent one-GPU machine (H100 or H200; docs/validation.md section 10). From the repo root:
#   bash benchmarks/gpu_issue42.sh R   # machine A: <gpu>-1gpu standards of the NFT and Flow-GRPO GPU cards, 3 runs each
#   bash benchmarks/gpu_issue42.sh V   # machine B (fresh): verify both (cold, worst of 3 for NFT), trace both cards,
#                                      #   trace the unseeded RolloutManager against the seeded trace
#   bash benchmarks/gpu_issue42.sh C   # cost at SD3.5-medium shapes (memory per process, MFU, det overhead), trace --modules
# Round two (one stage per fresh machine; `auto` picks by the GPU that came and what standards exist):
#   D  (H100, no Flow-GRPO standard yet): NFT verify 1 fully cold with the shipped compile artifacts, the Flow-GRPO
#      standard from 3 runs (ships its artifacts), NFT verify 2 and 3 (empty Inductor/Triton dirs): worst of 3
#   E  (H100, a second fresh machine): NFT verify (cold), Flow-GRPO verify, NFT trace --modules (timed against
#      that verify's run; saved for --against), Flow-GRPO trace, the matmul peak (MFU's denominator)
#   H  (H200): both h200 standards verified cold, NFT trace --modules (--against carry/h100-modules if there),
#      the matmul peak, NFT verify 2 with the artifacts verify 1 saved
# Each stage keeps to $BUDGET seconds (default 560): optional steps are skipped when time runs short, and say so.
# Results: $OUT/<stage>.log and a few tarballs (at most 8 files come back from a device call).
set -uo pipefail
stage=${1:?stage R, V, C, F, D, E, H or auto}
out=${OUT:-gpu-results}; mkdir -p "$out"
work=/tmp/i42/$stage; rm -rf "$work"; mkdir -p "$work"
budget=${BUDGET:-560}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
log() { echo "=== $(date +%T) +${SECONDS}s $*"; }
left() { echo $((budget - SECONDS)); }
timed() {  # timed NAME SECONDS CMD...: runs CMD under a timeout, prints its exit code and wall time
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$work/$name.out" 2> "$work/$name.err"
  local rc=$?
  echo "[$name] exit $rc, wall $((SECONDS - t0)) s"
  echo "$name $rc $((SECONDS - t0))" >> "$work/timings.txt"
  return $rc
}
det=python3; dt="$det -m detaudit"
nft=recipes/sd3_pickscore_nft_gpu.toml
grpo=recipes/sd3_compress_flow_grpo_gpu.toml
kind=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oiE 'h[0-9]{3}' | tr 'A-Z' 'a-z')
kind=${kind:-gpu}
fresh_caches() {  # an empty Inductor (and Triton) cache: what a fresh machine starts with
  export TORCHINDUCTOR_CACHE_DIR=$work/inductor-$1 TRITON_CACHE_DIR=$work/triton-$1
}
if [ "$stage" = auto ]; then
  if [ "$kind" = h200 ]; then stage=H
  elif [ "${AUTO_H100:-}" ]; then stage=$AUTO_H100  # a call that hoped for an H200 and got an H100
  elif [ -f standards/sd3_compress_flow_grpo_gpu.$kind-1gpu.json ]; then stage=E
  else stage=D; fi
fi
peak() { $det benchmarks/matmul_peak.py | tee "$work/matmul_peak.json"; }
verify_nft() {  # verify_nft N LIMIT [env...]: the NFT card, empty Inductor/Triton dirs (what a fresh CI machine has)
  local i=$1 limit=$2; shift 2
  fresh_caches v$i
  log "verify $i of the NFT card: empty Inductor/Triton caches; compile artifacts: $(ls standards/sd3_pickscore_nft_gpu.$kind-1gpu.compile 2>/dev/null | tr '\n' ' ')"
  timed verify_nft_$i "$limit" "$@" $dt verify $nft --workdir "$work/v$i"
  tail -n 3 "$work/verify_nft_$i.out"; grep -h "ok in\|compile cache" "$work/verify_nft_$i.err" "$work"/v$i/run1/run.log 2>/dev/null | head -4
  cp "$work/v$i/run1/metrics.jsonl" "$work/verify_v$i.jsonl" 2>/dev/null
}
{
log "machine ($kind), stage $stage"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
$det -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])'
if [ "$stage" = R ]; then
  fresh_caches record
  log "record: the NFT GPU card, 3 runs (run 1 compiles from scratch; its compile artifacts ship with the standard)"
  timed record_nft $(( $(left) - 210 )) $dt record $nft --runs 3 --no-doctor --workdir "$work/nft"
  tail -n 25 "$work/record_nft.out" "$work/record_nft.err"
  log "record: the Flow-GRPO GPU card, 3 runs"
  timed record_grpo $(( $(left) - 10 )) $dt record $grpo --runs 3 --no-doctor --workdir "$work/grpo"
  tail -n 25 "$work/record_grpo.out" "$work/record_grpo.err"
  ls -la standards/ standards/*.compile 2>/dev/null
  tar czf "$out/R-standards.tar.gz" standards/*"$kind"-1gpu*
  for d in nft grpo; do for r in 1 2 3; do cp "$work/$d/run$r/metrics.jsonl" "$work/${d}_run$r.jsonl" 2>/dev/null; done; done
elif [ "$stage" = V ]; then
  std=standards/sd3_pickscore_nft_gpu.$kind-1gpu.json
  shipped=${std%.json}.compile
  v1env=()
  if [ ! -d "$shipped" ]; then  # not carried here: the first verify saves them (as a record does)
    v1env=(env DETAUDIT_COMPILE_CACHE_OUT="$work/v1-artifacts")
    log "no shipped compile artifacts carried: verify 1 compiles from scratch and saves them"
  fi
  fresh_caches v1
  log "verify 1 of the NFT card: a fresh machine (empty caches)"
  timed verify_nft_1 300 "${v1env[@]}" $dt verify $nft --workdir "$work/v1"
  tail -n 6 "$work/verify_nft_1.out"; grep "compile cache" "$work"/v1/run1/run.log | head -4
  if [ ! -d "$shipped" ] && [ -d "$work/v1-artifacts" ]; then
    mkdir -p "$shipped" && cp "$work/v1-artifacts"/* "$shipped"/ && ls -la "$shipped"
  fi
  for i in 2 3; do
    if [ "$(left)" -lt $((i * 150)) ]; then echo "[verify_nft_$i] skipped: $(left) s left"; continue; fi
    fresh_caches v$i
    log "verify $i of the NFT card: empty Inductor/Triton caches, the shipped compile artifacts loaded"
    timed verify_nft_$i 200 $dt verify $nft --workdir "$work/v$i"
    tail -n 3 "$work/verify_nft_$i.out"; grep "compile cache" "$work"/v$i/run1/run.log | head -4
  done
  unset TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR
  if [ -f "standards/sd3_compress_flow_grpo_gpu.$kind-1gpu.json" ]; then
    log "verify the Flow-GRPO card"
    timed verify_grpo 200 $dt verify $grpo --workdir "$work/vg"
    tail -n 3 "$work/verify_grpo.out"
  else echo "[verify_grpo] skipped: no $kind-1gpu standard of the Flow-GRPO card"; fi
  log "trace the NFT card (rng), saved"
  timed trace_nft 240 $dt trace $nft --save "$work/trace_nft" --workdir "$work/tn"
  tail -n 12 "$work/trace_nft.out"; tail -n 5 "$work/trace_nft.err"
  if [ "$(left)" -gt 150 ]; then
    log "trace the NFT card with the unseeded RolloutManager, against the seeded trace"
    timed trace_unseeded $(( $(left) - 80 )) $dt trace $nft --against "$work/trace_nft" --workdir "$work/tu" -- --no-seed-rollout-manager
    grep -E "first differing|trace incomplete|identical" "$work/trace_unseeded.out" | head -8
  else echo "[trace_unseeded] skipped: $(left) s left"; fi
  if [ "$(left)" -gt 75 ]; then
    log "trace the Flow-GRPO card (rng)"
    timed trace_grpo $(( $(left) - 8 )) $dt trace $grpo --save "$work/trace_grpo" --workdir "$work/tg"
    tail -n 8 "$work/trace_grpo.out"
  else echo "[trace_grpo] skipped: $(left) s left"; fi
  tar czf "$out/V-traces.tar.gz" -C "$work" $(cd "$work" && ls -d trace_nft trace_grpo 2>/dev/null)
  [ -d "$shipped" ] && tar czf "$out/V-compile.tar.gz" "$shipped"
  for d in v1 v2 v3 vg; do cp "$work/$d/run1/metrics.jsonl" "$work/verify_$d.jsonl" 2>/dev/null; done
elif [ "$stage" = F ]; then  # one call left: the NFT trace, then cost, then the Flow-GRPO trace if time remains
  log "trace the NFT card (rng), saved"
  timed trace_nft 240 $dt trace $nft --save "$work/trace_nft" --workdir "$work/tn"
  tail -n 6 "$work/trace_nft.out"; grep -E "ended by their parent|incomplete" "$work/trace_nft.out" | head -5
  if [ "$(left)" -gt 250 ]; then
    log "cost at SD3.5-medium shapes (8 prompts x 8 samples, 512x512), activation checkpointing, 2 rollouts, det then not"
    timed cost $(( $(left) - 5 )) $det benchmarks/gpu_cost.py --rollouts 2 --workdir "$work/cost" --commit "${COMMIT:-}" -- --activation-checkpointing
    tail -n 45 "$work/cost.out"; tail -n 20 "$work/cost.err"
    cp benchmarks/results/"$kind"_cost.json "$out/" 2>/dev/null; cp "$work"/cost/*.jsonl "$work"/ 2>/dev/null
  else echo "[cost] skipped: $(left) s left"; fi
  if [ "$(left)" -gt 100 ]; then
    log "trace the Flow-GRPO card (rng)"
    timed trace_grpo $(( $(left) - 5 )) $dt trace $grpo --save "$work/trace_grpo" --workdir "$work/tg"
    tail -n 6 "$work/trace_grpo.out"
  else echo "[trace_grpo] skipped: $(left) s left"; fi
  tar czf "$out/F-traces.tar.gz" -C "$work" $(cd "$work" && ls -d trace_nft trace_grpo 2>/dev/null)
elif [ "$stage" = D ]; then
  verify_nft 1 200
  fresh_caches grpo
  log "record: the Flow-GRPO GPU card, 3 runs (run 1 compiles from scratch and ships its artifacts)"
  timed record_grpo $(( $(left) - 150 )) $dt record $grpo --runs 3 --no-doctor --workdir "$work/grpo"
  tail -n 12 "$work/record_grpo.out" "$work/record_grpo.err"
  for i in 2 3; do
    if [ "$(left)" -lt 75 ]; then echo "[verify_nft_$i] skipped: $(left) s left"; continue; fi
    verify_nft $i $(( $(left) - 3 ))
  done
  tar cJf "$out/D-standards.tar.xz" standards/sd3_compress_flow_grpo_gpu."$kind"-1gpu* 2>/dev/null \
    || tar czf "$out/D-standards.tar.gz" standards/sd3_compress_flow_grpo_gpu."$kind"-1gpu*
  for r in 1 2 3; do cp "$work/grpo/run$r/metrics.jsonl" "$work/grpo_run$r.jsonl" 2>/dev/null; done
elif [ "$stage" = E ]; then
  verify_nft 1 200
  fresh_caches grpo
  log "verify the Flow-GRPO card: a second fresh machine; compile artifacts: $(ls standards/sd3_compress_flow_grpo_gpu.$kind-1gpu.compile 2>/dev/null | tr '\n' ' ')"
  timed verify_grpo 240 $dt verify $grpo --workdir "$work/vg"
  tail -n 3 "$work/verify_grpo.out"; grep -h "ok in\|compile cache" "$work/verify_grpo.err" "$work"/vg/run1/run.log | head -4
  cp "$work/vg/run1/metrics.jsonl" "$work/verify_vg.jsonl" 2>/dev/null
  export TORCHINDUCTOR_CACHE_DIR=$work/inductor-v1 TRITON_CACHE_DIR=$work/triton-v1  # what verify 1 filled
  log "trace --modules of the NFT card, saved (the same local caches as verify 1: its run is the untraced time)"
  timed trace_modules $(( $(left) - 120 )) $dt trace $nft --modules --save "$work/trace_modules" --workdir "$work/tm"
  tail -n 8 "$work/trace_modules.out"; grep -h "ok in" "$work/trace_modules.err" "$work/verify_nft_1.err"
  export TORCHINDUCTOR_CACHE_DIR=$work/inductor-grpo TRITON_CACHE_DIR=$work/triton-grpo
  if [ "$(left)" -gt 100 ]; then
    log "trace the Flow-GRPO card (rng), saved"
    timed trace_grpo $(( $(left) - 20 )) $dt trace $grpo --save "$work/trace_grpo" --workdir "$work/tg"
    tail -n 6 "$work/trace_grpo.out"
  else echo "[trace_grpo] skipped: $(left) s left"; fi
  peak
  tar cJf "$out/E-traces.tar.xz" -C "$work" $(cd "$work" && ls -d trace_modules trace_grpo 2>/dev/null)
elif [ "$stage" = H ]; then
  export DETAUDIT_COMPILE_CACHE_OUT=$work/v1-artifacts  # verify 1 saves its artifacts, as record does
  verify_nft 1 220
  unset DETAUDIT_COMPILE_CACHE_OUT
  fresh_caches grpo
  log "verify the Flow-GRPO card (h200 standard), cold"
  timed verify_grpo 200 $dt verify $grpo --workdir "$work/vg"
  tail -n 3 "$work/verify_grpo.out"; grep -h "ok in" "$work/verify_grpo.err"
  cp "$work/vg/run1/metrics.jsonl" "$work/verify_vg.jsonl" 2>/dev/null
  peak
  [ -f carry/h100-modules.tar.xz ] && mkdir -p carry/h100 && tar xJf carry/h100-modules.tar.xz -C carry/h100
  against=(); [ -d carry/h100/trace_modules ] && against=(--against carry/h100/trace_modules)
  export TORCHINDUCTOR_CACHE_DIR=$work/inductor-v1 TRITON_CACHE_DIR=$work/triton-v1
  log "trace --modules of the NFT card, saved ${against[*]}"
  timed trace_modules $(( $(left) - 80 )) $dt trace $nft --modules --save "$work/trace_modules" --workdir "$work/tm" "${against[@]}"
  tail -n 25 "$work/trace_modules.out"; grep -h "ok in" "$work/trace_modules.err"
  shipped=standards/sd3_pickscore_nft_gpu.$kind-1gpu.compile
  if [ "$(left)" -gt 75 ] && [ -d "$work/v1-artifacts" ]; then
    mkdir -p "$shipped" && cp "$work/v1-artifacts"/* "$shipped"/
    verify_nft 2 $(( $(left) - 3 ))
  fi
  tar cJf "$out/H-traces.tar.xz" -C "$work" $(cd "$work" && ls -d trace_modules 2>/dev/null)
elif [ "$stage" = C ]; then
  log "cost at SD3.5-medium shapes (8 prompts x 8 samples, 512x512), activation checkpointing, 2 rollouts, det then not"
  timed cost $(( $(left) - ${COST_RESERVE:-200} )) $det benchmarks/gpu_cost.py --rollouts ${ROLLOUTS:-2} --workdir "$work/cost" --commit "${COMMIT:-}" -- --activation-checkpointing
  tail -n 45 "$work/cost.out"; tail -n 20 "$work/cost.err"
  cp benchmarks/results/"$kind"_cost.json "$out/" 2>/dev/null
  if [ "$(left)" -gt 130 ]; then
    log "trace --modules of the NFT card (time against an untraced run: record/verify above)"
    timed trace_modules $(( $(left) - 10 )) $dt trace $nft --modules --save "$work/trace_modules" --workdir "$work/tm"
    tail -n 12 "$work/trace_modules.out"; tail -n 5 "$work/trace_modules.err"
    grep -h "ok in" "$work/trace_modules.err" | tail -2
  else echo "[trace_modules] skipped: $(left) s left"; fi
  cp "$work"/cost/*.jsonl "$work"/ 2>/dev/null
fi
log "done"; cat "$work/timings.txt" 2>/dev/null
} 2>&1 | tee "$out/$stage.log"
# what comes back: the logs and metrics (no traces or caches beyond those tarred above)
tar czf "$out/$stage-runs.tar.gz" -C "$work" --exclude='inductor-*' --exclude='triton-*' --exclude='*/trace' \
  --exclude='trace_*' --exclude='*artifacts*' --exclude='*.compile' $(cd "$work" && ls *.out *.err *.jsonl *.json timings.txt 2>/dev/null)
ls -la "$out"
