#!/usr/bin/env bash
# The realtime issue's GPU run (one device command): the graph and split-KV tests, one
# attention call per kernel, then the end-to-end benchmark with the fast-path parity check.
#   FRAMES=3000 CONFIGS=default,eager PARITY=200 bash scripts/gpu_realtime.sh
# Carry `.whl` (FlashInfer wheels, see scripts/gpu_env.sh). Results land in $OUT or ./out.
set -uo pipefail
source scripts/gpu_env.sh
OUT=${OUT:-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
if [ "${TESTS:-1}" = 1 ]; then
  python3 -m pytest tests/model/test_qk_fused.py tests/session/test_graph_step.py \
    ${GPU_TESTS-tests/attention/test_flashinfer_parity.py} \
    -q -p no:cacheprovider -m gpu -rA 2>&1 | tail -30 | tee "$OUT/pytest_gpu.log"
fi
if [ "${ATTENTION:-1}" = 1 ]; then
  python3 -m lingbot_ros.tools.bench.cache_cost --repeat 200 --frames "${ATTN_FRAMES:-72}" \
    --out "$OUT/bench_cache.json" 2>&1 | tail -14 | tee "$OUT/bench_cache.log"
fi
if [ "${FP8_PROBE:-0}" = 1 ]; then
  python3 scripts/fp8_attention_probe.py --out "$OUT/fp8_probe.json" 2>&1 | tail -8 \
    | tee "$OUT/fp8_probe.log"
fi
python3 -m lingbot_ros.tools.bench.cli --frames "${FRAMES:-400}" \
  --configs "${CONFIGS:-default,split1,eager}" --profile "${PROFILE:-all}" \
  --parity-frames "${PARITY:-200}" ${BENCH_ARGS:-} --out "$OUT/bench.json" 2>&1 \
  | grep -v Warning | tee "$OUT/bench.log"
