#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 RAY_AUTH_MODE=disabled
nvidia-smi -L
# the committed GPU standards, each card as committed now (with --no-fill-uninitialized-memory), fresh machine
CUDA_VISIBLE_DEVICES=0 timeout 250 python3 -m detaudit verify recipes/sd3_pickscore_nft_gpu.toml > $OUT/verify_nft_gpu.txt 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 250 python3 -m detaudit verify recipes/sd3_compress_flow_grpo_gpu.toml > $OUT/verify_flow_grpo_gpu.txt 2>&1 &
wait
timeout 250 python3 -m detaudit verify recipes/sd3_pickscore_nft_gpu2.toml > $OUT/verify_nft_gpu2.txt 2>&1
for f in $OUT/verify_*.txt; do echo "== $f"; grep -v "^ " $f | tail -4; done
