"""GCTModel: LingBot-Map's streaming Geometric Context Transformer: weights and math only.

The model holds no per-stream state: the caches, their layout, the attention backend and
the kernel choice are arguments of every call, so one model serves any number of streams.
A stream's state and its step transactions live in ``session.StreamRunner``:

    runner = StreamRunner(model, SessionConfig(...), image_hw=(378, 504))
    txn = runner.begin(8, StepKind.KEYFRAME)     # phase 1: the anchor frames, together
    outputs = runner.run(frames[:8], txn); txn.commit()
    txn = runner.begin(1, StepKind.SPECULATIVE)  # then one frame per step
    outputs = runner.run(frames[8:9], txn)
    txn.commit() if keyframe else txn.rollback()

What the runner calls, once the attention backend is planned for the step:

    outputs = model(images, StepContext(first_frame, num_scale_frames, video_rope, kv_writer,
                                        camera_txn, backend, fused, with_depth=True))
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.profiler import record_function

from ..config import HEAD_PRECISIONS, MLP_PRECISIONS, PRECISIONS, check_positive_int
from . import qk_fused
from .aggregator import Aggregator, AggregatorOutputs
from .camera_head import CameraHead
from .config import GCTConfig
from .dpt_head import DPTHead, activate_depth, activate_points
from .fp8_mlp import Fp8Mlp
from .layers import Attention
from .pose import pose_to_c2w, pose_to_intrinsics
from .step import Slices, StepContext



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

    def prepare(self, device: str | torch.device, precision: str = "auto",
                camera_head_precision: str = "fp32", depth_head_precision: str = "fp32",
                mlp_precision: str = "aggregator") -> "GCTModel":
        """Move to ``device``; eval mode; set the aggregator's and the heads' precisions.

        Args:
            precision: ``fp32``; ``bf16`` (aggregator weights and activations in bfloat16,
                heads in fp32: the reference demo's bf16-autocast setup, with the same
                float32 islands made explicit: LayerNorm statistics, q/k norms and RoPE);
                ``auto`` = bf16 on CUDA, fp32 elsewhere. With bf16 the KV cache must be
                ``bfloat16``.
            camera_head_precision: ``fp32`` (the reference), ``bf16`` (weights, activations
                and its cache in bfloat16, the pose summed in float32; docs/performance.md
                gives its pose difference, 1.1e-2, and its speed, 1.2 ms per frame).
            depth_head_precision: ``fp32`` (the reference), ``bf16`` (the DPT depth head's
                weights and activations in bfloat16, its raw output activated in float32).
            mlp_precision: ``aggregator`` (the MLPs of the frame and global blocks in the
                aggregator's precision), ``fp8`` (their GEMMs in float8 e4m3 with per-row
                and per-channel scales: ``Fp8Mlp``). Both non-defaults are for speed and
                miss the reference's bounds by the figures in docs/performance.md.
        """
        device = torch.device(device)
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        if camera_head_precision not in HEAD_PRECISIONS:
            raise ValueError(f"camera_head_precision must be one of {HEAD_PRECISIONS}, "
                             f"got {camera_head_precision!r}")
        for name, value, allowed in (("depth_head_precision", depth_head_precision,
                                      HEAD_PRECISIONS),
                                     ("mlp_precision", mlp_precision, MLP_PRECISIONS)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        if precision == "auto":
            precision = "bf16" if device.type == "cuda" else "fp32"
        self.to(device=device, dtype=torch.float32).eval().requires_grad_(False)
        if device.type == "cuda":
            # The dense heads' tokens arrive channels-last ((n, h*w, C) viewed as NCHW); with
            # NCHW weights cuDNN converted layouts around every conv (~0.5 ms per frame).
            for head in (self.depth_head, self.point_head):
                if head is not None:
                    head.to(memory_format=torch.channels_last)
        if camera_head_precision == "bf16":
            self.camera_head.to(torch.bfloat16)
        if depth_head_precision == "bf16" and self.depth_head is not None:
            self.depth_head.to(torch.bfloat16)
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
        if mlp_precision == "fp8":
            for block in (*self.aggregator.frame_blocks, *self.aggregator.global_blocks):
                if not isinstance(block.mlp, Fp8Mlp):
                    block.mlp = Fp8Mlp.from_mlp(block.mlp)
        return self

    @property
    def precisions(self) -> dict[str, str]:
        """What ``prepare`` set: the aggregator, camera head, depth head and MLP dtypes."""
        mlp = ("fp8" if any(isinstance(b.mlp, Fp8Mlp) for b in self.aggregator.global_blocks)
               else "aggregator")
        depth = (str(next(self.depth_head.parameters()).dtype).replace("torch.", "")
                 if self.depth_head is not None else "none")
        return {"aggregator": str(self.aggregator.dtype).replace("torch.", ""),
                "camera_head": str(self.camera_head.dtype).replace("torch.", ""),
                "depth_head": depth, "mlp": mlp}

    def resolve_fused_kernels(self, mode: str = "auto") -> bool:
        """Whether a stream running this model may use the fused q/k-norm + RoPE kernel
        (``qk_fused``): ``auto`` (on CUDA in bf16 when Triton imports), ``on`` (the same, or
        RuntimeError), ``off``. A query: the answer is the caller's to pass as ``fused``."""
        return qk_fused.resolve(mode, self.aggregator.camera_token.device,
                                self.aggregator.dtype)

    @property
    def kv_dtype(self) -> torch.dtype:
        """The dtype the paged KV cache must store (the aggregator's weight dtype)."""
        return self.aggregator.dtype

    @torch.no_grad()
    def forward(self, images: Tensor, step: StepContext) -> dict[str, Tensor]:
        """One step's math once the attention backend is planned for it.

        Phase 1 is the first ``num_scale_frames`` frames in one step on empty caches (they
        attend to each other both ways); after that every step is one frame.

        Args:
            images: (n, 3, H, W) RGB in [0, 1] (any float dtype), H and W multiples of the
                patch size, on the model's device (``check_images``).
            step: the step's time index, rotation, cache access, attention backend, fused
                kernels and which heads run (``StepContext``; nothing in it is read back on
                the host, so a CUDA graph can capture this call).
        Returns:
            The ``StepOutputs`` fields.
        """
        # No autocast: the aggregator runs in its weights' dtype with explicit float32 islands
        # (see ``prepare``), which saves the ~1,000 casts per frame autocast would launch.
        with torch.autocast(images.device.type, enabled=False):
            agg = self.aggregator(images.float(), step)  # aggregator dtype
            image_hw = (images.shape[2], images.shape[3])
            out, layers = self._pose_outputs(agg, step, image_hw)
            self._dense_outputs(out, layers, agg.layers, step, image_hw)
        return out

    def forward_slices(self, images: Tensor, step: StepContext) -> Slices[dict[str, Tensor]]:
        """``forward`` cut after each DINO, frame and global block and after the camera
        head (``Slices``): the session runs a rollover's anchor step a few slices per
        streaming frame. Resume it with autocast off and without grad, as ``forward`` runs."""
        agg = yield from self.aggregator.forward_slices(images.float(), step)
        image_hw = (images.shape[2], images.shape[3])
        out, layers = self._pose_outputs(agg, step, image_hw)
        yield
        self._dense_outputs(out, layers, agg.layers, step, image_hw)
        return out

    def _pose_outputs(self, agg: AggregatorOutputs, step: StepContext,
                      image_hw: tuple[int, int]) -> tuple[dict[str, Tensor], list[Tensor]]:
        """The camera head's outputs with the DINO patch tokens (as they are: a reference,
        no kernel), and the selected layers in float32 for the heads."""
        # heads in float32 (a bf16 depth head takes the aggregator's tokens as they are)
        layers = [t.float() for t in agg.layers]  # each (n, T, 2C)
        with record_function("lingbot/camera_head"):
            pose_list = self.camera_head(layers[-1][:, 0], step.camera)
        pose_enc = pose_list[-1]  # (n, 9)
        return dict(pose_enc=pose_enc, pose_enc_list=torch.stack(pose_list),
                    c2w=pose_to_c2w(pose_enc),
                    intrinsics=pose_to_intrinsics(pose_enc, image_hw),
                    patch_tokens=agg.patch_tokens), layers

    def _dense_outputs(self, out: dict, layers: list[Tensor], raw_layers: list[Tensor],
                       step: StepContext, image_hw: tuple[int, int]) -> None:
        """The depth and point heads' outputs into ``out`` (those the step asks for)."""
        patch_start = self.config.aggregator.num_special_tokens
        if step.with_depth and self.depth_head is not None:
            with record_function("lingbot/depth_head"):
                head_dtype = self.depth_head.norm.weight.dtype  # fp32, or bf16 if set
                head_in = layers if head_dtype == torch.float32 else [
                    t.to(head_dtype) for t in raw_layers]
                out["depth"], out["depth_conf"] = activate_depth(
                    self.depth_head(head_in, patch_start, image_hw).float())
        if step.with_points and self.point_head is not None:
            out["world_points"], out["world_points_conf"] = activate_points(
                self.point_head(layers, patch_start, image_hw))

    def check_images(self, images: Tensor, num_scale_frames: int) -> int:
        """Raise ValueError unless ``images`` is a valid step input; return its frame count."""
        if images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(f"images must be (n, 3, H, W), got {tuple(images.shape)}")
        self.config.patch_grid((images.shape[2], images.shape[3]))
        check_positive_int("num_scale_frames", num_scale_frames)
        n = images.shape[0]
        if n > num_scale_frames:
            raise ValueError(f"a step of {n} frames exceeds num_scale_frames={num_scale_frames}")
        return n
