"""Where the GPU time of a steady streaming frame goes: by kernel family and by model stage.

Used by ``lingbot-ros-bench --profile``. A graphed configuration's kernels come from its
replays; its per-stage split from the same step launched eagerly (an "eager twin"), because
replays run no Python and so have no stage ranges.
"""
from __future__ import annotations

import gc
import re
import time
from collections import defaultdict
from dataclasses import replace

import torch

from ...config import SessionConfig
from ...session import StreamingSession, warm_up

FLASHINFER = "attention (paged, FlashInfer)"
KERNEL_FAMILIES = (  # (family, regex on the kernel name), first match wins
    ("q/k norm + RoPE (fused, Triton)", r"qk_norm_rope"),
    (FLASHINFER, r"Prefill|flashinfer|PersistentKernel|fmha"),
    ("attention (SDPA)", r"flash_fwd|attention|sdpa|efficient"),
    ("GEMM", r"gemm|Gemm|cutlass|xmma|nvjet|cublas|matmul|sm90_"),
    ("convolution", r"conv|Conv|cudnn|implicit|winograd|dgrad|fprop"),
    ("LayerNorm", r"layer_norm|LayerNorm"),
    ("copy / cast", r"copy|Copy|cast"),
)


def profile_stages(session, images, args, name: str, frames: int = 20) -> dict:
    """Per steady frame (full window), over ``frames`` pushes: GPU time by kernel family, the
    wall time, and for eager steps the time of each model stage (``lingbot/*`` profiler
    ranges: DINO, frame blocks, global blocks and their attention, camera and depth heads;
    on CUDA the kernels launched in each, which take the same time whether launched eagerly
    or replayed; on the CPU the ranges' CPU time). Resets the session."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                           if torch.cuda.is_available() else [])
    # A steady frame sees the full window: restart the stream and fill it first (untimed),
    # well before the next rollover.
    session.reset()
    stamp = 10**15
    cfg = session.config
    stride = cfg.keyframes.n if cfg.keyframes.policy == "every_n" else 1
    for i in range(cfg.num_scale_frames + stride * cfg.window + 8):
        session.push(images[i % len(images)], stamp + i)
    stamp += 10**6
    t0 = time.perf_counter()
    with profile(activities=activities) as prof:
        for i in range(frames):
            session.push(images[i % len(images)], stamp + i)
    wall_ms = (time.perf_counter() - t0) * 1e3 / frames
    cuda = torch.cuda.is_available()
    families: dict[str, float] = defaultdict(float)
    stages: dict[str, float] = {}
    for evt in prof.key_averages():
        if evt.key.startswith("lingbot/"):  # the model's stage ranges (eager steps only)
            us = (getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0)
                  if cuda else evt.cpu_time_total)
            stages[evt.key[len("lingbot/"):]] = round(us / 1e3 / frames, 3)
            continue
        if not str(getattr(evt, "device_type", "")).endswith("CUDA"):
            continue
        us = getattr(evt, "self_device_time_total", None)
        if us is None:
            us = getattr(evt, "self_cuda_time_total", 0.0)
        family = next((f for f, rx in KERNEL_FAMILIES if re.search(rx, evt.key)), "other")
        families[family] += us / 1e3 / frames
    table = prof.key_averages().table(
        sort_by="self_cuda_time_total" if cuda else "self_cpu_time_total", row_limit=40)
    with open(args.out.rsplit(".", 1)[0] + f"_{name}_profile.txt", "w") as f:
        f.write(f"{frames} frames (profiler overhead included in wall time)\n{table}\n")
    out = {k: round(v, 3) for k, v in sorted(families.items(), key=lambda kv: -kv[1])}
    out["total_gpu"] = round(sum(families.values()), 3)
    out["wall_under_profiler"] = round(wall_ms, 3)
    if "global_block" in stages and "global_attention" in stages:
        stages["global_block_without_attention"] = round(
            stages["global_block"] - stages["global_attention"], 3)
    result = {"gpu_ms_per_frame": out}
    by_kernels = kernel_ms_by_stage(prof, frames) if cuda else {}
    if by_kernels:
        # FlashInfer launches through its own FFI: those kernels carry no link to the range
        # that launched them. They run only in the global attention, so count them there.
        unlinked = out["total_gpu"] - by_kernels["total"]
        flashinfer = families.get(FLASHINFER, 0.0)
        moved = min(max(unlinked, 0.0), flashinfer)
        by_kernels["global_attention"] = round(by_kernels.get("global_attention", 0) + moved, 3)
        if unlinked - moved > 0.05:
            by_kernels["not linked to a stage"] = round(unlinked - moved, 3)
        by_kernels["total"] = round(by_kernels["total"] + unlinked, 3)
        stages = dict(sorted(by_kernels.items(), key=lambda kv: (kv[0] == "total", -kv[1])))
    elif cuda and stages:  # no kernel-to-range links in this torch: range spans, idle included
        result["gpu_ms_per_stage_spans_include_idle"] = True
    if stages:  # graph replays run no Python, so only eager steps have stage ranges
        result["gpu_ms_per_stage" if cuda else "cpu_ms_per_stage"] = stages
    return result


def kernel_ms_by_stage(prof, frames: int) -> dict:
    """GPU time of the kernels launched inside each ``lingbot/*`` range (innermost wins), per
    frame. Kernel durations, not range spans: an eager range also spans the GPU's idle gaps
    between launches. Empty when no kernel was launched inside a range (graph replays)."""
    stages: dict[str, float] = defaultdict(float)
    for evt in prof.events():
        kernels = getattr(evt, "kernels", None) or []
        if not kernels:
            continue
        stage, parent = "outside_model (preprocess, session)", evt
        while parent is not None:
            if parent.name.startswith("lingbot/"):
                stage = parent.name[len("lingbot/"):]
                break
            parent = parent.cpu_parent
        stages[stage] += sum(k.duration for k in kernels) / 1e3 / frames  # us -> ms
    if len(stages) <= 1:
        return {}
    if "global_block" in stages:  # exclusive: its attention is a stage of its own
        stages["global_block_without_attention"] = stages.pop("global_block")
    out = {k: round(v, 3) for k, v in sorted(stages.items(), key=lambda kv: -kv[1])}
    out["total"] = round(sum(stages.values()), 3)
    return out


def stage_split(model, cfg: SessionConfig, images, args, name: str) -> dict:
    """Per-stage GPU time of a graphed configuration: graph replays run no Python, so the
    stage ranges come from the same step launched eagerly (same kernels, same plan)."""
    twin = StreamingSession(model, replace(cfg, cuda_graphs=False))
    warm_up(twin)
    split = profile_stages(twin, images, args, name + "_eager_twin")
    del twin
    gc.collect()
    return {"gpu_ms_per_stage": split.get("gpu_ms_per_stage", {}),
            "gpu_ms_per_stage_from": "the same step launched eagerly (CUDA-graph replays have "
                                     "no stage ranges); kernel times match the replay's"}
