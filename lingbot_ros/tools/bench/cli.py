"""lingbot-ros-bench: end-to-end streaming speed of the session (what the node runs per frame).

    lingbot-ros-bench --frames 3000 --configs default,eager,iter1,every2,nodepth,518x378 \\
        --parity-frames 200 --profile --out bench.json

Official-size network with random weights (or ``--preset tiny`` for a CPU smoke run), input
378x504 by default, bf16 aggregator on CUDA, window 64 + 8 scale frames, camera iterations 4,
FlashInfer fa3 attention, streaming steps as CUDA-graph replays. Each configuration streams
``--frames`` frames (the uint8 images the node would pass, cycled; one untimed warm-up stream
first, then a reset, as the node does at configure) pipelined: ``StreamingSession.submit`` of
frame t+1, then ``collect`` of frame t (config ``push``: one synchronous ``push`` per frame).
It reports the wall time per frame (``latency_ms``: p50/p90/p99/max of one loop iteration,
i.e. the period; results land on the host, so every sync is in it), FPS overall and over the
first and last 10 % of frames, the hand-in-to-result latency, the GPU time of each graph
replay (CUDA events) and the wall time beyond it, peak and steady GPU memory (sampled every
100 frames) and the cache state. ``--rate HZ`` hands frames in at a camera's rate instead of
back to back (then the hand-in-to-result latency is a frame's own: pipelined vs ``push``).

``--parity-frames N``: the fast path (graphs, FlashInfer) against the eager torch_ref path on
the same N frames: max abs ``pose_enc`` difference and a NaN check, for each configuration of
``--parity-configs`` (e.g. ``default,every2,flow``: keyframes known in advance, speculative
non-keyframes, every frame speculative). The difference is taken up to the first frame
whose keyframe decision differs between the two paths (reported; later frames then see other
caches).
``--profile``: where the GPU time of a steady frame goes, by kernel family (torch.profiler),
and per model stage (for a graphed configuration, from the same step launched eagerly).
``scale_estimator`` (``--scale-bench-frames``, default 500, 0 to skip): the metric-scale
estimator's CPU microseconds per frame at 518x378 (each source: depth, camera_height,
odometry, sample + update; scale_cost.py).
``--streams 1,2,4``: N camera streams in one engine (one pool, one batched step) beside N
separate sessions, per N (streams_cost.py); run alone.
Prints a table and writes JSON.
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from dataclasses import replace

import torch

from ...attention import BACKENDS
from ...config import FLASHINFER_VARIANTS, KeyframeConfig, SessionConfig
from ...session import FrameResult, StreamingSession, warm_up
from ..out_folder import OutRefused, check_out_file, json_report_begins, write_json_report
from .configs import (CONFIGS, SETTINGS_WIDTHS, SETTINGS_WINDOWS, bench_images, bench_model,
                          height_for, overrides_of, percentile, precisions_of, session_config,
                          settings_config, settings_configs)
from .gpu_profile import profile_stages, stage_split
from .parity import run_parity
from .scale_cost import run_scale_bench, scale_line

__all__ = ["main", "run_config", "steady_frame_gflops", "height_for", "settings_config",
           "settings_configs"]

TOOL = "lingbot-ros-bench"  # the report's written_by


def steady_frame_gflops(model, cfg: SessionConfig, images) -> float:
    """Model GFLOPs of one streaming frame once the window is full (anchors + window
    committed), counted by torch's FlopCounterMode on the eager torch_ref path (whose
    attention is dense SDPA, run as matmuls so it is counted too). Keyframe policy ``all``: a speculative
    frame of another policy sees one page more (under 2 % here)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode
    ref = replace(cfg, cuda_graphs=False, attention_backend="torch_ref", fused_kernels="off",
                  keyframes=KeyframeConfig(), rollover_keyframes=None)
    session = StreamingSession(model, ref)
    filled = ref.num_scale_frames + ref.window
    for i in range(filled):
        session.push(images[i % len(images)], 1_000 + i * 33_333_333)
    # The math SDPA backend is matmuls the counter sees (the fused CPU/GPU kernels it may not).
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        results = session.push(images[0], 1_000 + filled * 33_333_333)
    if len(results) != 1:  # a restart or the anchor phase would count something else
        raise RuntimeError("the FLOP count did not measure one streaming frame")
    del session
    gc.collect()
    return counter.get_total_flops() / 1e9


def run_config(name: str, args, device: str, frames: int) -> dict:
    over = overrides_of(name)
    cfg = session_config(args, over, device)
    h, w = cfg.preprocess.height, cfg.preprocess.width
    model = bench_model(args, over.get("iterations", 4), device, precisions_of(over))
    images = bench_images((h, w))
    cuda = device.startswith("cuda")
    session = StreamingSession(model, cfg)
    warm_up(session)  # allocation, JIT, graph capture; then reset, as the node does
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    session.timing.time_replays(True)
    session.timing.time_host(True)
    pipeline = over.get("pipeline", True)
    times, memory, latencies, failed = [], [], [], 0

    def take(outcomes) -> None:
        nonlocal failed
        latencies.extend(o.latency_ms for o in outcomes if isinstance(o, FrameResult))
        failed += sum(not isinstance(o, FrameResult) for o in outcomes)

    start = time.perf_counter()
    for i in range(frames):
        t0 = time.perf_counter()
        # --rate: frames handed in as a camera sends them; meanwhile a finished frame's
        # outcome is taken within 0.2 ms (as the node's worker does), so its latency is real
        while args.rate and time.perf_counter() < start + i / args.rate:
            take(session.collect(wait=False))
            time.sleep(0.0002)
        # Pipelined: frame i is queued behind frame i-1, whose outcome is then collected
        # (a node with a backlog, a bag replay); else one synchronous push per frame.
        handed_in_s = time.perf_counter() - start  # frame i's hand-in, since the start
        session.submit(images[i % len(images)], 1_000 + i * 33_333_333)
        take(session.collect(wait=not pipeline))
        times.append((time.perf_counter() - t0) * 1e3)
        if cuda and i % 100 == 99:
            memory.append(torch.cuda.memory_allocated() / 2**30)
    take(session.collect())
    replay_ms = session.timing.replay_ms()
    host_ms = session.timing.host_ms()
    info = session.info()  # before the profile, which restarts the stream
    peak_gib = torch.cuda.max_memory_allocated() / 2**30 if cuda else None  # before profiling
    profile = (profile_stages(session, images, args, name)
               if args.profile == "all" or name in args.profile.split(",") else None)
    if profile is not None and "gpu_ms_per_stage" not in profile and cuda:
        profile.update(stage_split(model, cfg, images, args, name))
    streaming = times[cfg.num_scale_frames:]  # the first pushes only buffer the anchors
    tenth = max(1, len(streaming) // 10)
    blocks = [streaming[i:i + 1000] for i in range(0, len(streaming) - 999, 1000)]
    result = {
        "config": name, "frames": frames, "input_hw": [h, w],
        "camera_iterations": model.config.camera_head.num_iterations,
        "keyframes": cfg.keyframes.policy if cfg.keyframes.policy != "every_n"
        else f"every_n={cfg.keyframes.n}",
        "with_depth": cfg.with_depth, "backend": args.backend, "variant": args.variant,
        "kv_splits": cfg.kv_splits, "pipelined": pipeline, "rate_hz": args.rate or None,
        "camera_head": str(model.camera_head.dtype).replace("torch.", ""),
        "precisions": model.precisions,
        "fast_path": info.stream.fast_path, "graph_captures": info.stream.graph_captures,
        "steps_planned_ahead": info.stream.steps_planned_ahead,
        "fused_kernels": info.stream.fused_kernels,
        "latency_ms": {"p50": percentile(streaming, 50), "p90": percentile(streaming, 90),
                       "p99": percentile(streaming, 99), "max": max(streaming)},
        "scale_phase_ms": times[cfg.num_scale_frames - 1],
        # hand-in to result per frame (pipelined: includes the wait for the frame before)
        "result_latency_ms": {"p50": percentile(latencies, 50),
                              "p99": percentile(latencies, 99)},
        "frames_failed": failed,
        # GPU time of the step's graph replay (CUDA events), to set against the wall time
        "gpu_replay_ms": {"p50": percentile(replay_ms, 50), "p99": percentile(replay_ms, 99),
                          "replays": len(replay_ms)} if replay_ms else None,
        "fps_overall": 1e3 * len(streaming) / sum(streaming),
        # the last frame's hand-in, from the start: at least (frames - 1) / rate when paced
        "last_hand_in_s": handed_in_s,
        "fps_first_10pct": 1e3 * tenth / sum(streaming[:tenth]),
        "fps_last_10pct": 1e3 * tenth / sum(streaming[-tenth:]),
        "fps_per_1000_frames": [round(1e3 * len(b) / sum(b), 2) for b in blocks],
        "gpu_peak_gib": peak_gib,
        "gpu_steady_gib": {"first": memory[0], "last": memory[-1], "min": min(memory),
                           "max": max(memory), "samples_every_100_frames": len(memory)}
        if memory else None,
        "rollovers": info.rollovers, "keyframes_committed": info.keyframes,
        "cache": {k: getattr(info.stream.cache, k) for k in ("frames_cached", "special_frames",
                                                "tokens_visible", "bytes_reserved")},
    }
    result["last_over_first"] = result["fps_last_10pct"] / result["fps_first_10pct"]
    if replay_ms:  # the host time the GPU waits for, per frame
        result["wall_minus_gpu_ms_p50"] = result["latency_ms"]["p50"] - percentile(replay_ms, 50)
    # host time per phase of a step (StreamingSession.timing.host_ms): p50 and p99 over the frames
    result["host_ms"] = {name: {"p50": percentile(v, 50), "p99": percentile(v, 99),
                                "n": len(v)} for name, v in host_ms.items()}
    result["window"] = cfg.window
    result["scale_frames"] = cfg.num_scale_frames
    if args.flops:
        result["gflops_per_frame"] = steady_frame_gflops(model, cfg, images)
    if profile is not None:
        result.update(profile)
    del session
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return result


def _streams(p: argparse.ArgumentParser, args) -> int:
    """``--streams``: the batched engine beside separate sessions, per stream count."""
    from .streams_cost import parse_counts, run_streams, streams_line
    try:
        counts = parse_counts(args.streams)
    except ValueError as exc:
        p.error(str(exc))
    cuda = args.device.startswith("cuda")
    runs = run_streams(args, args.device, counts, args.streams_frames)
    for run in runs:
        print(streams_line(run), flush=True)
    write_json_report(args.out, TOOL, {"device": torch.cuda.get_device_name() if cuda else "cpu",
                                       "torch": torch.__version__, "preset": args.preset,
                                       "streams": runs})
    print(f"wrote {args.out}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="lingbot-ros-bench", description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=3000)
    p.add_argument("--configs", default="default",
                   help=f"comma list of {list(CONFIGS)} or settings-table configs "
                   "w<width>_win<window>_<all|every2>, each optionally name:frames; "
                   "'settings' = every combination of the table (widths "
                   f"{SETTINGS_WIDTHS}, windows {SETTINGS_WINDOWS}, all/every2)")
    p.add_argument("--flops", action="store_true",
                   help="also count the model GFLOPs of a steady frame (eager torch_ref)")
    p.add_argument("--height", type=int, default=378)
    p.add_argument("--width", type=int, default=504)
    p.add_argument("--preset", default="official", choices=("official", "tiny"))
    p.add_argument("--backend", default=None, choices=BACKENDS,
                   help="default: flashinfer on CUDA, torch_ref on CPU")
    p.add_argument("--variant", default="fa3", choices=FLASHINFER_VARIANTS)
    p.add_argument("--kv-splits", type=int, default=4, help="flashinfer split-KV parts")
    p.add_argument("--rollover", type=int, default=320, help="keyframes per window (0: never)")
    p.add_argument("--rate", type=float, default=0.0,
                   help="hand frames in at this rate (Hz, a camera) instead of back to back; "
                   "then latency_ms is the time per loop and result_latency_ms is real")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--parity-frames", type=int, default=0,
                   help="also compare the fast path with eager torch_ref over N frames")
    p.add_argument("--parity-depth", action="store_true",
                   help="the parity check also compares the depth maps (relative)")
    p.add_argument("--parity-configs", default="default",
                   help="comma list of configs whose keyframe policy the parity check runs")
    p.add_argument("--profile", nargs="?", const="all", default="",
                   help="GPU time by kernel family and by stage: every config, or a comma list")
    p.add_argument("--snapshot", type=int, default=0, metavar="N",
                   help="instead of the speed runs: the cost of a stream snapshot after N "
                   "frames (size, blocked, write and restore time; snapshot_cost.py)")
    p.add_argument("--snapshot-window", type=int, default=4, help="--snapshot's window")
    p.add_argument("--snapshot-repeats", type=int, default=3, help="--snapshot's repeats")
    p.add_argument("--scale-bench-frames", type=int, default=500, metavar="N",
                   help="frames of the scale estimator's CPU cost at 518x378 (0: skip)")
    p.add_argument("--streams", default="", metavar="N,N",
                   help="several streams in one engine vs separate sessions, e.g. 1,2,4 "
                        "(streams_cost.py); only this is run")
    p.add_argument("--streams-frames", type=int, default=300, help="--streams' frames per stream")
    p.add_argument("--out", default="bench.json",
                   help="the JSON report (replaces only a report of lingbot-ros-bench)")
    args = p.parse_args(argv)
    try:  # before hours of runs: --out can be written and replaces only our report
        check_out_file(args.out, json_report_begins(TOOL))
    except OutRefused as exc:
        print(f"lingbot-ros-bench: error: {exc}", file=sys.stderr)
        return 2
    args.backend = args.backend or ("flashinfer" if args.device.startswith("cuda")
                                    else "torch_ref")
    if args.streams:  # several streams in one engine only
        return _streams(p, args)
    if args.snapshot:  # the snapshot's cost only
        from .snapshot_cost import run_snapshot
        r = run_snapshot(bench_model(args, 4, args.device), args, args.device)
        print("snapshot: " + json.dumps(r), flush=True)
        write_json_report(args.out, TOOL, {"preset": args.preset, "torch": torch.__version__,
                                           "snapshot": r})
        return 0
    runs = []
    items = []
    for item in (c.strip() for c in args.configs.split(",") if c.strip()):
        name, _, count = item.partition(":")
        items += ([f"{c}:{count}" if count else c for c in settings_configs()]
                  if name == "settings" else [item])
    for item in items:
        name, _, count = item.partition(":")
        try:
            overrides_of(name)
        except ValueError:
            p.error(f"unknown config {name!r}; choose from {list(CONFIGS)} or "
                    "w<width>_win<window>_<all|every2>")
        if count and not count.isdigit():
            p.error(f"bad frame count in {item!r}: use name:frames")
        runs.append((name, int(count) if count else args.frames))
    if min(frames for _, frames in runs) < 20:
        p.error("every configuration needs at least 20 frames")
    cuda = args.device.startswith("cuda")
    report = {"device": torch.cuda.get_device_name() if cuda else "cpu",
              "torch": torch.__version__, "preset": args.preset,
              "command": "lingbot-ros-bench " + " ".join(sys.argv[1:] if argv is None else argv),
              "runs": []}
    if args.scale_bench_frames > 0:  # CPU only: the per-frame scale work (scale_cost.py)
        report["scale_estimator"] = run_scale_bench(args.scale_bench_frames)
        print(scale_line(report["scale_estimator"]), flush=True)
    if args.parity_frames:  # first: the accuracy of the fast path is the precondition
        report["parity"] = []
        for name in (c.strip() for c in args.parity_configs.split(",") if c.strip()):
            if name not in CONFIGS:
                p.error(f"unknown parity config {name!r}; choose from {list(CONFIGS)}")
            report["parity"].append(run_parity(args, args.device, name))
            print("parity: " + json.dumps(report["parity"][-1]), flush=True)
    print(f"{'config':<15} {'path':<11} {'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} {'FPS':>6} "
          f"{'1st 10%':>8} {'last 10%':>9} {'peak GiB':>9} {'steady GiB':>11}")
    for name, frames in runs:
        r = run_config(name, args, args.device, frames)
        report["runs"].append(r)
        steady = r["gpu_steady_gib"]
        lat = r["latency_ms"]
        print(f"{name:<15} {r['fast_path'][:11]:<11} {lat['p50']:>7.2f} {lat['p90']:>7.2f} "
              f"{lat['p99']:>7.2f} {r['fps_overall']:>6.1f} {r['fps_first_10pct']:>8.1f} "
              f"{r['fps_last_10pct']:>9.1f} {r['gpu_peak_gib'] or 0:>9.2f} "
              f"{(steady or {}).get('max', 0):>11.2f}"
              + (f" {r['gflops_per_frame']:>8.1f} GFLOP" if "gflops_per_frame" in r else ""),
              flush=True)
        if r.get("gpu_replay_ms"):
            print(f"   gpu replay p50 {r['gpu_replay_ms']['p50']:.2f} ms; host p50 ms: "
                  + ", ".join(f"{k} {v['p50']:.3f}" for k, v in r["host_ms"].items()),
                  flush=True)
        for key in ("gpu_ms_per_frame", "gpu_ms_per_stage"):
            if key in r:
                print(f"   {key}: " + ", ".join(f"{k} {v}" for k, v in r[key].items()),
                      flush=True)
        write_json_report(args.out, TOOL, report)  # after each config: a crash keeps it
    write_json_report(args.out, TOOL, report)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
