#!/usr/bin/env bash
# Every GPU check and measurement in one device command (run from the repo root there):
#   the gpu-marked tests (FlashInfer fa2/fa3 vs torch_ref; the model on CUDA), the cache
#   benchmark and the official-size model check. Results land in $OUT (device tool) or ./out.
# The golden fixtures do not travel with the checkout: copy them first (git-ignored) with
#   mkdir -p .fixtures && cp -r ../shared/fixtures/reference_tiny .fixtures/
# and carry `.fixtures` and `.whl` (FlashInfer wheels, see scripts/gpu_env.sh).
set -uo pipefail
source scripts/gpu_env.sh
OUT=${OUT:-out}; mkdir -p "$OUT"
export LINGBOT_FIXTURES_DIR=${LINGBOT_FIXTURES_DIR:-$PWD/.fixtures}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
python3 -m pytest tests/attention tests/cache tests/model tests/session -q -p no:cacheprovider -m gpu -rA 2>&1 | tail -40 | tee "$OUT/pytest_gpu.log"
python3 -m lingbot_ros.tools.bench.cache_cost --out "$OUT/bench_cache.json" 2>&1 | tee "$OUT/bench_cache.log"
python3 scripts/gpu_model_check.py --frames 100 --out "$OUT/gpu_model_check.json" > "$OUT/gpu_model_check.log" 2>&1
tail -60 "$OUT/gpu_model_check.log"
