"""``lingbot-ros-bench --streams 1,2,4``: several camera streams in one engine.

For each N of ``--streams``, N streams of the ``default`` configuration (one model, one page
pool, one batched step per tick: ``MultiStreamSession``) run ``--streams-frames`` frames
each, every stream on its own images; then the same N streams run as N separate
``StreamingSession``\\ s, one after another, on the same model and frames (what N node
processes would do, but for the weights loaded once). Both pipelined as ``run_config``: a
tick hands in every stream's frame, then takes what is finished.

Reported per N (medians and percentiles over the streaming frames, the scale phase left
out):

- batched: aggregate FPS (frames of all streams per second), per-stream FPS, the tick's
  wall time p50/p99, each stream's hand-in-to-result latency p50/p99, peak GPU memory;
- separate: the same figures for the streams run one after another, and the aggregate FPS
  ratio batched / separate (same run, same machine);
- ``pool_bytes``: the KV pages the batched run reserves in its one pool against the sum of
  the separate sessions' pools;
- ``max_pose_diff``: per stream, the largest difference of any camera-to-world entry
  between the batched run and that camera's separate session (the equality of
  tests/session/test_multi_session.py, in every report: 0 or ~1e-6 on the CPU in fp32,
  within the parity bounds on the GPU).
"""
from __future__ import annotations

import gc
import time

import numpy as np
import torch

from ...session import FrameIn, FrameResult, MultiStreamSession, StreamingSession, warm_up
from .configs import bench_images, bench_model, overrides_of, percentile, session_config

__all__ = ["parse_counts", "run_streams", "streams_line"]

PERIOD_NS = 33_333_333  # a 30 Hz camera's stamps


def parse_counts(text: str) -> list[int]:
    """``--streams``' value: stream counts, comma separated (ValueError for anything else)."""
    try:
        counts = [int(c) for c in text.split(",") if c.strip()]
    except ValueError:
        raise ValueError(f"--streams takes stream counts like 1,2,4, not {text!r}") from None
    if not counts or min(counts) < 1 or max(counts) > 16:
        raise ValueError(f"--streams: each count must be 1..16, got {text!r}")
    return counts


def _stream_images(hw, stream: int) -> list[np.ndarray]:
    """Stream ``stream``'s images: the bench images, rolled so no two streams see the same."""
    images = bench_images(hw)
    shift = stream % len(images)
    return images[shift:] + images[:shift]


def _cuda(device: str) -> bool:
    return device.startswith("cuda")


def _start_memory(device: str) -> None:
    gc.collect()
    if _cuda(device):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_gib(device: str):
    return torch.cuda.max_memory_allocated() / 2**30 if _cuda(device) else None


class _Results:
    """One stream's results: latencies and camera-to-world poses by stamp."""

    def __init__(self) -> None:
        self.latency_ms: list[float] = []
        self.c2w: dict[int, np.ndarray] = {}
        self.failed = 0

    def take(self, outcomes) -> None:
        for outcome in outcomes:
            if isinstance(outcome, FrameResult):
                self.latency_ms.append(outcome.latency_ms)
                self.c2w[outcome.stamp_ns] = np.asarray(outcome.c2w, dtype=np.float64)
            else:
                self.failed += 1


def _figures(tick_ms: list[float], frames_per_tick: int, skip: int) -> dict:
    streaming = tick_ms[skip:]
    return {"fps_aggregate": 1e3 * frames_per_tick * len(streaming) / sum(streaming),
            "fps_per_stream": 1e3 * len(streaming) / sum(streaming),
            "tick_ms": {"p50": percentile(streaming, 50), "p99": percentile(streaming, 99)}}


def _latency(results: _Results) -> dict:
    return {"p50": percentile(results.latency_ms, 50),
            "p99": percentile(results.latency_ms, 99)}


def _warm_up(multi, cfg, names, hw) -> None:
    """``warm_up`` for a tick of every stream: allocation, JIT and the batch's graphs (with
    and without the depth head), then each stream reset, as the node does at configure."""
    image = np.full(tuple(hw) + (3,), 127, np.uint8)
    for i in range(cfg.num_scale_frames + 3):
        with_depth = None if i < cfg.num_scale_frames + 2 else False
        multi.submit_many({name: FrameIn(image, i + 1, with_depth=with_depth)
                           for name in names})
        for name in names:
            multi.collect(name)
    for name in names:
        multi.reset(name)


def _run_batched(model, cfg, names, images, frames: int, device: str) -> dict:
    multi = MultiStreamSession(model, {name: cfg for name in names})
    _warm_up(multi, cfg, names, hw=images[0][0].shape[:2])
    _start_memory(device)
    results = {name: _Results() for name in names}
    tick_ms = []
    for i in range(frames):
        t0 = time.perf_counter()
        stamp = 1_000 + i * PERIOD_NS
        multi.submit_many({name: FrameIn(images[s][i % len(images[s])], stamp)
                           for s, name in enumerate(names)})
        for name in names:
            results[name].take(multi.collect(name, wait=False))
        tick_ms.append((time.perf_counter() - t0) * 1e3)
    for name in names:
        results[name].take(multi.collect(name))
    out = _figures(tick_ms, len(names), cfg.num_scale_frames)
    out["gpu_peak_gib"] = _peak_gib(device)
    infos = multi.info()
    out["stream_bytes"] = {name: infos[name].stream.cache.bytes_reserved for name in names}
    (pools,) = multi.pool_info().values()  # one model input size: one engine
    out["pool_bytes"] = pools["kv_pool"]["bytes_reserved"]  # the one KV storage
    out["camera_pool_bytes"] = pools["camera_pool"]["bytes_reserved"]
    out["batch_steps"] = pools["batch"]["steps"]  # per batch size
    out["graph_captures"] = pools["batch"]["graph_captures"]
    del multi
    return out, results


def _run_separate(model, cfg, names, images, frames: int, device: str) -> dict:
    _start_memory(device)
    results, tick_ms, pool_bytes = {}, [], 0
    for s, name in enumerate(names):
        session = StreamingSession(model, cfg)
        warm_up(session)
        results[name] = _Results()
        for i in range(frames):
            t0 = time.perf_counter()
            session.submit(images[s][i % len(images[s])], 1_000 + i * PERIOD_NS)
            results[name].take(session.collect(wait=False))
            if i >= cfg.num_scale_frames:
                tick_ms.append((time.perf_counter() - t0) * 1e3)
        results[name].take(session.collect())
        pool_bytes += session.info().stream.cache.bytes_reserved
        del session
        gc.collect()
    out = _figures(tick_ms, 1, 0)
    out["fps_per_stream"] = out["fps_aggregate"]  # one stream at a time
    out["gpu_peak_gib"] = _peak_gib(device)
    out["pool_bytes"] = pool_bytes
    return out, results


def _max_diff(a: _Results, b: _Results) -> float | None:
    common = sorted(set(a.c2w) & set(b.c2w))
    if not common:
        return None
    return max(float(np.abs(a.c2w[t] - b.c2w[t]).max()) for t in common)


def run_streams(args, device: str, counts: list[int], frames: int) -> list[dict]:
    """One report entry per stream count (see the module docstring)."""
    over = overrides_of("default")
    cfg = session_config(args, over, device)
    model = bench_model(args, 4, device)
    hw = (cfg.preprocess.height, cfg.preprocess.width)
    if frames <= cfg.num_scale_frames + 2:
        raise ValueError(f"--streams-frames must exceed the {cfg.num_scale_frames} scale "
                         "frames by 2 at least")
    runs = []
    for n in counts:
        names = [f"cam{s}" for s in range(n)]
        images = [_stream_images(hw, s) for s in range(n)]
        batched, batched_results = _run_batched(model, cfg, names, images, frames, device)
        separate, separate_results = _run_separate(model, cfg, names, images, frames, device)
        for name in names:
            batched.setdefault("latency_ms", {})[name] = _latency(batched_results[name])
            separate.setdefault("latency_ms", {})[name] = _latency(separate_results[name])
        runs.append({
            "streams": n, "frames_per_stream": frames, "input_hw": list(hw),
            "batched": batched, "separate": separate,
            "fps_ratio": batched["fps_aggregate"] / separate["fps_aggregate"],
            "pool_bytes_ratio": (batched["pool_bytes"] / separate["pool_bytes"]
                                 if separate["pool_bytes"] else None),
            "frames_failed": {name: batched_results[name].failed
                              + separate_results[name].failed for name in names},
            "max_pose_diff": {name: _max_diff(batched_results[name], separate_results[name])
                              for name in names},
        })
        gc.collect()
        if _cuda(device):
            torch.cuda.empty_cache()
    return runs


def streams_line(run: dict) -> str:
    """One printed line of a stream count's figures."""
    b, s = run["batched"], run["separate"]
    diff = max((d for d in run["max_pose_diff"].values() if d is not None), default=None)
    return (f"streams {run['streams']}: batched {b['fps_aggregate']:.1f} FPS "
            f"({b['fps_per_stream']:.1f}/stream, tick p50 {b['tick_ms']['p50']:.2f} ms "
            f"p99 {b['tick_ms']['p99']:.2f} ms), separate {s['fps_aggregate']:.1f} FPS, "
            f"ratio {run['fps_ratio']:.2f}; pool {b['pool_bytes'] / 2**20:.1f} MiB vs "
            f"{s['pool_bytes'] / 2**20:.1f} MiB; max pose diff {diff}")
