"""lingbot-ros-parity: replay a golden fixture and compare every expected tensor.

    python -m lingbot_ros.tools.parity --fixture ../shared/fixtures/reference_tiny

A fixture folder holds ``config.json`` (architecture + streaming settings), ``model.safetensors``
(reference key names, loaded strictly), ``frames.safetensors`` (``frames`` [N, 3, H, W] in
[0, 1]) and ``expected.safetensors``. The run follows the fixture README: phase 1 on the first
``num_scale_frames`` frames in one step, then one frame per step; with a keyframe interval
k > 1 the keyframes are begun as keyframe steps (evict, then attend) and the non-keyframes as
speculative steps (attend to the un-evicted window) that are rolled back, as the reference's
deferred eviction does. Every expected key is compared (a key the run does not produce is a
failure):

    pose_enc, pose_enc_list        max abs diff    <= 1e-5
    depth, depth_conf              max rel diff    <= 5e-5
    cache/*                        exact
    debug/f{i}_{name}              max abs diff    <= 2e-5   (frame i of the run)

Prints one line per key and exits 1 if any key fails, 0 otherwise.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from ..config import SessionConfig
from ..model import TAP_KEYS, GCTConfig, GCTModel, load_weights, record_intermediates
from ..session import StepKind, StreamRunner

TOLERANCES = {"pose": 1e-5, "dense": 5e-5, "debug": 2e-5}
DEBUG_KEY = re.compile(r"^debug/f(\d+)_(.+)$")


@dataclass(frozen=True)
class KeyResult:
    key: str
    metric: str  # "abs", "rel" or "exact"
    error: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.error <= self.tolerance


def run_fixture(fixture: Path, backend_name: str = "torch_ref") -> dict[str, torch.Tensor]:
    """Stream the fixture's frames through our model; return tensors named like expected."""
    raw = json.loads((fixture / "config.json").read_text())
    config = GCTConfig.from_fixture_json(fixture / "config.json")
    stream = raw["streaming"]
    s0, kf = stream["num_scale_frames"], stream.get("keyframe_interval", 1)
    model = load_weights(GCTModel(config), fixture / "model.safetensors").prepare("cpu", "fp32")
    frames = load_file(str(fixture / "frames.safetensors"))["frames"]
    expected_keys = load_file(str(fixture / "expected.safetensors")).keys()
    debug_frames = {int(m.group(1)) for k in expected_keys if (m := DEBUG_KEY.match(k))}

    if stream.get("kv_cache_scale_frames", s0) != s0:
        raise ValueError("parity: the fixture pins kv_cache_scale_frames to "
                         f"{stream['kv_cache_scale_frames']}, num_scale_frames is {s0}; our "
                         "streams use one number for both")
    runner = StreamRunner(model, SessionConfig(
        num_scale_frames=s0, window=stream["kv_cache_sliding_window"], rollover_keyframes=None,
        attention_backend=backend_name, cuda_graphs=False, device="cpu"),
        image_hw=(frames.shape[2], frames.shape[3]))

    per_frame: dict[str, list] = {k: [] for k in
                                  ("pose_enc", "pose_enc_list", "depth", "depth_conf")}
    counts: dict[str, list] = {k: [] for k in ("total_frames_processed", "kv_full_frames",
                                               "kv_special_only_frames", "camera_head_frames")}
    debug_out: dict[str, torch.Tensor] = {}
    start = 0
    while start < frames.shape[0]:
        n = min(s0, frames.shape[0]) if start == 0 else 1
        keyframe = start < s0 or kf <= 1 or (start - s0) % kf == 0
        wanted = sorted(f for f in debug_frames if start <= f < start + n)
        txn = runner.begin(n, StepKind.KEYFRAME if keyframe else StepKind.SPECULATIVE)
        with record_intermediates(model) as taps:
            outputs = runner.run(frames[start:start + n], txn)
        txn.commit() if keyframe else txn.rollback()
        per_frame["pose_enc"].append(outputs.pose_enc)
        per_frame["pose_enc_list"].append(outputs.pose_enc_list)
        per_frame["depth"].append(outputs.depth)
        per_frame["depth_conf"].append(outputs.depth_conf)
        info = runner.info()
        for _ in range(n):
            counts["total_frames_processed"].append(info["cache"]["frames_committed"])
            counts["kv_full_frames"].append(info["cache"]["frames_cached"])
            counts["kv_special_only_frames"].append(info["cache"]["frames_committed"]
                                                    - info["cache"]["frames_cached"])
            counts["camera_head_frames"].append(info["camera_cache"]["frames_cached"])
        for f in wanted:
            for name in TAP_KEYS:
                t, local = taps[name], f - start
                layered = name == "aggregator_selected_layers"  # (4, n, T, 2C)
                debug_out[f"debug/f{f}_{name}"] = t[:, local] if layered else t[local]
        start += n

    result = {"pose_enc": torch.cat(per_frame["pose_enc"]),
              "pose_enc_list": torch.cat(per_frame["pose_enc_list"], dim=1),
              "depth": torch.cat(per_frame["depth"]),
              "depth_conf": torch.cat(per_frame["depth_conf"])}
    result.update({f"cache/{k}": torch.tensor(v, dtype=torch.int64) for k, v in counts.items()})
    result.update(debug_out)
    return result


def compare(expected: dict[str, torch.Tensor], actual: dict[str, torch.Tensor],
            tolerances: dict[str, float] = TOLERANCES) -> list[KeyResult]:
    """One ``KeyResult`` per expected key (inf error if missing or mis-shaped)."""
    results = []
    for key in sorted(expected):
        e, a = expected[key], actual.get(key)
        if key.startswith("cache/"):
            metric, tol = "exact", 0.0
        elif key in ("depth", "depth_conf"):
            metric, tol = "rel", tolerances["dense"]
        elif key.startswith("debug/"):
            metric, tol = "abs", tolerances["debug"]
        else:
            metric, tol = "abs", tolerances["pose"]
        if a is None or tuple(a.shape) != tuple(e.shape):
            results.append(KeyResult(key, metric, float("inf"), tol))
            continue
        diff = (a.double() - e.double()).abs()
        if metric == "rel":
            diff = diff / e.double().abs().clamp_min(1e-30)
        err = float(diff.max()) if diff.numel() else 0.0
        if not torch.isfinite(a.double()).all():
            err = float("inf")
        results.append(KeyResult(key, metric, err, tol))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fixture", required=True, type=Path, help="fixture folder")
    parser.add_argument("--backend", default="torch_ref", help="attention backend (CPU: torch_ref)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (the reference fixture was made with 2)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    for name in ("config.json", "model.safetensors", "frames.safetensors", "expected.safetensors"):
        if not (args.fixture / name).is_file():
            print(f"parity: {args.fixture / name} is missing", file=sys.stderr)
            return 2
    expected = load_file(str(args.fixture / "expected.safetensors"))
    results = compare(expected, run_fixture(args.fixture, args.backend))
    width = max(len(r.key) for r in results)
    for r in results:
        print(f"{'ok  ' if r.ok else 'FAIL'} {r.key:<{width}}  {r.metric:<5} max err {r.error:.3e}"
              f"  (tol {r.tolerance:.0e})")
    failed = [r.key for r in results if not r.ok]
    print(f"parity: {len(results) - len(failed)}/{len(results)} keys within tolerance"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ | {"ok": r.ok} for r in results], indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
