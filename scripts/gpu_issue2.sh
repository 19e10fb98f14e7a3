#!/usr/bin/env bash
# All GPU measurements of the cache-engine issue in one device command:
#   FlashInfer fa2/fa3 vs torch_ref parity tests, the whole suite with CUDA present,
#   and the cache benchmark (JSON). Results land in $OUT (device tool) or ./out.
set -uo pipefail
source scripts/gpu_env.sh
OUT=${OUT:-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
python3 -m pytest tests/cache tests/attention -q -p no:cacheprovider -m gpu -rA 2>&1 | tail -40 | tee "$OUT/pytest_gpu.log"
python3 -m pytest tests/cache tests/attention tests/test_config.py tests/test_import_boundaries.py -q -p no:cacheprovider -m "not gpu" 2>&1 | tail -5 | tee "$OUT/pytest_cpu_suite_on_gpu_host.log"
python3 -m lingbot_ros.tools.bench_cache --out "$OUT/bench_cache.json" 2>&1 | tee "$OUT/bench_cache.log"
