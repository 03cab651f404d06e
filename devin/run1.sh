#!/usr/bin/env bash
# device call 1: cross-machine modules trace (CPU), GPU trace, GPU verify with --no-fill-uninitialized-memory
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 RAY_AUTH_MODE=disabled
git log --oneline -1 2>/dev/null | tee $OUT/commit.txt
nproc; lscpu | grep -i "model name\|flags" | cut -c1-400 > $OUT/lscpu.txt
# A: this host's CPU against the trace saved on the dev machine (Intel 6.207 without AMX, torch 2.13)
CUDA_VISIBLE_DEVICES= timeout 200 python3 -m detaudit env recipes/sd3_pickscore_nft.toml > $OUT/env_cpu.txt 2>&1
CUDA_VISIBLE_DEVICES= timeout 200 python3 -m detaudit trace recipes/sd3_pickscore_nft.toml --against devin/trace-intel-6.207 --save $OUT/trace-h200host > $OUT/against.txt 2>&1; echo "rc=$?" >> $OUT/against.txt
tail -30 $OUT/against.txt
CUDA_VISIBLE_DEVICES= timeout 200 python3 -m detaudit trace recipes/sd3_pickscore_nft.toml --against devin/trace-intel-6.207 --json > $OUT/against.json 2>$OUT/against_json.err; echo "json rc=$?"
# B: the CUDA generator path of the tracer
timeout 200 python3 -m detaudit trace recipes/sd3_pickscore_nft_gpu.toml > $OUT/gpu_trace.txt 2>&1; echo "gpu trace rc=$?" | tee -a $OUT/gpu_trace.txt
tail -25 $OUT/gpu_trace.txt
# C: the GPU standard with fill_uninitialized_memory off: still bit-identical?
timeout 200 python3 -m detaudit verify recipes/sd3_pickscore_nft_gpu.toml -- --no-fill-uninitialized-memory > $OUT/verify_nofill.txt 2>&1; echo "verify rc=$?" | tee -a $OUT/verify_nofill.txt
tail -8 $OUT/verify_nofill.txt
