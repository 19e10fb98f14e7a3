#!/usr/bin/env python3
"""GPU check of the official-size GCT model: FlashInfer vs torch_ref, both on CUDA.

    python3 scripts/gpu_model_check.py --out out.json

Random weights (seeded) at the released size, input 378x504, bf16 aggregator with fp32 heads,
KV cache bf16 with 8 scale frames + a 64-frame window. For each backend: one warm-up stream
(FlashInfer JIT-compiles on first use), then a fresh stream of ``--frames`` frames (phase 1 on
the 8 scale frames, then one frame per step, all committed). Per-frame time is eager
``StreamRunner.step`` (depth head included unless --no-depth), CUDA events, median over phase 2.

Prints and writes JSON: per backend the median / p90 ms per frame, phase-1 ms, peak memory,
NaN check; and the max abs pose_enc difference between the backends. Exit code 0 only if
every backend ran and every output is finite. Importable on a CPU machine (nothing runs at
import); without CUDA it exits 2 with a message.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import torch  # noqa: E402

from lingbot_ros.config import SessionConfig  # noqa: E402
from lingbot_ros.model import GCTConfig, GCTModel  # noqa: E402
from lingbot_ros.session import StepKind, StreamRunner  # noqa: E402


def build_model(seed: int) -> GCTModel:
    """Official-size network with seeded random weights, built directly on the GPU."""
    torch.manual_seed(seed)
    with torch.device("cuda"):
        model = GCTModel(GCTConfig.official())
        agg = model.aggregator
        for token in (agg.camera_token, agg.register_token, agg.scale_token):
            torch.nn.init.normal_(token, std=1.0)  # distinct first/other variants
        torch.nn.init.normal_(agg.patch_embed.pos_embed, std=0.02)
    return model.prepare("cuda", "bf16")


def run_stream(model: GCTModel, frames: torch.Tensor, backend_name: str, scale_frames: int,
               window: int, with_depth: bool) -> dict:
    """Stream ``frames``; return poses, per-frame times and peak memory."""
    image_hw = (frames.shape[2], frames.shape[3])
    name, _, variant = backend_name.partition(":")  # e.g. flashinfer:fa3
    runner = StreamRunner(model, SessionConfig(
        num_scale_frames=scale_frames, window=window, rollover_keyframes=None,
        attention_backend=name, flashinfer_variant=variant or "fa2", cuda_graphs=False,
        kv_splits=1, fused_kernels="off", device="cuda"), image_hw)
    start_evt, end_evt = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    poses, times_ms, phase1_ms = [], [], None
    torch.cuda.reset_peak_memory_stats()
    start = 0
    while start < frames.shape[0]:
        n = min(scale_frames, frames.shape[0]) if start == 0 else 1
        start_evt.record()
        outputs, txn = runner.step(frames[start:start + n], StepKind.KEYFRAME,
                                   with_depth=with_depth)
        txn.commit()
        end_evt.record()
        end_evt.synchronize()
        elapsed = start_evt.elapsed_time(end_evt)
        if start == 0:
            phase1_ms = elapsed
        else:
            times_ms.append(elapsed)
        poses.append(outputs.pose_enc.float().cpu())
        start += n
    result = {"poses": torch.cat(poses), "times_ms": times_ms, "phase1_ms": phase1_ms,
              "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
              "kv_cache_gib": runner.kv_cache.storage.nbytes / 2**30,
              "cache_info": runner.kv_cache.info()}
    del runner
    torch.cuda.empty_cache()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("gpu_model_check.json"))
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--height", type=int, default=378)
    parser.add_argument("--width", type=int, default=504)
    parser.add_argument("--scale-frames", type=int, default=8)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--backends", default="flashinfer:fa2,flashinfer:fa3,torch_ref",
                        help="comma list; flashinfer[:fa2|fa3]; each is compared to the last")
    parser.add_argument("--no-depth", action="store_true", help="skip the depth head")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_model_check: no CUDA device visible (torch.cuda.is_available() is False); "
              "run it on a GPU machine with a CUDA build of torch and flashinfer-python",
              file=sys.stderr)
        return 2

    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "settings": {k: v for k, v in vars(args).items() if k != "out"}, "backends": {}}
    try:
        import flashinfer
        report["flashinfer"] = flashinfer.__version__
    except ImportError:
        report["flashinfer"] = None
    model = build_model(args.seed)
    gen = torch.Generator(device="cuda").manual_seed(args.seed + 1)
    frames = torch.rand(args.frames, 3, args.height, args.width, device="cuda", generator=gen)
    poses = {}
    ok = True
    for name in [b.strip() for b in args.backends.split(",") if b.strip()]:
        entry = report["backends"][name] = {}
        try:
            run_stream(model, frames[:args.scale_frames + 3], name, args.scale_frames, args.window,
                       not args.no_depth)  # warm-up (FlashInfer JIT)
            r = run_stream(model, frames, name, args.scale_frames, args.window, not args.no_depth)
        except Exception as exc:  # report and go on with the other backend
            entry["error"] = f"{type(exc).__name__}: {exc}"
            entry["traceback"] = traceback.format_exc(limit=5)
            ok = False
            continue
        finite = bool(torch.isfinite(r["poses"]).all())
        ok &= finite
        times = sorted(r["times_ms"])
        entry.update(
            median_ms=statistics.median(times), p90_ms=times[int(0.9 * (len(times) - 1))],
            fps=1000.0 / statistics.median(times), phase1_ms=r["phase1_ms"],
            first_step_ms=r["times_ms"][0], last_step_ms=r["times_ms"][-1],
            peak_memory_gib=round(r["peak_memory_gib"], 3),
            kv_cache_gib=round(r["kv_cache_gib"], 3),
            frames_cached=r["cache_info"]["frames_cached"], nan_free=finite)
        poses[name] = r["poses"]
    if len(poses) >= 2:
        names = list(poses)
        ref_name = names[-1]
        report["pose_enc_max_abs_diff"] = {}
        for name in names[:-1]:
            diff = (poses[name] - poses[ref_name]).abs()
            per_frame = diff.amax(dim=1)
            report["pose_enc_max_abs_diff"][f"{name} vs {ref_name}"] = {
                "max": float(diff.max()), "median_over_frames": float(per_frame.median()),
                "worst_frame": int(per_frame.argmax()),
                "translation_max": float(diff[:, :3].max()),
                "quaternion_max": float(diff[:, 3:7].max()), "fov_max": float(diff[:, 7:].max())}
    report["ok"] = ok
    text = json.dumps(report, indent=2)
    print(text)
    args.out.write_text(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
