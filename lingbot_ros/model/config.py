"""Typed, frozen configuration of the GCT network (LingBot-Map), validated with ValueError.

Defaults are the released model (``lingbot-map.pt``, ``lingbot-map-long.pt``,
``lingbot-map-stage1.pt``): DINOv2 ViT-L/14 with 4 registers, 24 x (frame block, global block)
at width 1024 with 16 heads, layers [4, 11, 17, 23] to the heads, camera head 2048-d with
4 trunk blocks and 4 refinement iterations, DPT depth head. Every size is a field, so smaller
networks (the ``reference_tiny`` fixture) are expressible; nothing is derived from a
hard-coded ratio. Stdlib only (no torch), like ``lingbot_ros.config``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from ..config import CacheConfig, check_non_negative_int, check_positive_int

NUM_SPECIAL_TOKENS_EXTRA = 2  # camera + scale; the registers come on top


def _positive_float(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")


def _divides(name: str, dim: int, heads: int) -> None:
    if dim % heads:
        raise ValueError(f"{name}: width {dim} is not divisible by {heads} heads")


@dataclass(frozen=True, slots=True)
class DinoConfig:
    """DINOv2 patch embedding (runs on every frame inside the aggregator)."""

    embed_dim: int = 1024  # ViT-L width; must equal the aggregator width
    depth: int = 24  # transformer blocks
    num_heads: int = 16  # head_dim = embed_dim / num_heads
    mlp_ratio: float = 4.0  # MLP hidden = int(embed_dim * mlp_ratio)
    num_register_tokens: int = 4  # DINOv2 "reg" variant
    pos_embed_grid: int = 37  # learned position table side: 518 / 14
    norm_eps: float = 1e-6  # every LayerNorm in DINO
    layerscale_init: float = 1.0  # only used for fresh (random) weights

    def __post_init__(self) -> None:
        for name in ("embed_dim", "depth", "num_heads", "pos_embed_grid"):
            check_positive_int(f"dino.{name}", getattr(self, name))
        check_non_negative_int("dino.num_register_tokens", self.num_register_tokens)
        _positive_float("dino.mlp_ratio", self.mlp_ratio)
        _positive_float("dino.norm_eps", self.norm_eps)
        _divides("dino", self.embed_dim, self.num_heads)


@dataclass(frozen=True, slots=True)
class AggregatorConfig:
    """Alternating frame/global transformer over [camera, registers, scale, patches]."""

    embed_dim: int = 1024
    depth: int = 24  # number of (frame block, global block) pairs
    num_heads: int = 16
    mlp_ratio: float = 4.0
    num_register_tokens: int = 4  # aggregator registers (its own parameters, not DINO's)
    qk_norm: bool = True  # per-head LayerNorm on q and k, before RoPE
    norm_eps: float = 1e-5  # block pre-norms and q/k norms
    layerscale_init: float = 0.01  # only used for fresh (random) weights
    frame_rope_base: float = 100.0  # 2D RoPE in the frame blocks
    video_rope_theta: float = 10000.0  # 3D RoPE in the global blocks
    video_rope_dims: tuple[int, int, int] = (20, 22, 22)  # (time, y, x) channels per head
    selected_layers: tuple[int, ...] = (4, 11, 17, 23)  # block pairs fed to the heads

    def __post_init__(self) -> None:
        for name in ("embed_dim", "depth", "num_heads"):
            check_positive_int(f"aggregator.{name}", getattr(self, name))
        check_non_negative_int("aggregator.num_register_tokens", self.num_register_tokens)
        _positive_float("aggregator.mlp_ratio", self.mlp_ratio)
        _positive_float("aggregator.frame_rope_base", self.frame_rope_base)
        _positive_float("aggregator.video_rope_theta", self.video_rope_theta)
        _divides("aggregator", self.embed_dim, self.num_heads)
        if self.head_dim % 4:
            raise ValueError(f"aggregator head_dim {self.head_dim} must be a multiple of 4 "
                             "(2D RoPE rotates y and x halves in pairs)")
        dims = tuple(self.video_rope_dims)
        if len(dims) != 3 or any(d < 2 or d % 2 for d in dims) or sum(dims) != self.head_dim:
            raise ValueError(f"aggregator.video_rope_dims {dims} must be three even sizes summing "
                             f"to head_dim {self.head_dim}")
        sel = tuple(self.selected_layers)
        if len(sel) != 4 or list(sel) != sorted(set(sel)) or sel[0] < 0 or sel[-1] >= self.depth:
            raise ValueError(f"aggregator.selected_layers {sel} must be 4 increasing block indices "
                             f"in [0, {self.depth})")

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads

    @property
    def num_special_tokens(self) -> int:
        """Camera + registers + scale: the tokens before the patches of every frame."""
        return self.num_register_tokens + NUM_SPECIAL_TOKENS_EXTRA


@dataclass(frozen=True, slots=True)
class CameraHeadConfig:
    """Iterative camera head on the camera token (width = 2 x aggregator width)."""

    trunk_depth: int = 4
    num_heads: int = 16  # head_dim = 2 * aggregator.embed_dim / num_heads (128 released)
    mlp_ratio: float = 4.0
    num_iterations: int = 4  # refinement iterations, each with its own camera-token cache
    layerscale_init: float = 0.01

    def __post_init__(self) -> None:
        for name in ("trunk_depth", "num_heads", "num_iterations"):
            check_positive_int(f"camera_head.{name}", getattr(self, name))
        _positive_float("camera_head.mlp_ratio", self.mlp_ratio)


@dataclass(frozen=True, slots=True)
class DPTConfig:
    """DPT dense head on the 4 selected layers (depth: 2 outputs; points: 4 outputs)."""

    features: int = 256
    out_channels: tuple[int, int, int, int] = (256, 512, 1024, 1024)
    head_features_2: int = 32  # channels of the last 3x3 conv
    frames_chunk_size: int = 8  # frames per chunk (bounds peak memory, same math)

    def __post_init__(self) -> None:
        for name in ("features", "head_features_2", "frames_chunk_size"):
            check_positive_int(f"dpt.{name}", getattr(self, name))
        if len(self.out_channels) != 4:
            raise ValueError(f"dpt.out_channels needs 4 entries, got {self.out_channels!r}")
        for c in self.out_channels:
            check_positive_int("dpt.out_channels[*]", c)
        if self.features % 2:
            raise ValueError(f"dpt.features must be even, got {self.features}")


@dataclass(frozen=True, slots=True)
class GCTConfig:
    """The whole network. ``point_head=None`` (the streaming checkpoints) skips it."""

    patch_size: int = 14
    dino: DinoConfig = field(default_factory=DinoConfig)
    aggregator: AggregatorConfig = field(default_factory=AggregatorConfig)
    camera_head: CameraHeadConfig = field(default_factory=CameraHeadConfig)
    depth_head: Optional[DPTConfig] = field(default_factory=DPTConfig)
    point_head: Optional[DPTConfig] = None

    def __post_init__(self) -> None:
        check_positive_int("patch_size", self.patch_size)
        if self.dino.embed_dim != self.aggregator.embed_dim:
            raise ValueError(f"dino.embed_dim {self.dino.embed_dim} must equal "
                             f"aggregator.embed_dim {self.aggregator.embed_dim} (DINO patch "
                             "tokens enter the aggregator)")
        _divides("camera_head", self.head_dim_in, self.camera_head.num_heads)

    @property
    def head_dim_in(self) -> int:
        """Width of the selected layers: concat of frame and global outputs."""
        return 2 * self.aggregator.embed_dim

    # -- presets ---------------------------------------------------------------------------
    @staticmethod
    def official(point_head: bool = False) -> "GCTConfig":
        """The released LingBot-Map network; ``point_head=True`` for lingbot-map-stage1.pt."""
        return GCTConfig(point_head=DPTConfig() if point_head else None)

    @staticmethod
    def tiny() -> "GCTConfig":
        """The embedded tiny network (the golden fixture's sizes): for demos and tests on a CPU.

        Same architecture as the released model, ~4.6 M parameters: width 128, 2 DINO blocks,
        4 (frame, global) pairs all fed to the heads, camera head 256-d with 2 trunk blocks,
        DPT with 32 features. Random weights give meaningless poses.
        """
        return GCTConfig(
            dino=DinoConfig(embed_dim=128, depth=2, num_heads=2),
            aggregator=AggregatorConfig(embed_dim=128, depth=4, num_heads=2,
                                        selected_layers=(0, 1, 2, 3)),
            camera_head=CameraHeadConfig(trunk_depth=2, num_heads=2),
            depth_head=DPTConfig(features=32, out_channels=(32, 64, 128, 128)))

    @staticmethod
    def from_fixture_json(path: str | Path) -> "GCTConfig":
        """Read a fixture ``config.json`` (format of ``shared/fixtures/reference_tiny``)."""
        c = json.loads(Path(path).read_text())
        d, a, cam, dep = c["dino"], c["aggregator"], c["camera_head"], c["depth_head"]
        if a.get("aa_order", ["frame", "global"]) != ["frame", "global"] \
                or a.get("aa_block_size", 1) != 1:
            raise ValueError("only aa_order ['frame', 'global'] with aa_block_size 1 is supported")
        if tuple(dep.get("intermediate_layer_idx", (0, 1, 2, 3))) != (0, 1, 2, 3):
            raise ValueError("the DPT head must read the 4 selected layers in order")
        grid = d["pos_embed_grid"]
        if grid[0] != grid[1]:
            raise ValueError(f"non-square DINO position grid {grid}")
        dino = DinoConfig(
            embed_dim=d["embed_dim"], depth=d["depth"], num_heads=d["num_heads"],
            mlp_ratio=float(d["mlp_ratio"]), num_register_tokens=d["num_register_tokens"],
            pos_embed_grid=grid[0], norm_eps=float(d["layernorm_eps"]),
            layerscale_init=float(d["layerscale_init"]))
        agg = AggregatorConfig(
            embed_dim=a["embed_dim"], depth=a["depth"], num_heads=a["num_heads"],
            mlp_ratio=float(a["mlp_ratio"]),
            num_register_tokens=a["num_special_tokens"] - NUM_SPECIAL_TOKENS_EXTRA,
            qk_norm=bool(a["qk_norm"]), norm_eps=float(a["block_norm_eps"]),
            layerscale_init=float(a["layerscale_init"]),
            frame_rope_base=float(a["frame_rope"]["base"]),
            video_rope_theta=float(a["global_rope"]["theta"]),
            video_rope_dims=tuple(a["global_rope"]["fhw_dim"]),
            selected_layers=tuple(a["selected_layers"]))
        camera = CameraHeadConfig(
            trunk_depth=cam["trunk_depth"], num_heads=cam["num_heads"],
            mlp_ratio=float(cam["mlp_ratio"]), num_iterations=cam["num_iterations"],
            layerscale_init=float(cam["layerscale_init"]))
        depth = DPTConfig(features=dep["features"], out_channels=tuple(dep["out_channels"]),
                          head_features_2=dep["head_features_2"],
                          frames_chunk_size=dep["frames_chunk_size"])
        point = None
        if c.get("point_head"):
            p = c["point_head"]
            point = DPTConfig(features=p["features"], out_channels=tuple(p["out_channels"]),
                              head_features_2=p["head_features_2"],
                              frames_chunk_size=p["frames_chunk_size"])
        return GCTConfig(patch_size=c["image"]["patch_size"], dino=dino, aggregator=agg,
                         camera_head=camera, depth_head=depth, point_head=point)

    def with_point_head(self, enabled: bool) -> "GCTConfig":
        """Same network with the point head added (a copy of the depth-head sizes) or removed."""
        if not enabled:
            return replace(self, point_head=None)
        return self if self.point_head is not None else replace(
            self, point_head=self.depth_head or DPTConfig())

    # -- cache shapes ----------------------------------------------------------------------
    def cache_config(self, image_hw: tuple[int, int], scale_frames: int, window: int,
                     dtype: str = "float32", device: str = "cpu", **kwargs) -> CacheConfig:
        """The paged-cache config that matches this network at an input size.

        Args:
            image_hw: model input (H, W) in pixels, multiples of ``patch_size``.
            scale_frames: pinned anchor frames (reference: 8).
            window: sliding window of full frames, current included (reference: 64).
            dtype: ``float32`` (CPU) or ``bfloat16`` (CUDA, bf16 aggregator).
            **kwargs: any other ``CacheConfig`` field (``max_special_frames``, ...).
        Returns:
            ``CacheConfig`` with one layer per global block and one page per frame.
        """
        hp, wp = self.patch_grid(image_hw)
        a = self.aggregator
        return CacheConfig(num_layers=a.depth, num_heads=a.num_heads, head_dim=a.head_dim,
                           page_size=hp * wp, num_special=a.num_special_tokens,
                           scale_frames=scale_frames, window=window, dtype=dtype, device=device,
                           **kwargs)

    def camera_cache_dims(self) -> dict[str, int]:
        """Keyword arguments of ``CameraKVCache`` for this network's camera head."""
        h = self.camera_head
        return {"num_iterations": h.num_iterations, "num_layers": h.trunk_depth,
                "num_heads": h.num_heads, "head_dim": self.head_dim_in // h.num_heads}

    def patch_grid(self, image_hw: tuple[int, int]) -> tuple[int, int]:
        """(H / patch, W / patch); raises ValueError if a side is not a positive multiple."""
        h, w = image_hw
        p = self.patch_size
        if h < p or w < p or h % p or w % p:
            raise ValueError(f"input size {h}x{w} must be positive multiples of the patch size {p}")
        return h // p, w // p
