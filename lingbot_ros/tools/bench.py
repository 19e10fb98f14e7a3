"""lingbot-ros-bench: end-to-end streaming speed of the session (what the node runs per frame).

    lingbot-ros-bench --frames 3000 --configs default,iter1,every2,nodepth,518x378 --out bench.json

Official-size network with random weights (or ``--preset tiny`` for a CPU smoke run), input
378x504 by default, bf16 aggregator on CUDA, window 64 + 8 scale frames, camera iterations 4.
Each configuration streams ``--frames`` frames through ``StreamingSession.push`` (the same
uint8 images the node would pass, cycled) and reports per-frame latency p50/p90/p99, FPS over
the first and last 10 % of frames, peak and steady GPU memory and the cache state. Prints a
table and writes JSON. Timings are wall-clock per push (each push ends with its results on the
host, so they include every device sync).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace

import numpy as np
import torch

from ..config import KeyframeConfig, PreprocessConfig, SessionConfig
from ..model.presets import preset_config, random_model

CONFIGS = {  # name -> overrides of the default setup
    "default": {},
    "iter1": {"iterations": 1},
    "every2": {"keyframes": KeyframeConfig(policy="every_n", n=2)},
    "nodepth": {"with_depth": False},
    "518x378": {"hw": (378, 518)},
}


def _percentile(values, q):
    return float(np.percentile(np.asarray(values), q)) if values else None


def run_config(name: str, args, device: str) -> dict:
    over = CONFIGS[name]
    h, w = over.get("hw", (args.height, args.width))
    mcfg = preset_config(args.preset)
    mcfg = replace(mcfg, camera_head=replace(mcfg.camera_head,
                                             num_iterations=over.get("iterations", 4)))
    model = random_model(mcfg, seed=0).prepare(device, "auto")
    cfg = SessionConfig(
        num_scale_frames=8, window=64, rollover_keyframes=args.rollover or None,
        keyframes=over.get("keyframes", KeyframeConfig()),
        preprocess=PreprocessConfig(width=w, height=h), with_depth=over.get("with_depth", True),
        return_depth=False, attention_backend=args.backend, flashinfer_variant=args.variant,
        device=device)
    from ..session.session import StreamingSession
    rng = np.random.default_rng(0)
    images = [(rng.random((h, w, 3)) * 255).astype(np.uint8) for _ in range(8)]
    warm = StreamingSession(model, cfg)
    for i in range(12):
        warm.push(images[i % 8], i + 1)
    del warm
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    session = StreamingSession(model, cfg)
    times, memory = [], []
    for i in range(args.frames):
        t0 = time.perf_counter()
        session.push(images[i % 8], 1_000 + i * 33_333_333)
        times.append((time.perf_counter() - t0) * 1e3)
        if cuda and i % 100 == 99:
            memory.append(torch.cuda.memory_allocated() / 2**30)
    if args.profile:
        report_profile(session, images, args)
    streaming = times[8:]  # the first 7 pushes only buffer the anchor frames
    tenth = max(1, len(streaming) // 10)
    info = session.info()
    return {
        "config": name, "frames": args.frames, "input_hw": [h, w],
        "camera_iterations": over.get("iterations", 4), "keyframes": cfg.keyframes.policy,
        "with_depth": cfg.with_depth, "backend": args.backend, "variant": args.variant,
        "latency_ms": {"p50": _percentile(streaming, 50), "p90": _percentile(streaming, 90),
                       "p99": _percentile(streaming, 99), "max": max(streaming)},
        "scale_phase_ms": times[7],
        "fps_overall": 1e3 * len(streaming) / sum(streaming),
        "fps_first_10pct": 1e3 * tenth / sum(streaming[:tenth]),
        "fps_last_10pct": 1e3 * tenth / sum(streaming[-tenth:]),
        "gpu_peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "gpu_steady_gib": {"first": memory[0], "last": memory[-1], "max": max(memory)}
        if memory else None,
        "rollovers": info["rollovers"], "keyframes_committed": info["keyframes"],
        "cache": {k: info["cache"][k] for k in ("frames_cached", "special_frames",
                                                "tokens_visible", "bytes_reserved")},
    }


def report_profile(session, images, args, frames: int = 20) -> None:
    """torch.profiler over a few steady-state frames: where the time goes, per op/kernel."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                           if torch.cuda.is_available() else [])
    stamp = 10**15
    with profile(activities=activities) as prof:
        for i in range(frames):
            session.push(images[i % len(images)], stamp + i)
    sort = "cuda_time_total" if torch.cuda.is_available() else "cpu_time_total"
    table = prof.key_averages().table(sort_by=sort, row_limit=30)
    path = args.out.rsplit(".", 1)[0] + "_profile.txt"
    with open(path, "w") as f:
        f.write(f"{frames} frames\n{table}\n")
    print(f"profile of {frames} frames -> {path}")
    args.profile = False  # once per run


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="lingbot-ros-bench", description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=3000)
    p.add_argument("--configs", default="default", help=f"comma list of {list(CONFIGS)}")
    p.add_argument("--height", type=int, default=378)
    p.add_argument("--width", type=int, default=504)
    p.add_argument("--preset", default="official", choices=("official", "tiny"))
    p.add_argument("--backend", default=None, choices=("torch_ref", "flashinfer"),
                   help="default: flashinfer on CUDA, torch_ref on CPU")
    p.add_argument("--variant", default="fa3", choices=("fa2", "fa3", "auto"))
    p.add_argument("--rollover", type=int, default=320, help="keyframes per window (0: never)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--profile", action="store_true", help="torch.profiler table of 20 frames")
    p.add_argument("--out", default="bench.json")
    args = p.parse_args(argv)
    args.backend = args.backend or ("flashinfer" if args.device.startswith("cuda")
                                    else "torch_ref")
    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        p.error(f"unknown configs {unknown}; choose from {list(CONFIGS)}")
    report = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda")
              else "cpu", "torch": torch.__version__, "preset": args.preset, "runs": []}
    print(f"{'config':<10} {'p50 ms':>8} {'p99 ms':>8} {'FPS':>7} {'FPS 1st10%':>11} "
          f"{'FPS last10%':>12} {'peak GiB':>9}")
    for name in names:
        r = run_config(name, args, args.device)
        report["runs"].append(r)
        print(f"{name:<10} {r['latency_ms']['p50']:>8.2f} {r['latency_ms']['p99']:>8.2f} "
              f"{r['fps_overall']:>7.1f} {r['fps_first_10pct']:>11.1f} "
              f"{r['fps_last_10pct']:>12.1f} {r['gpu_peak_gib'] or 0:>9.2f}", flush=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
