"""``python -m lingbot_ros.tools.bench.loop.backend_cost``: the back end's CPU cost per keyframe.

Prints one JSON object (docs/loop.md, "The back end (LoopBackend)"): a stream of
``--keyframes`` keyframes around the synthetic room (``loop/synthetic.py``: a 3 m circle,
200 keyframes a lap, with its drift), each at model resolution (a random image, a
depth, random patch features of the ViT-L's shape; the same features at each revisit of a
place) offered to a ``LoopBackend`` with the default settings and no pair (retrieval only:
verification's cost is ``verify_cost``'s, a loop's graph update ``graph_cost``'s):

* ``offer_ms``: ``offer`` (checks, place descriptor, thinning and the database's add, the
  pose graph's add, retrieval), median / p90 / max over the stream;
* ``keyframe_poses_ms``, ``keyframe_depths_ms`` (all of them read), ``state_dict_ms``,
  ``load_state_dict_ms`` at the end; ``kept``, ``candidates``.

One CPU core: ``main`` pins the process to one (where the OS allows); run it with
``OPENBLAS_NUM_THREADS=1``.
"""
from __future__ import annotations

import argparse
import time
from typing import Optional

import numpy as np

from ....loop.backend import LoopBackend
from ....loop.backend_types import KeyframeInput
from ....loop.config import LoopConfig
from ....loop.synthetic import drifted, loop_path
from .common import (add_frame_options, machine, parse_on_one_core, print_json,
                     stats)

__all__ = ["WINDOW", "main", "run_backend_bench"]

WINDOW = 64  # the front end's window
PER_LAP = 200
_STEP_NS = 100_000_000  # 10 keyframes a second


def _timed(fn) -> tuple:
    t0 = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t0) * 1e3


def run_backend_bench(keyframes: int = 1000, model_hw=(392, 518), feature_dim: int = 1024,
                      seed: int = 0) -> dict:
    """The JSON object (module docstring)."""
    if keyframes < 2:
        raise ValueError("--keyframes must be >= 2")
    h, w = model_hw
    patches = (h // 14) * (w // 14)
    truth = loop_path(keyframes, per_lap=PER_LAP)  # (n, 4, 4)
    front_end, _ = drifted(truth, seed=seed)
    K = np.array([[0.8 * w, 0.0, (w - 1) / 2], [0.0, 0.8 * w, (h - 1) / 2], [0.0, 0.0, 1.0]])
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    depth = rng.uniform(0.5, 5.0, (h, w)).astype(np.float32)
    backend = LoopBackend(LoopConfig(), None, WINDOW)
    offer_s, candidates = [], 0
    for k in range(keyframes):
        place = np.random.default_rng([seed, k % PER_LAP])
        features = place.standard_normal((patches, feature_dim), dtype=np.float32)
        kf = KeyframeInput(k, k * _STEP_NS, 0, front_end[k], K, features, image, depth)
        t0 = time.perf_counter()
        step = backend.offer(kf)
        offer_s.append(time.perf_counter() - t0)
        candidates += len(step.candidates)
    _, poses_ms = _timed(backend.keyframe_poses)
    _, depths_ms = _timed(lambda: sum(1 for _ in backend.keyframe_depths()))
    state, state_ms = _timed(backend.state_dict)
    fresh = LoopBackend(LoopConfig(), None, WINDOW)
    _, load_ms = _timed(lambda: fresh.load_state_dict(state))
    counts = backend.counts
    return {"keyframes": keyframes, "kept": counts.kept, "candidates": candidates,
            "window": WINDOW, "model_hw": [h, w], "patches": patches,
            "feature_dim": feature_dim, "offer_ms": stats(offer_s, 1e3),
            "keyframe_poses_ms": poses_ms, "keyframe_depths_ms": depths_ms,
            "state_dict_ms": state_ms, "load_state_dict_ms": load_ms,
            "machine": machine(python=True)}


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lingbot_ros.tools.bench.loop.backend_cost",
        description="The back end's cost per keyframe (offer, retrieval only) (JSON).")
    parser.add_argument("--keyframes", type=int, default=1000)
    add_frame_options(parser)
    args = parse_on_one_core(parser, argv)
    return print_json(parser, lambda: run_backend_bench(
        args.keyframes, (args.height, args.width), args.feature_dim, args.seed))


if __name__ == "__main__":
    raise SystemExit(main())
