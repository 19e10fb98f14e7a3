#!/usr/bin/env bash
# The realtime benchmark on the GPU machine (official size, random weights), as reported in
# docs/performance.md. One device command has 10 minutes: the 10,000-frame run takes ~5.5 of them.
#   CONFIGS=default:3000,eager:300 bash scripts/gpu_bench.sh
set -uo pipefail
source scripts/gpu_env.sh
OUT=${OUT:-out}; mkdir -p "$OUT"
python3 -m lingbot_ros.tools.bench.cli \
  --configs "${CONFIGS:-default:10000,eager:300,every2:300,nodepth:300,518x378:300,iter1:300}" \
  --parity-frames "${PARITY:-200}" --profile "${PROFILE:-default}" --out "$OUT/bench.json" 2>&1 \
  | grep --line-buffered -v Warning | tee "$OUT/bench.log"
