"""GCTModel: LingBot-Map's streaming Geometric Context Transformer, one step at a time.

    model = GCTModel(GCTConfig.official())            # or load_model(path)
    cache = PagedKVCache(model.config.cache_config((378, 504), scale_frames=8, window=64))
    camera_cache = CameraKVCache(**model.config.camera_cache_dims())
    backend = make_backend("torch_ref", cache.storage)
    outputs, txn = model.step(frames[:8], cache, camera_cache, backend, num_scale_frames=8)
    txn.commit()                                       # phase 1: the anchor frames, together
    outputs, txn = model.step(frames[8:9], cache, camera_cache, backend, num_scale_frames=8)
    txn.commit() if keyframe else txn.rollback()       # then one frame per step

The model holds weights only: caches, their layout and the attention backend are arguments,
so one model serves any number of streams.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch
from torch import Tensor, nn
from torch.profiler import record_function

from . import qk_fused
from .aggregator import Aggregator
from .camera_head import CameraHead
from .config import GCTConfig
from .dpt_head import DPTHead, activate_depth, activate_points
from .layers import Attention
from .pose import pose_to_c2w, pose_to_intrinsics
from .step import StepOutputs, StepResult, StepTxn

if TYPE_CHECKING:  # pragma: no cover
    from ..attention.backend import AttentionBackend
    from ..cache.camera_cache import CameraCacheTxn, CameraKVCache
    from ..cache.frame_txn import KVWriter
    from ..cache.kv_cache import PagedKVCache
    from .rope import VideoRope

DEBUG_KEYS = ("dino_patch_tokens", "frame_block0_out", "global_block0_attn_out",
              "global_block0_out", "aggregator_selected_layers")


class GCTModel(nn.Module):
    def __init__(self, config: GCTConfig = GCTConfig()) -> None:
        super().__init__()
        self.config = config
        self.aggregator = Aggregator(config.aggregator, config.dino, config.patch_size)
        dim_in = config.head_dim_in
        self.camera_head = CameraHead(config.camera_head, dim_in)
        self.depth_head = (DPTHead(config.depth_head, dim_in, config.patch_size, output_dim=2)
                           if config.depth_head is not None else None)
        self.point_head = (DPTHead(config.point_head, dim_in, config.patch_size, output_dim=4)
                           if config.point_head is not None else None)

    def prepare(self, device: str | torch.device, precision: str = "auto") -> "GCTModel":
        """Move to ``device``; eval mode; set the aggregator precision.

        Args:
            precision: ``fp32``; ``bf16`` (aggregator weights and activations in bfloat16,
                heads in fp32: the reference demo's bf16-autocast setup, with the same
                float32 islands made explicit: LayerNorm statistics, q/k norms and RoPE);
                ``auto`` = bf16 on CUDA, fp32 elsewhere. With bf16 the KV cache must be
                ``bfloat16``.
        """
        device = torch.device(device)
        if precision == "auto":
            precision = "bf16" if device.type == "cuda" else "fp32"
        if precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be 'fp32', 'bf16' or 'auto', got {precision!r}")
        self.to(device=device, dtype=torch.float32).eval().requires_grad_(False)
        if device.type == "cuda":
            # The dense heads' tokens arrive channels-last ((n, h*w, C) viewed as NCHW); with
            # NCHW weights cuDNN converted layouts around every conv (~0.5 ms per frame).
            for head in (self.depth_head, self.point_head):
                if head is not None:
                    head.to(memory_format=torch.channels_last)
        if precision == "bf16":
            self.aggregator.to(torch.bfloat16)
            # The normalisation constants stay fp32 (as in the reference), and so do the
            # q/k norms, which autocast ran in fp32 (``Attention.norm_qk``).
            self.aggregator.image_mean = self.aggregator.image_mean.float()
            self.aggregator.image_std = self.aggregator.image_std.float()
            for module in self.aggregator.modules():
                if isinstance(module, Attention) and not isinstance(module.q_norm, nn.Identity):
                    module.q_norm.float()
                    module.k_norm.float()
        return self

    def use_fused_kernels(self, mode: str = "auto") -> bool:
        """Switch the fused q/k-norm + RoPE kernel of the rotary blocks (``qk_fused``).

        Args:
            mode: ``auto`` (on when the model is on CUDA in bf16 and Triton imports), ``on``
                (the same, or RuntimeError), ``off``.
        Returns:
            Whether the kernel is now in use. The setting belongs to the model (shared by
            every session that runs it); call after ``prepare``.
        """
        on = qk_fused.resolve(mode, self.aggregator.camera_token.device,
                              self.aggregator.dtype)
        for module in self.aggregator.modules():
            if isinstance(module, Attention):
                module.fused_qk = on
        return on

    @property
    def kv_dtype(self) -> torch.dtype:
        """The dtype the paged KV cache must store (the aggregator's weight dtype)."""
        return self.aggregator.dtype

    @torch.no_grad()
    def step(self, images: Tensor, kv_cache: "PagedKVCache", camera_cache: "CameraKVCache",
             backend: "AttentionBackend", num_scale_frames: int, *, with_depth: bool = True,
             with_points: bool = True, debug: Optional[dict] = None) -> StepResult:
        """Run one streaming step speculatively; the caller commits or rolls it back.

        Phase 1 is the first ``num_scale_frames`` frames in one step on empty caches (they
        attend to each other both ways); after that every step is one frame.

        Args:
            images: (n, 3, H, W) RGB in [0, 1] (any float dtype), H and W multiples of the
                patch size, on the model's device.
            kv_cache: the stream's paged KV cache (``config.cache_config`` shape and dtype).
            camera_cache: the stream's camera-head cache (``config.camera_cache_dims``).
            backend: attention backend over ``kv_cache.storage``.
            num_scale_frames: phase-1 size (frames that get the first scale-token variant).
            with_depth: run the depth head (switch off for speed).
            with_points: run the point head when the model has one.
            debug: optional dict; filled with this step's intermediates ``DEBUG_KEYS``, each
                with a leading frame axis (``aggregator_selected_layers``: (4, n, T, 2C)).
        Returns:
            ``StepResult(outputs, txn)``; ``txn`` must be committed or rolled back before the
            next step. On an exception both caches are rolled back and it propagates.
        """
        n = self.check_step(images, kv_cache, camera_cache, num_scale_frames)
        image_hw = (images.shape[2], images.shape[3])
        frame_txn = kv_cache.begin(n)
        try:
            camera_txn = camera_cache.begin(n)
        except Exception:
            frame_txn.rollback()
            raise
        txn = StepTxn(frame_txn, camera_txn)
        try:
            outputs = self._forward(images, image_hw, txn, backend, num_scale_frames,
                                    with_depth, with_points, debug)
        except Exception:
            txn.rollback()
            raise
        return StepResult(outputs, txn)

    def _forward(self, images: Tensor, image_hw: tuple[int, int], txn: StepTxn,
                 backend: "AttentionBackend", num_scale_frames: int, with_depth: bool,
                 with_points: bool, debug: Optional[dict]) -> StepOutputs:
        grid_hw = self.config.patch_grid(image_hw)
        video_rope = self.aggregator.video_rope(txn.first_frame, images.shape[0], grid_hw)
        backend.plan(txn.frame_txn.layout)  # once per step, for every global layer
        out = self.forward_planned(images, txn.first_frame, num_scale_frames, video_rope,
                                   txn.frame_txn, txn.camera_txn, backend, with_depth,
                                   with_points, debug)
        return StepOutputs(time_index=txn.first_frame, **out)

    def forward_planned(self, images: Tensor, first_frame: int, num_scale_frames: int,
                        video_rope: "VideoRope", kv_writer: "KVWriter",
                        camera_txn: "CameraCacheTxn", backend: "AttentionBackend",
                        with_depth: bool = True, with_points: bool = True,
                        debug: Optional[dict] = None) -> dict[str, Tensor]:
        """The step's math once the attention backend is planned.

        Nothing here reads the cache state on the host: the rotation comes in ``video_rope``,
        K/V go to ``kv_writer``, the camera cache is reached through ``camera_txn``, and
        ``first_frame`` only picks the special-token variants (identical for every streaming
        frame). That is what lets ``GraphedStep`` capture it once in a CUDA graph.

        Returns:
            ``StepOutputs`` fields except ``time_index``.
        """
        image_hw = (images.shape[2], images.shape[3])
        device_type = images.device.type
        # No autocast: the aggregator runs in its weights' dtype with explicit float32 islands
        # (see ``prepare``), which saves the ~1,000 casts per frame autocast would launch.
        with torch.autocast(device_type, enabled=False):
            layers = self.aggregator(images.float(), first_frame, num_scale_frames, video_rope,
                                     kv_writer, backend, debug)
            # heads in float32
            layers = [t.float() for t in layers]  # each (n, T, 2C)
            with record_function("lingbot/camera_head"):
                pose_list = self.camera_head(layers[-1][:, 0], camera_txn)
            pose_enc = pose_list[-1]  # (n, 9)
            out = dict(pose_enc=pose_enc, pose_enc_list=torch.stack(pose_list),
                       c2w=pose_to_c2w(pose_enc), intrinsics=pose_to_intrinsics(pose_enc, image_hw))
            patch_start = self.config.aggregator.num_special_tokens
            if with_depth and self.depth_head is not None:
                with record_function("lingbot/depth_head"):
                    out["depth"], out["depth_conf"] = activate_depth(
                        self.depth_head(layers, patch_start, image_hw))
            if with_points and self.point_head is not None:
                out["world_points"], out["world_points_conf"] = activate_points(
                    self.point_head(layers, patch_start, image_hw))
        return out

    def check_step(self, images: Tensor, kv_cache: "PagedKVCache",
                   camera_cache: "CameraKVCache", num_scale_frames: int) -> int:
        """Raise ValueError unless ``images`` can be the next step on these caches; returns
        the number of frames. Mutates nothing."""
        if images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(f"images must be (n, 3, H, W), got {tuple(images.shape)}")
        self.config.patch_grid((images.shape[2], images.shape[3]))
        if not isinstance(num_scale_frames, int) or num_scale_frames < 1:
            raise ValueError("num_scale_frames must be a positive integer, got "
                             f"{num_scale_frames!r}")
        n = images.shape[0]
        committed = kv_cache.frames_committed
        if committed != camera_cache.num_frames:
            raise ValueError(f"the KV cache holds {committed} committed frames and the camera "
                             f"cache {camera_cache.num_frames}: reset both together")
        if n > 1 and committed > 0:
            raise ValueError(f"a step of {n} frames is only allowed on empty caches (phase 1); "
                             f"{committed} frames are committed")
        if n > num_scale_frames:
            raise ValueError(f"a step of {n} frames exceeds num_scale_frames={num_scale_frames}")
        return n
