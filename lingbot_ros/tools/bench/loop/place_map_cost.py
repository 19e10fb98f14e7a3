"""``python -m lingbot_ros.tools.bench.loop.place_map_cost``: a stored place map's CPU costs.

Prints one JSON object (docs/loop.md, "Stored place maps"): for a map of ``--keyframes``
model-resolution keyframes (random images, depths and descriptors; K per keyframe),

* ``write_ms`` / ``read_ms``: ``write_place_map`` (``np.save``, SHA-256, fsync, the atomic
  swap; replacing the previous map) and ``read_place_map`` (every digest and the schema
  checked), median and p90 over ``--repeats``; ``bytes_on_disk`` and per 1,000 keyframes;
* ``to_metres_ms``, ``database_from_ms`` (the map into a fresh ``PlaceDatabase``);
* ``offer_ms``: ``Relocalizer.offer`` without the model (a pair that refuses, so its cost
  is the descriptor, the retrieval and the bookkeeping; a verification adds the pair's
  model step and ``verify_pair``, ``verify_cost``'s figures), and ``offer_prior_ms`` with a
  prior of 5 m radius (the keyframes outside it excluded).

One CPU core: ``main`` pins the process to one (where the OS allows); run it with
``OPENBLAS_NUM_THREADS=1``. The file system's fsync dominates the write on a slow disk.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Optional

import numpy as np

from ....loop.backend_types import KeyframeInput
from ....loop.config import LoopConfig
from ....loop.place_db import PlaceDatabase
from ....loop.place_descriptor import DESCRIPTOR_DIM
from ....loop.place_map import (database_from, place_map_from, read_place_map, to_metres,
                               write_place_map)
from ....loop.relocalize import Relocalizer
from .common import (add_frame_options, machine, parse_on_one_core, print_json,
                     stats)

__all__ = ["main", "run_place_map_bench"]


def _ms(samples_s) -> dict:
    return stats(samples_s, 1e3, tail=False, count=None)  # median and p90 only


def _refuse(keyframe, image):
    raise ValueError("no model in this bench")


def _timed(fn, repeats: int) -> tuple[list, object]:
    laps, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        laps.append(time.perf_counter() - t0)
    return laps, out


def run_place_map_bench(keyframes: int = 1000, model_hw=(392, 518), repeats: int = 3,
                        offers: int = 20, feature_dim: int = 1024, seed: int = 0,
                        folder: Optional[Path] = None) -> dict:
    """The JSON object (module docstring); the map is written under ``folder`` (a
    temporary folder when None)."""
    if keyframes < 1 or repeats < 1 or offers < 1:
        raise ValueError("--keyframes, --repeats and --offers must be >= 1")
    rng = np.random.default_rng(seed)
    config = LoopConfig()
    h, w = model_hw
    db = PlaceDatabase(config)
    image = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    depth = rng.uniform(0.5, 10.0, (h, w)).astype(np.float32)
    poses = {}
    for i in range(keyframes):  # a grid 2 m apart: every keyframe kept
        poses[i] = np.eye(4)
        poses[i][:3, 3] = (2.0 * (i % 100), 2.0 * (i // 100), 0.0)
        db.add(i, i * 100_000_000, poses[i], 0, rng.standard_normal(DESCRIPTOR_DIM), image,
               depth)
    K = np.array([[400.0, 0, w / 2], [0, 400.0, h / 2], [0, 0, 1]])
    model_map = place_map_from(db, poses, "model", intrinsics={i: K for i in poses})
    metres_s, metric = _timed(lambda: to_metres(model_map, 0.5, "bench"), repeats)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        target = Path(tmp) / "map"
        write_s, _ = _timed(lambda: write_place_map(target, metric), repeats)
        on_disk = sum(p.stat().st_size for p in target.iterdir())
        read_s, back = _timed(lambda: read_place_map(target), repeats)
    load_s, _ = _timed(lambda: database_from(back, config), repeats)
    reloc = Relocalizer(config, back, _refuse)
    patches = (h // 14) * (w // 14)
    features = rng.standard_normal((patches, feature_dim)).astype(np.float32)
    kf = KeyframeInput(0, 0, 0, np.eye(4), K, features, image, depth)
    reloc.offer(kf)  # the descriptor's projection, built once per width
    offer_s, _ = _timed(lambda: reloc.offer(kf), offers)
    prior = np.eye(4)
    prior[:3, 3] = (50.0, 4.0, 0.0)
    prior_s, _ = _timed(lambda: reloc.offer(kf, prior=prior, prior_radius_m=5.0), offers)
    return {
        "keyframes": keyframes, "model_hw": [h, w], "repeats": repeats, "offers": offers,
        "write_ms": _ms(write_s), "read_ms": _ms(read_s), "to_metres_ms": _ms(metres_s),
        "database_from_ms": _ms(load_s), "bytes_on_disk": on_disk,
        "bytes_on_disk_per_1000_keyframes": round(on_disk * 1000 / keyframes),
        "offer_ms": _ms(offer_s), "offer_prior_ms": _ms(prior_s),
        "top_k": config.top_k, "machine": machine(),
    }


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lingbot_ros.tools.bench.loop.place_map_cost",
        description="A stored place map's costs: write, read, load, relocalize (JSON).")
    parser.add_argument("--keyframes", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--offers", type=int, default=20)
    parser.add_argument("--folder", type=Path, default=None,
                        help="where the map is written (a temporary folder in it)")
    add_frame_options(parser)
    args = parse_on_one_core(parser, argv)
    return print_json(parser, lambda: run_place_map_bench(
        args.keyframes, (args.height, args.width), args.repeats, args.offers,
        args.feature_dim, args.seed, args.folder))


if __name__ == "__main__":
    raise SystemExit(main())
