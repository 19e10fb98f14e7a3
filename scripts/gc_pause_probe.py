#!/usr/bin/env python3
"""How long one full garbage collection takes in a process like the node's (CPU only).

    .venv/bin/python scripts/gc_pause_probe.py --repeats 5 --out gc_pause_probe.json

Imports what the node imports (torch, rclpy, lingbot_ros.ros.node), builds the official
network on torch's ``meta`` device (the same Python objects as on a GPU, no weights in
memory), then times ``gc.collect()`` (median of ``--repeats``) with every object tracked, and
again after ``gc.freeze()`` (what the node's ``gc_freeze`` parameter does after configure),
also with 3,000 new long-lived objects (a stream's worth of kept results). JSON to ``--out``.
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def full_collection_ms(repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        gc.collect()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--preset", default="official")
    p.add_argument("--out", default="gc_pause_probe.json")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error("--repeats must be at least 1")

    import torch
    import lingbot_ros.ros.node  # noqa: F401 -- everything the node process imports
    from lingbot_ros.model import GCTModel
    from lingbot_ros.model.presets import preset_config

    with torch.device("meta"):
        model = GCTModel(preset_config(args.preset))
    report = {"python": sys.version.split()[0], "torch": torch.__version__,
              "preset": args.preset, "modules": sum(1 for _ in model.modules()),
              "tracked_objects": len(gc.get_objects()),
              "full_collection_ms": full_collection_ms(args.repeats)}
    gc.freeze()
    try:
        report["frozen_objects"] = gc.get_freeze_count()
        report["full_collection_ms_after_freeze"] = full_collection_ms(args.repeats)
        kept = [{"stamp": (i, i), "pose": [float(i)] * 7} for i in range(3000)]
        report["full_collection_ms_after_freeze_with_3000_kept"] = full_collection_ms(
            args.repeats)
        del kept
    finally:
        gc.unfreeze()
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
