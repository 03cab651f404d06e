#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1 RAY_AUTH_MODE=disabled
# A: #16 cost with fill_uninitialized_memory off under --deterministic-mode
timeout 420 python3 benchmarks/gpu_cost.py --rollouts 3 --out $OUT/h200_cost.json -- --no-fill-uninitialized-memory 2>&1 | tee $OUT/gpu_cost.txt | tail -25
# B: the tracer's CUDA path (fixed device-context bug)
timeout 150 python3 -m detaudit trace recipes/sd3_pickscore_nft_gpu.toml --save /tmp/gputrace > $OUT/gpu_trace.txt 2>&1; echo "gpu trace rc=$?" | tee -a $OUT/gpu_trace.txt
grep -v "^ " $OUT/gpu_trace.txt | tail -22
# C: CPU trace against the dev machine's, oneDNN limited to AVX512_CORE_VNNI (no avx512_fp16/bf16, no AMX)
CUDA_VISIBLE_DEVICES= ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI timeout 150 python3 -m detaudit trace recipes/sd3_pickscore_nft.toml --against devin/trace-intel-6.207 --json --save /tmp/h200host_vnni > $OUT/against_vnni.json 2>$OUT/against_vnni.err; echo "vnni rc=$?"
python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['comparison']; print(c.get('identical'), (c.get('first_module') or {}).get('summary'), (c.get('first_draw') or {}).get('summary'))" $OUT/against_vnni.json
tar czf $OUT/gputrace.tgz -C /tmp gputrace 2>/dev/null; tar czf $OUT/h200host_vnni.tgz -C /tmp h200host_vnni 2>/dev/null; tar czf $OUT/earlier_traces.tgz /tmp/detaudit-trace-sd3_pickscore_nft-*/run1/trace 2>/dev/null; ls -la $OUT
