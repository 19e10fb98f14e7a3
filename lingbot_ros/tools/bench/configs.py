"""lingbot-ros-bench's setup: the named configurations, the model built once per run, the
session config of a configuration and the input images (shared by cli.py and
parity.py)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...config import KeyframeConfig, PreprocessConfig, SessionConfig
from ...model.presets import preset_config, random_model

CONFIGS = {  # name -> overrides of the default setup
    "default": {},
    "eager": {"cuda_graphs": False},
    "iter1": {"iterations": 1},
    "every2": {"keyframes": KeyframeConfig(policy="every_n", n=2)},
    # every frame speculative, kept when the camera-motion flow passes 10 px (or 30 frames)
    "flow": {"keyframes": KeyframeConfig(policy="flow", flow_threshold=10.0, max_gap=30)},
    # flow with threshold 0: every frame speculative and then kept (fills the window fast)
    "flow0": {"keyframes": KeyframeConfig(policy="flow", flow_threshold=0.0, max_gap=30)},
    "nodepth": {"with_depth": False},
    "518x378": {"hw": (378, 518)},
    "split1": {"kv_splits": 1},  # flashinfer split-KV off / other part counts
    "split8": {"kv_splits": 8},
    "unfused": {"fused_kernels": "off"},  # q/k norm + RoPE as separate torch ops
    # one change of the speed issue taken back at a time (same run as default)
    "push": {"pipeline": False},  # a synchronous push per frame: host work not hidden
    "cam_bf16": {"camera_head_precision": "bf16"},  # camera head in bf16 (not the default)
    # the 40 FPS candidates of the GPU issue, each alone (not the default)
    "depth_bf16": {"depth_head_precision": "bf16"},  # DPT depth head in bf16
    "fp8_mlp": {"mlp_precision": "fp8"},  # aggregator MLP GEMMs in float8 e4m3
    "depth_bf16_fp8_mlp": {"depth_head_precision": "bf16", "mlp_precision": "fp8"},
    "no_add_norm": {"fused_kernels_off": ("add_norm",)},  # residual + LayerNorm as two ops
    "no_kv_write": {"fused_kernels_off": ("kv_write",)},  # q.repeat + two index_copy_
    "no_split_merge": {"fused_kernels_off": ("split_merge",)},  # pairwise merge_state
}
SETTINGS_WIDTHS = (518, 392, 294, 224)  # the "pick your settings" table: widths x windows x
SETTINGS_WINDOWS = (64, 32, 16)  # keyframe policies, at aspect 4:3
SETTINGS_POLICIES = {"all": KeyframeConfig(), "every2": KeyframeConfig(policy="every_n", n=2)}


def height_for(width: int, aspect: float = 4 / 3, patch: int = 14) -> int:
    """The model input height of a ``width`` at ``aspect`` (W/H), on the patch grid."""
    return max(patch, round(width / aspect / patch) * patch)


def settings_config(name: str) -> dict:
    """Overrides of a sweep config named ``w<W>_win<N>_<all|every2>`` (ValueError else)."""
    parts = name.split("_")
    try:
        width, window, policy = int(parts[0][1:]), int(parts[1][3:]), parts[2]
        if len(parts) != 3 or parts[0][0] != "w" or not parts[1].startswith("win"):
            raise ValueError
        keyframes = SETTINGS_POLICIES[policy]
    except (ValueError, IndexError, KeyError):
        raise ValueError(f"not a settings config: {name!r} (w<width>_win<window>_"
                         f"<{'|'.join(SETTINGS_POLICIES)}>)") from None
    return {"hw": (height_for(width), width), "window": window, "keyframes": keyframes}


def settings_configs() -> list[str]:
    """Every combination of the settings table, widest and largest window first."""
    return [f"w{w}_win{n}_{p}" for w in SETTINGS_WIDTHS for n in SETTINGS_WINDOWS
            for p in SETTINGS_POLICIES]


def overrides_of(name: str) -> dict:
    return CONFIGS[name] if name in CONFIGS else settings_config(name)


def percentile(values, q):
    return float(np.percentile(np.asarray(values), q)) if values else None


MODELS_BUILT: dict = {}  # (preset, iterations, device, precisions) -> model: built once per run
PRECISION_KEYS = (("camera_head_precision", "fp32"), ("depth_head_precision", "fp32"),
                  ("mlp_precision", "aggregator"))  # GCTModel.prepare's, and their defaults


def precisions_of(over: dict) -> tuple[str, str, str]:
    """A config's (camera head, depth head, MLP) precisions."""
    return tuple(over.get(key, default) for key, default in PRECISION_KEYS)


def bench_model(args, iterations: int, device: str, precisions: tuple = ("fp32", "fp32",
                                                                      "aggregator")):
    key = (args.preset, iterations, device, tuple(precisions))
    if key not in MODELS_BUILT:
        mcfg = preset_config(args.preset)
        mcfg = replace(mcfg, camera_head=replace(mcfg.camera_head, num_iterations=iterations))
        MODELS_BUILT.clear()  # one official-size model on the GPU at a time
        MODELS_BUILT[key] = random_model(mcfg, seed=0, device=device).prepare(
            device, "auto", *precisions)
    return MODELS_BUILT[key]


def session_config(args, over: dict, device: str, **extra) -> SessionConfig:
    h, w = over.get("hw", (args.height, args.width))
    fields = dict(
        num_scale_frames=8, window=over.get("window", 64),
        rollover_keyframes=args.rollover or None,
        keyframes=over.get("keyframes", KeyframeConfig()),
        preprocess=PreprocessConfig(width=w, height=h), with_depth=over.get("with_depth", True),
        return_depth=False, attention_backend=args.backend, flashinfer_variant=args.variant,
        cuda_graphs=over.get("cuda_graphs", True), kv_splits=over.get("kv_splits", args.kv_splits),
        fused_kernels=over.get("fused_kernels", "auto"),
        fused_kernels_off=over.get("fused_kernels_off", ()), device=device)
    fields.update(extra)
    return SessionConfig(**fields)


def bench_images(hw, count: int = 8) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [(rng.random(hw + (3,)) * 255).astype(np.uint8) for _ in range(count)]
