"""``python -m lingbot_ros.tools.bench.loop.loop_stream_cost``: what the back end beside the
stream adds to each frame.

One stream, three ways, on the same model and frames (a sequence that keeps coming back to
its first images, so that every keyframe has candidates and each verifies
``loop.max_verify_per_keyframe`` of them: the back end's worst case):

* ``alone``: the stream only (features and depth read back, as with the back end);
* ``beside``: the back end on a thread of its own, fed each keyframe through a queue, as the
  node runs it (a keyframe beyond ``--queue`` waiting ones is offered unverified, counted
  ``busy``); the stream's per-frame time is what the camera sees;
* ``inline`` (with ``--inline``): the back end called in the stream's thread after each
  keyframe (what beside avoids).

The ways take turns, ``--rounds`` times (a shared machine's load then weighs on each alike);
the statistics are over every round's frames.

Prints one JSON object: per way the stream's per-frame wall time (median, p90, max, ms),
the added median against ``alone`` and their ratio; the back end's counts. Random weights
(``--preset``) on ``--device``: the timings are the cost, the poses meaningless.
"""
from __future__ import annotations

import argparse
import json
import platform
import queue
import threading
import time
from functools import partial

import numpy as np

from ....config import PreprocessConfig, SessionConfig
from ....loop.config import LoopConfig
from .common import stats

__all__ = ["main", "run_loop_stream_bench"]

# candidates for every keyframe: thinning off, no age rule beyond a frame, gates open so a
# verification runs to its end (the cost does not depend on the outcome)
BENCH_LOOP = dict(enable=True, min_keyframe_distance_m=0.0, min_age_s=0.05, top_k=2,
                  verify_min_conf=0.0, min_valid_pixels=1, min_inlier_fraction=1e-9,
                  max_correction_m=1e9, max_correction_deg=180.0)


def _frames(n: int, distinct: int, hw: tuple[int, int]) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    base = [rng.integers(0, 256, hw + (3,), dtype=np.uint8) for _ in range(distinct)]
    return [base[i % distinct] for i in range(n)]


def _run(model, cfg: SessionConfig, frames, fps: float, mode: str, queue_size: int) -> dict:
    from ....loop.backend import LoopBackend, keyframe_input
    from ....loop.pair_runner import run_pair
    from ....session import StreamingSession

    session = StreamingSession(model, cfg)
    backend = None
    if mode != "alone":
        pair = partial(run_pair, lambda c: StreamingSession(model, c), cfg)
        backend = LoopBackend(LoopConfig(**BENCH_LOOP), pair=pair, window=cfg.window)
    waiting: queue.Queue = queue.Queue()
    stop = object()

    def work() -> None:  # the node's pattern: one thread owns the back end
        while (item := waiting.get()) is not stop:
            backend.offer(*item)

    worker = threading.Thread(target=work, daemon=True) if mode == "beside" else None
    if worker is not None:
        worker.start()
    step_ns = round(1e9 / fps)
    per_frame = []
    for i, image in enumerate(frames):
        t0 = time.perf_counter()
        for r in session.push(image, 1 + i * step_ns):
            if backend is None or not r.keyframe:
                continue
            kf = keyframe_input(r)
            if mode == "inline":
                backend.offer(kf)
            else:  # beyond queue_size waiting: offered unverified (counted busy)
                waiting.put((kf, waiting.qsize() < queue_size))
        per_frame.append((time.perf_counter() - t0) * 1e3)
    if worker is not None:
        waiting.put(stop)
        worker.join()
    out: dict = {"per_frame": per_frame[cfg.num_scale_frames:]}
    if backend is not None:
        c = backend.counts
        out["back_end"] = {"keyframes": c.keyframes, "candidates": c.candidates,
                           "verified_or_rejected": c.candidates - c.rejected["busy"],
                           "busy": c.rejected["busy"], "accepted": c.accepted}
    return out


def run_loop_stream_bench(preset: str = "tiny", device: str = "cpu", width: int = 224,
                          height: int = 168, frames: int = 30, distinct: int = 10,
                          fps: float = 10.0, queue_size: int = 8, rounds: int = 3,
                          inline: bool = False) -> dict:
    from ....session import load_session_model

    cfg = SessionConfig(num_scale_frames=2, window=4, device=device, rollover_keyframes=None,
                        preprocess=PreprocessConfig(width=width, height=height),
                        return_depth=True, return_features=True)
    model, _ = load_session_model(cfg, preset)
    seq = _frames(frames, distinct, (height, width))
    _run(model, cfg, seq[:6], fps, "inline", queue_size)  # warm-up
    modes = ("alone", "beside") + (("inline",) if inline else ())
    runs: dict = {m: [] for m in modes}
    for _ in range(rounds):
        for m in modes:
            runs[m].append(_run(model, cfg, seq, fps, m, queue_size))
    ways = {}
    for m, rs in runs.items():
        per_frame = [v for r in rs for v in r["per_frame"]]  # ms
        ways[m] = {"stream_ms": stats(per_frame, count="frames")}
        if "back_end" in rs[-1]:
            ways[m]["back_end_last_round"] = rs[-1]["back_end"]
    alone = ways["alone"]["stream_ms"]["median"]
    for m in modes[1:]:
        med = ways[m]["stream_ms"]["median"]
        ways[m]["added_median_ms"] = med - alone
        ways[m]["ratio_to_alone"] = med / alone
    return {"bench": "loop_stream_cost", "preset": preset, "device": device,
            "input_hw": [height, width], "frames": frames, "rounds": rounds,
            "distinct_images": distinct, "queue_size": queue_size, "loop": BENCH_LOOP,
            "machine": platform.machine(), "python": platform.python_version(), **ways}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m lingbot_ros.tools.bench.loop.loop_stream_cost",
                                description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="tiny")
    p.add_argument("--device", default="cpu")
    p.add_argument("--width", type=int, default=224)
    p.add_argument("--height", type=int, default=168)
    p.add_argument("--frames", type=int, default=30)
    p.add_argument("--distinct", type=int, default=10, help="distinct images, repeated")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--inline", action="store_true", help="also the back end inline")
    p.add_argument("--queue", type=int, default=8, help="keyframes waiting for verification")
    args = p.parse_args(argv)
    print(json.dumps(run_loop_stream_bench(args.preset, args.device, args.width, args.height,
                                           args.frames, args.distinct,
                                           queue_size=args.queue, rounds=args.rounds,
                                           inline=args.inline)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
