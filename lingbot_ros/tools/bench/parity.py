"""lingbot-ros-bench --parity-frames: the fast path against the eager torch_ref path with the
reference's float32 heads, on the same frames (pose, keyframe decisions and, with
--parity-depth, depth)."""
from __future__ import annotations

import gc

import numpy as np

from ...session import StreamingSession
from .configs import CONFIGS, bench_images, bench_model, precisions_of, session_config

_REF_RUNS: dict = {}  # the eager reference run per (keyframes, frames, depth): computed once


def run_parity(args, device: str, name: str = "default") -> dict:
    """Fast path (graphs + FlashInfer + fused kernels, the config's precisions) vs the
    eager torch_ref path with the reference's float32 heads, on the same frames; with
    ``--parity-depth``, the depth maps too (relative difference)."""
    images = bench_images((args.height, args.width))
    over = {k: v for k, v in CONFIGS[name].items() if k == "keyframes"}
    runs = {}
    for label, precisions, extra in (("fast", precisions_of(CONFIGS[name]), {}), (
            "eager_torch_ref", precisions_of({}), {"cuda_graphs": False,
                                                   "attention_backend": "torch_ref",
                                                   "fused_kernels": "off"})):
        ref_key = (repr(over), args.parity_frames, args.parity_depth)
        if label == "eager_torch_ref" and ref_key in _REF_RUNS:  # one per keyframe policy
            runs[label] = _REF_RUNS[ref_key]
            continue
        model = bench_model(args, 4, device, precisions)  # same seed: the same weights, cast or not
        cfg = session_config(args, over, device, return_depth=args.parity_depth, **extra)
        session = StreamingSession(model, cfg)
        out = []
        for i in range(args.parity_frames):
            out += session.push(images[i % len(images)], 1_000 + i)
        info = session.info()
        runs[label] = (np.stack([r.pose_enc for r in out]), [r.keyframe for r in out],
                       f"{info.stream.fast_path}, {info.stream.attention}, fused kernels "
                       f"{'on' if info.stream.fused_kernels else 'off'}, precisions "
                       f"{model.precisions}",
                       [r.depth for r in out] if args.parity_depth else None)
        if label == "eager_torch_ref":
            _REF_RUNS[ref_key] = runs[label]
        del session
        gc.collect()
    (fast, fast_kf, fast_path, fast_depth), (ref, ref_kf, ref_path, ref_depth) = (
        runs["fast"], runs["eager_torch_ref"])
    differs = [i for i, (a, b) in enumerate(zip(fast_kf, ref_kf)) if a != b]
    upto = differs[0] + 1 if differs else len(fast)  # the first differing frame included
    diff = np.abs(fast[:upto] - ref[:upto])
    window_fill = next((i for i, n in enumerate(np.cumsum(ref_kf))
                        if n >= 8 + 64), None)  # anchors + window, as _session_config sets
    return {"config": name, "frames": args.parity_frames, "fast_path": fast_path,
            "reference_path": ref_path, "keyframes": int(sum(ref_kf)),
            "frames_past_window_fill": (len(ref_kf) - window_fill - 1
                                        if window_fill is not None else 0),
            "keyframe_decisions_agree": not differs,
            "first_differing_decision": differs[0] if differs else None,
            "frames_compared": upto,
            "pose_enc_max_abs_diff": float(diff.max()),
            "pose_enc_max_abs_diff_last_frame": float(diff[-1].max()),
            "nan": bool(np.isnan(fast).any() or np.isnan(ref).any()),
            **(depth_difference(fast_depth[:upto], ref_depth[:upto]) if fast_depth else {})}


def depth_difference(fast: list, ref: list) -> dict:
    """Relative depth difference |a - b| / b over the compared frames' pixels: max, p99 and
    median, and the largest per-frame median."""
    rel = [np.abs(a.astype(np.float64) - b) / np.maximum(np.abs(b), 1e-12)
           for a, b in zip(fast, ref)]
    flat = np.concatenate([r.ravel() for r in rel])
    return {"depth_rel_diff": {"max": float(flat.max()), "p99": float(np.percentile(flat, 99)),
                               "median": float(np.median(flat)),
                               "worst_frame_median": float(max(np.median(r) for r in rel))}}
