"""DINOv2 patch embedding (ViT with register tokens), run on every frame.

Checkpoint names under ``aggregator.patch_embed.``: ``cls_token``, ``pos_embed``,
``register_tokens``, ``mask_token`` (unused at inference), ``patch_embed.proj``,
``blocks.{i}``, ``norm``. The output is the final-normed patch tokens.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import DinoConfig
from .fused_kernels import UNFUSED, FusedKernels
from .layers import Block
from .step import Slices, run_to_end


class PatchProjection(nn.Module):
    """Non-overlapping patch x patch convolution to tokens."""

    def __init__(self, patch_size: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, images: Tensor) -> Tensor:
        """(B, 3, H, W) -> (B, h*w, C), patches row-major."""
        return self.proj(images).flatten(2).transpose(1, 2)  # (B, C, h, w) -> (B, h*w, C)


class DinoEncoder(nn.Module):
    def __init__(self, config: DinoConfig, patch_size: int) -> None:
        super().__init__()
        c = config
        self.config = c
        self.patch_size = patch_size
        self.patch_embed = PatchProjection(patch_size, c.embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, c.embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + c.pos_embed_grid ** 2, c.embed_dim))
        self.register_tokens = (nn.Parameter(torch.zeros(1, c.num_register_tokens, c.embed_dim))
                                if c.num_register_tokens else None)
        self.mask_token = nn.Parameter(torch.zeros(1, c.embed_dim))  # training only; loaded
        self.blocks = nn.ModuleList(
            Block(c.embed_dim, c.num_heads, c.mlp_ratio, norm_eps=c.norm_eps,
                  layerscale_init=c.layerscale_init) for _ in range(c.depth))
        self.norm = nn.LayerNorm(c.embed_dim, eps=c.norm_eps)

    def position_embedding(self, grid_hw: tuple[int, int], dtype: torch.dtype) -> Tensor:
        """Learned positions resized to the patch grid.

        The square table (side ``pos_embed_grid``) is resized bicubically with antialiasing
        to (h, w) in float32; the cls position is kept. A square input whose grid equals the
        table uses it unchanged.

        Returns:
            (1, 1 + h*w, C) in ``dtype``.
        """
        h, w = grid_hw
        m = self.config.pos_embed_grid
        if h == w == m:
            return self.pos_embed
        table = self.pos_embed.float()
        cls_pos, patch_pos = table[:, :1], table[:, 1:]  # (1, 1, C), (1, m*m, C)
        dim = table.shape[-1]
        grid = patch_pos.reshape(1, m, m, dim).permute(0, 3, 1, 2)  # (1, C, m, m)
        grid = F.interpolate(grid, size=(h, w), mode="bicubic", antialias=True)  # (1, C, h, w)
        patch_pos = grid.permute(0, 2, 3, 1).reshape(1, h * w, dim)  # (1, h*w, C)
        return torch.cat((cls_pos, patch_pos), dim=1).to(dtype)

    def forward(self, images: Tensor, fused: FusedKernels = UNFUSED) -> Tensor:
        """Patch tokens of normalized images.

        Args:
            images: (B, 3, H, W), ImageNet-normalized, H and W multiples of the patch size.
            fused: the stream's fused kernels (``add_norm`` chains the blocks' norms).
        Returns:
            (B, h*w, C) final-normed patch tokens (cls and register outputs dropped).
        """
        return run_to_end(self.forward_slices(images, fused))

    def forward_slices(self, images: Tensor, fused: FusedKernels = UNFUSED) -> Slices[Tensor]:
        """``forward`` cut after each block (``Slices``)."""
        b, _, height, width = images.shape
        grid_hw = (height // self.patch_size, width // self.patch_size)
        x = self.patch_embed(images)  # (B, h*w, C)
        x = torch.cat((self.cls_token.expand(b, -1, -1), x), dim=1)  # (B, 1 + h*w, C)
        x = x + self.position_embedding(grid_hw, x.dtype)
        if self.register_tokens is not None:  # (B, 1 + R + h*w, C)
            x = torch.cat((x[:, :1], self.register_tokens.expand(b, -1, -1), x[:, 1:]), dim=1)
        if fused.add_norm:  # each block's last residual fused with the next norm
            h = None
            for j, block in enumerate(self.blocks):
                nxt = self.blocks[j + 1].norm1 if j + 1 < len(self.blocks) else self.norm
                x, h = block(x, None, fused, h, nxt)
                yield
            x = h  # the final norm came with the last block
        else:
            for block in self.blocks:
                x, _ = block(x)
                yield
            x = self.norm(x)
        return x[:, 1 + self.config.num_register_tokens:]  # (B, h*w, C)
