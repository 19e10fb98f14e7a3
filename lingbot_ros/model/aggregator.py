"""The aggregator: DINO patch tokens + special tokens through alternating frame/global blocks.

One call is one streaming step of ``n`` frames (``n`` = the scale frames on an empty cache,
else 1). Frame blocks attend within each frame; global blocks attend, per layer, over what
the paged KV cache makes visible (anchor frames, the window, the specials of every committed
frame, and the step's own tokens), reading and writing it only through the step's
transaction and the attention backend that are passed in.

Token layout per frame: ``[camera, reg_0 .. reg_{R-1}, scale, patch_0 .. patch_{h*w-1}]``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor, nn
from torch.profiler import record_function

from .config import AggregatorConfig, DinoConfig
from .dino import DinoEncoder
from .layers import Block
from .rope import FrameRope, VideoRope
from .step import Slices, StepContext, run_to_end

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class GlobalBlock(Block):
    """A block whose attention runs over the paged KV cache of its layer."""

    def forward(self, x: Tensor, step: StepContext, layer: int, kv_dtype: torch.dtype,
                normed: Optional[Tensor] = None, next_norm: Optional[nn.LayerNorm] = None):
        """Args:
            x: (N, C) the step's tokens, frame order (N = frames x tokens per frame).
            step: the step's rotation (``rope``), K/V writer (the step's cache transaction
                or a CUDA-graph step's static write slots), attention backend (planned for
                this step) and fused kernels: with ``kv_write`` the q/k kernel writes K/V to
                the cache where the writer offers a ``destination``, and repeats q for the
                backend's split-KV requests.
            layer: global block index = cache layer.
            kv_dtype: cache storage dtype (q is cast to it as well).
            normed, next_norm: as in ``Block.forward`` (the chained norms).
        Returns:
            ``(x, next_norm(x))`` as ``Block.forward``: x (N, C).
        """
        n = x.shape[0]
        txn, backend, fused = step.kv_writer, step.backend, step.fused
        copies = backend.query_copies  # the backend also takes q repeated that many times
        dst = txn.destination(layer) if fused.kv_write else None
        # q: (N or copies * N, h, d); k, v: (N, h, d), or None once the kernel wrote them
        h = self.norm1(x) if normed is None else normed
        q, k, v = self.attn.project_qkv(h, step.rope, fused, copies, dst)
        if k is not None:  # not written by the fused kernel
            txn.write(layer, k.to(kv_dtype), v.to(kv_dtype))
        with record_function("lingbot/global_attention"):
            out = backend.run(layer, q.to(kv_dtype))  # (N, h, d)
        out = self.attn.proj(out.reshape(n, -1))  # (N, h, d) -> (N, C)
        return self.ffn_residual(x, out, fused, next_norm)


@dataclass(frozen=True)
class AggregatorOutputs:
    """What one aggregator step hands the heads and the stream."""

    layers: list[Tensor]  # the selected layers, each (n, T, 2C): frame- and global-block outputs
    patch_tokens: Tensor  # (n, h*w, C) the DINO patch tokens, before any frame/global block


class Aggregator(nn.Module):
    def __init__(self, config: AggregatorConfig, dino: DinoConfig, patch_size: int) -> None:
        super().__init__()
        c = config
        self.config = c
        self.patch_size = patch_size
        self.patch_embed = DinoEncoder(dino, patch_size)
        block_args = dict(qk_norm=c.qk_norm, norm_eps=c.norm_eps, layerscale_init=c.layerscale_init)
        self.frame_blocks = nn.ModuleList(
            Block(c.embed_dim, c.num_heads, c.mlp_ratio, **block_args) for _ in range(c.depth))
        self.global_blocks = nn.ModuleList(
            GlobalBlock(c.embed_dim, c.num_heads, c.mlp_ratio, **block_args)
            for _ in range(c.depth))
        # Index 0 of dim 1: the "first" variant; index 1: every other frame.
        self.camera_token = nn.Parameter(torch.zeros(1, 2, 1, c.embed_dim))
        self.register_token = nn.Parameter(torch.zeros(1, 2, c.num_register_tokens, c.embed_dim))
        self.scale_token = nn.Parameter(torch.zeros(1, 2, 1, c.embed_dim))
        self.register_buffer("image_mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1),
                             persistent=False)
        self.register_buffer("image_std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1),
                             persistent=False)

    @property
    def dtype(self) -> torch.dtype:
        return self.camera_token.dtype

    def special_tokens(self, first_frame: int, num_frames: int, num_scale_frames: int,
                       frame_indices: Optional[tuple[int, ...]] = None) -> Tensor:
        """Camera, register and scale tokens of frames ``first_frame ..``, or of the frames
        whose time indices are ``frame_indices`` (one per frame: a batched step's streams).

        Camera and register tokens use variant 0 only for frame 0; the scale token uses
        variant 0 for the first ``num_scale_frames`` frames (at least frame 0).

        Returns:
            (n, num_special, C).
        """
        if frame_indices is not None:  # the variants on the host: views, no upload
            if len(frame_indices) != num_frames:
                raise ValueError(f"frame_indices has {len(frame_indices)} entries for "
                                 f"{num_frames} frames")
            rows = []
            for f in frame_indices:
                other, scale = int(f != 0), int(f >= max(1, num_scale_frames))
                rows.append(torch.cat([self.camera_token[0, other], self.register_token[0, other],
                                       self.scale_token[0, scale]]))  # (S, C)
            return torch.stack(rows)  # (n, S, C)
        f = torch.arange(first_frame, first_frame + num_frames, device=self.camera_token.device)
        first = (f == 0).long()  # 1 -> variant 0
        scale = (f < max(1, num_scale_frames)).long()
        camera = self.camera_token[0, 1 - first]  # (n, 1, C)
        registers = self.register_token[0, 1 - first]  # (n, R, C)
        scale_tok = self.scale_token[0, 1 - scale]  # (n, 1, C)
        return torch.cat([camera, registers, scale_tok], dim=1)  # (n, S, C)

    def forward(self, images: Tensor, step: StepContext) -> AggregatorOutputs:
        """One streaming step; the backend is already planned for it.

        Args:
            images: (n, 3, H, W) RGB in [0, 1].
            step: the step's context (``StepContext``): ``first_frame`` (or
                ``frame_indices``) only picks the special-token variants here (the
                rotation comes in ``rope``); ``kv_writer``
                receives each global layer's K/V; ``backend`` attends over the cache
                storage; ``fused``: fused kernels where they apply.
        Returns:
            ``AggregatorOutputs``: the selected layers, each (n, T, 2C): concat of frame- and
            global-block outputs; and the DINO patch tokens (n, h*w, C), which depend on the
            frame's image only (no attention across frames has touched them yet).
        """
        return run_to_end(self.forward_slices(images, step, slice_dino=False))

    def forward_slices(self, images: Tensor, step: StepContext,
                       slice_dino: bool = True) -> Slices[AggregatorOutputs]:
        """``forward`` cut after each frame and global block, and after each DINO block
        with ``slice_dino`` (else DINO is one module call, which its hooks see)."""
        n, _, height, width = images.shape
        c = self.config
        fused = step.fused
        grid_hw = (height // self.patch_size, width // self.patch_size)
        with record_function("lingbot/dino"):  # (open across its slices' yields)
            normed = ((images - self.image_mean) / self.image_std).to(self.dtype)
            if slice_dino:
                patches = yield from self.patch_embed.forward_slices(normed, fused)
            else:
                patches = self.patch_embed(normed, fused)  # (n, h*w, C)
        specials = self.special_tokens(step.first_frame, n, step.num_scale_frames,
                                       step.frame_indices)  # (n, S, C)
        x = torch.cat([specials, patches], dim=1)  # (n, T, C)
        tokens = x.shape[1]

        frame_rope = FrameRope.for_grid(grid_hw, c.num_special_tokens, c.head_dim,
                                        c.frame_rope_base, x.device)
        selected = []
        # Chained norms (fused.add_norm): each block's last residual and the next block's
        # first LayerNorm run as one kernel; ``h`` carries that norm to the next block.
        chain = fused.add_norm
        h = None
        for i in range(c.depth):
            nxt = self.global_blocks[i].norm1 if chain else None
            with record_function("lingbot/frame_block"):
                x, h = self.frame_blocks[i](x, frame_rope, fused, h, nxt)  # (n, T, C)
            yield
            frame_out = x
            nxt = self.frame_blocks[i + 1].norm1 if chain and i + 1 < c.depth else None
            with record_function("lingbot/global_block"):  # attention included
                x, h = self.global_blocks[i](  # (n, T, C) -> (n*T, C)
                    x.reshape(n * tokens, -1), step, i, self.dtype,
                    h.reshape(n * tokens, -1) if h is not None else None, nxt)
            x = x.reshape(n, tokens, -1)  # (n*T, C) -> (n, T, C)
            h = h.reshape(n, tokens, -1) if h is not None else None
            if i in c.selected_layers:
                selected.append(torch.cat([frame_out, x], dim=-1))  # (n, T, 2C)
            yield
        return AggregatorOutputs(selected, patches)

    def video_rope(self, first_frame: int, num_frames: int, grid_hw: tuple[int, int],
                   frame_indices: Optional[tuple[int, ...]] = None) -> VideoRope:
        """3D rotation of a step of ``num_frames`` frames from time index ``first_frame``, or
        of frames at the time indices ``frame_indices`` (a batched step's streams)."""
        c = self.config
        device = self.camera_token.device
        if frame_indices is None:
            return VideoRope.for_frames(first_frame, num_frames, grid_hw, c.num_special_tokens,
                                        c.video_rope_dims, c.video_rope_theta, device)
        if len(frame_indices) != num_frames or min(frame_indices) < 0:
            raise ValueError(f"frame_indices must be {num_frames} time indices >= 0, got "
                             f"{tuple(frame_indices)}")
        t_pos = torch.tensor(frame_indices, dtype=torch.int64, device=device)  # (F,)
        return VideoRope.for_time_indices(t_pos, grid_hw, c.num_special_tokens,
                                          c.video_rope_dims, c.video_rope_theta)
