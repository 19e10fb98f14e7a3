#!/usr/bin/env bash
# The end-to-end streaming benchmark on the GPU machine (official size, random weights).
#   FRAMES=3000 CONFIGS=default,iter1 bash scripts/gpu_bench.sh
set -uo pipefail
source scripts/gpu_env.sh
OUT=${OUT:-out}; mkdir -p "$OUT"
python3 -m lingbot_ros.tools.bench --frames "${FRAMES:-400}" \
  --configs "${CONFIGS:-default,iter1,every2,nodepth,518x378}" --profile \
  --out "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
