"""``lingbot-ros-bench --snapshot N``: the cost of a stream snapshot.

A stream of random-weight ``--preset`` at ``--height`` x ``--width`` (2 anchor frames, a
window of ``--snapshot-window``) runs N frames; then, ``--snapshot-repeats`` times each
(medians reported):

- ``blocked_ms``: ``StreamingSession.snapshot_state`` -- what a worker waits for (the pages'
  device->host copy and the manifest), the only part that holds the stream;
- ``write_ms``: ``write_snapshot`` -- safetensors, SHA-256, fsync, rename (a background
  thread in the node);
- ``restore_ms``: ``StreamingSession.restore`` into a fresh session -- read, digests,
  checks, a fresh runner, the pages copied in;

(the model's origin digest, computed once per model, is timed apart), plus the snapshot's
size and the next frame's pose after the restore compared with the
uninterrupted stream's (bit-identical on the CPU).
"""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from ...config import KeyframeConfig, PreprocessConfig, SessionConfig
from ...session import StreamingSession, WeightsIdentity, write_snapshot


__all__ = ["run_snapshot"]


def _median(values) -> float:
    return float(np.median(np.asarray(values)))


def run_snapshot(model, args, device: str) -> dict:
    frames = int(args.snapshot)
    if frames < 3:
        raise ValueError("--snapshot needs at least 3 frames (2 anchors and one streaming)")
    cfg = SessionConfig(num_scale_frames=2, window=args.snapshot_window,
                        rollover_keyframes=None, keyframes=KeyframeConfig(policy="all"),
                        preprocess=PreprocessConfig(width=args.width, height=args.height),
                        return_depth=False, attention_backend=args.backend,
                        flashinfer_variant=args.variant, device=device)
    rng = np.random.default_rng(0)
    images = [(rng.random((args.height, args.width, 3)) * 255).astype(np.uint8)
              for _ in range(frames + 1)]
    t0 = time.perf_counter()
    weights = WeightsIdentity(model)
    origin = weights.origin()  # once per model (a weights digest here: no checkpoint file)
    origin_ms = (time.perf_counter() - t0) * 1e3
    session = StreamingSession(model, cfg, weights)
    t0 = time.perf_counter()
    for i in range(frames):
        session.push(images[i], 1_000 + i)
    stream_s = time.perf_counter() - t0
    tmp = Path(tempfile.mkdtemp(prefix="lingbot_snapshot_bench_"))
    blocked, write, restore = [], [], []
    try:
        for r in range(args.snapshot_repeats):
            t0 = time.perf_counter()
            data = session.snapshots.take()
            t1 = time.perf_counter()
            path, nbytes = write_snapshot(data, tmp / "snap")
            t2 = time.perf_counter()
            blocked.append((t1 - t0) * 1e3)
            write.append((t2 - t1) * 1e3)
            fresh = StreamingSession(model, cfg, weights)
            t3 = time.perf_counter()
            manifest = fresh.snapshots.restore(path)
            restore.append((time.perf_counter() - t3) * 1e3)
        want = session.push(images[frames], 1_000 + frames)[0]
        got = fresh.push(images[frames], 1_000 + frames)[0]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    cache = manifest["cache"]
    return {
        "preset": args.preset, "device": device, "input_hw": [args.height, args.width],
        "frames_before_snapshot": frames, "window": args.snapshot_window,
        "num_scale_frames": 2, "stream_s": stream_s,
        "bytes": nbytes, "mib": nbytes / 2**20,
        "kv_pages": {"patch": cache["patch_pages"], "special": cache["special_pages"],
                     "page_size": cache["page_size"], "dtype": cache["kv_dtype"]},
        "repeats": args.snapshot_repeats,
        "origin": origin, "origin_digest_ms_once": origin_ms,
        "blocked_ms": _median(blocked), "write_ms": _median(write),
        "save_ms": _median([b + w for b, w in zip(blocked, write)]),
        "restore_ms": _median(restore),
        "next_frame_identical": bool(np.array_equal(want.pose_enc, got.pose_enc)
                                     and np.array_equal(want.c2w, got.c2w)),
    }
