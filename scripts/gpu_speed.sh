#!/usr/bin/env bash
# The speed issue's GPU runs (one device command per PART; carry .whl, and .rosbundle for C):
#   PART=A: the GPU tests, the fast path vs eager torch_ref with the fp32 camera head (300
#           frames), and each change of the issue taken back alone in one run (+ a profile)
#   PART=B: 10,000 frames of the default, every2 and flow (flatness, memory)
#   PART=C: the node at 30 and 60 Hz (scripts/node_bench.py), and the session at a 30 Hz
#           camera rate, pipelined and synchronous (each frame's own latency)
#   PART=P: the 40 FPS candidates (the depth head in bf16, FP8 e4m3 MLP GEMMs): their GPU
#           tests, parity against eager torch_ref with the fp32 heads over 450 frames (pose and
#           depth), and each alone beside the default in one run
#   PART=N: the node at 30 Hz, 3,000 frames (scripts/node_bench.py), one change at a time
#           in one run: base (gc_freeze on, the default) and gc_freeze off, with the full
#           garbage collections per phase (needs .rosbundle; earlier runs' variants --
#           sliced rollovers, the raw image take, a third queue slot, scale.source depth --
#           in docs/performance.md, with their VARIANTS)
#   PART=V: verification after a restructure (the GPU issue's part 1): the GPU tests, the
#           fast path vs eager torch_ref per keyframe policy (450 frames: pose <= 1e-2,
#           keyframe decisions identical), and default:3000 (FPS, flatness, memory)
#   PART=S: several cameras in one engine (issue 35): the batched step's GPU tests (FlashInfer
#           B x S requests, eager and graph wrapper; the batched CUDA graphs against eager;
#           the patch features), then lingbot-ros-bench --streams 1,2,4 (each N beside N
#           separate sessions, same run)
#   PART=L: loop closure (issue 34) on the GPU: the verification pass's cost (the pair in a
#           fresh two-frame session) and the stream's FPS with the back end beside it
#   Node variants at 30 Hz (loop.enable on/off, sliced vs blocking rollovers, one run):
#           PART=N VARIANTS="base;sliced=session.rollover_mode:=sliced;loop=loop.enable:=true"
# Results land in $OUT (or ./out).
set -uo pipefail
source scripts/gpu_env.sh
OUT=${OUT:-out}; mkdir -p "$OUT"
case "${PART:-A}" in
A)
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
  python3 -m pytest ${GPU_TESTS:-tests/model tests/attention tests/session} -m gpu -q \
    -p no:cacheprovider -rfE 2>&1 | tail -25 | tee "$OUT/pytest_gpu.log"
  python3 -m lingbot_ros.tools.bench.cli --parity-frames 300 --parity-configs "${PARITY_CONFIGS:-default,cam_bf16}" \
    --configs "${CONFIGS:-default:1000,push:300,cam_bf16:300,no_add_norm:300,no_kv_write:300,no_split_merge:300,unfused:300}" \
    --profile default --out "$OUT/bench_a.json" 2>&1 | grep -v Warning | tee "$OUT/bench_a.log"
  ;;
B)
  python3 -m pytest tests/model/test_qk_fused.py tests/attention/test_split_merge.py -m gpu -q \
    -p no:cacheprovider -rfE 2>&1 | tail -8 | tee "$OUT/pytest_gpu_b.log"
  python3 -m lingbot_ros.tools.bench.cli --configs "${CONFIGS:-default:10000,every2:1000,flow:1000}" \
    --out "$OUT/bench_b.json" 2>&1 | grep -v Warning | tee "$OUT/bench_b.log"
  ;;
V)
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
  python3 -m pytest ${GPU_TESTS:-tests/model tests/attention tests/session tests/cache} -m gpu -q \
    -p no:cacheprovider -rfE 2>&1 | tail -25 | tee "$OUT/pytest_gpu.log"
  python3 -m lingbot_ros.tools.bench.cli --parity-frames "${PARITY_FRAMES:-450}" \
    --parity-configs "${PARITY_CONFIGS:-default,every2,flow}" \
    --configs "${CONFIGS:-default:3000}" --out "$OUT/bench_v.json" 2>&1 | grep -v Warning \
    | tee "$OUT/bench_v.log"
  ;;
P)
  python3 -m pytest tests/model/test_precisions.py -m gpu -q -p no:cacheprovider -rfE 2>&1 \
    | tail -8 | tee "$OUT/pytest_precisions.log"
  python3 -m lingbot_ros.tools.bench.cli --parity-frames "${PARITY_FRAMES:-450}" --parity-depth \
    --parity-configs "${PARITY_CONFIGS:-default,depth_bf16,fp8_mlp}" \
    --configs "${CONFIGS:-default:1000,depth_bf16:1000,fp8_mlp:1000,depth_bf16_fp8_mlp:1000}" \
    --out "$OUT/bench_p.json" 2>&1 | grep -v Warning | tee "$OUT/bench_p.log"
  ;;
N)
  source scripts/gpu_ros_env.sh
  python3 scripts/node_bench.py --device cuda --preset official --rates "${RATES:-30:3000}" \
    --variants "${VARIANTS:-base;no_gc_freeze=gc_freeze:=false}" \
    --out "$OUT/node_bench_n.json" 2>&1 | grep -v "^ \|^{\|^}" | tail -40 | tee "$OUT/node_bench_n.log"
  ;;
S)
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
  S_TESTS="tests/attention/test_batch_requests.py tests/session/test_batch_graph.py"
  python3 -m pytest ${GPU_TESTS:-$S_TESTS tests/session/test_features.py} \
    -m gpu -q -p no:cacheprovider -rfE 2>&1 | tail -25 | tee "$OUT/pytest_gpu_s.log"
  python3 -m lingbot_ros.tools.bench.cli --streams "${STREAMS:-1,2,4}" \
    --streams-frames "${STREAMS_FRAMES:-1000}" --scale-bench-frames 0 --out "$OUT/bench_s.json" \
    2>&1 | grep -v Warning | tee "$OUT/bench_s.log"
  ;;
L)
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
  python3 -m lingbot_ros.tools.bench.loop.verify_cost --preset official --device cuda \
    2>&1 | tail -20 | tee "$OUT/loop_verify.log"
  python3 -m lingbot_ros.tools.bench.loop.loop_stream_cost --preset official --device cuda \
    --width 518 --height 392 2>&1 | tail -20 | tee "$OUT/loop_stream.log"
  ;;
C)
  python3 -m lingbot_ros.tools.bench.cli --configs default:600,push:600 --rate 30 \
    --out "$OUT/bench_c.json" 2>&1 | grep -v Warning | tee "$OUT/bench_c.log"
  source scripts/gpu_ros_env.sh
  python3 scripts/node_bench.py --device cuda --preset official --rates "${RATES:-30:3000,60:1500}" \
    --out "$OUT/node_bench.json" 2>&1 | tail -40 | tee "$OUT/node_bench.log"
  ;;
esac
