"""``python -m lingbot_ros.tools.bench.loop.verify_cost``: a loop candidate's verification cost.

Prints one JSON object (docs/loop.md, "Verification"), medians and p90 over ``--repeats``
candidates, in milliseconds:

* ``pair_ms``: ``run_pair`` (a fresh two-frame session on the model, both frames in one
  scale-phase step, the stored image upsampled), random weights of ``--preset`` on
  ``--device`` at ``--width`` x ``--height``;
* ``verify_ms``: ``verify_pair`` on its outputs (scale tie, reprojection, plausibility).

Random weights: the timings are the cost, the poses meaningless.
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from typing import Optional

import numpy as np

from ....config import PreprocessConfig, SessionConfig
from ....loop.config import LoopConfig
from ....loop.pair_runner import run_pair
from ....loop.place_db import PlaceDatabase
from ....loop.verify import verify_pair
from .common import stats

__all__ = ["main", "run_verify_bench"]


def run_verify_bench(preset: str = "tiny", device: str = "cpu", width: int = 518,
                     height: int = 392, repeats: int = 10) -> dict:
    from ....session import StreamingSession, open_session  # loads torch

    cfg = SessionConfig(num_scale_frames=2, window=4, device=device,
                        preprocess=PreprocessConfig(width=width, height=height))
    stream, _ = open_session(cfg, preset=preset)
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(3)]
    results = [r for i, im in enumerate(images) for r in stream.push(im, i + 1)]
    kf_res, cur = results[0], results[-1]
    db = PlaceDatabase(LoopConfig())
    db.add(0, 1, kf_res.c2w, 0, np.ones(256), kf_res.rgb, kf_res.depth)
    kf = db.get(0)
    config = LoopConfig(verify_min_conf=1.0, min_valid_pixels=1, min_inlier_fraction=1e-9,
                        max_correction_m=1e9, max_correction_deg=180.0)
    def make(config):
        return StreamingSession(stream.model, config)

    run_pair(make, cfg, kf, cur.rgb)  # warm-up
    pair_ms, verify_ms = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        pair = run_pair(make, cfg, kf, cur.rgb)
        t1 = time.perf_counter()
        result = verify_pair(pair, kf, cur.c2w, 10**9, config, current_depth=cur.depth)
        t2 = time.perf_counter()
        pair_ms.append((t1 - t0) * 1e3)
        verify_ms.append((t2 - t1) * 1e3)
    return {"bench": "verify_cost", "preset": preset, "device": device,
            "model_hw": [height, width], "repeats": repeats, "machine": platform.machine(),
            "processor": platform.processor(), "pair_ms": stats(pair_ms, tail=False, count=None),
            "verify_ms": stats(verify_ms, tail=False, count=None),
            "verify_reason": result.reason}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--width", type=int, default=518)
    parser.add_argument("--height", type=int, default=392)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args(argv)
    print(json.dumps(run_verify_bench(args.preset, args.device, args.width, args.height,
                                      args.repeats), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
