"""DPT dense head (depth: exp + 1+exp confidence; points: sign*expm1(|x|) + 1+exp confidence).

Reads the patch tokens of the 4 selected layers, reassembles them at 4 scales (x4, x2, x1,
x1/2), fuses them coarse-to-fine with RefineNet blocks (bilinear, align_corners=True),
upsamples to the input size and predicts ``output_dim`` channels, the last one confidence.
A sinusoidal UV embedding (x0.1) is added after each projection and after the upsampling.
Checkpoint names: ``norm``, ``projects.{0..3}``, ``resize_layers.{0,1,3}``,
``scratch.layer{1..4}_rn``, ``scratch.refinenet{1..4}``, ``scratch.output_conv1``,
``scratch.output_conv2.{0,2}``.
"""
from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import DPTConfig


def _conv3x3(c_in: int, c_out: int, bias: bool = True) -> nn.Conv2d:
    return nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, bias=bias)


class ResidualConvUnit(nn.Module):
    """relu -> conv1 -> relu -> conv2, plus a skip.

    NOTE: the reference applies its first ReLU in place, so its skip adds relu(x), not x;
    the released weights were trained that way and this unit keeps it.
    """

    def __init__(self, features: int) -> None:
        super().__init__()
        self.conv1 = _conv3x3(features, features)
        self.conv2 = _conv3x3(features, features)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(x)
        return self.conv2(F.relu(self.conv1(x))) + x


class FusionBlock(nn.Module):
    """(coarse [+ residual(skip)]) -> residual unit -> bilinear resize -> 1x1 conv."""

    def __init__(self, features: int, has_skip: bool = True) -> None:
        super().__init__()
        self.out_conv = nn.Conv2d(features, features, kernel_size=1)
        self.resConfUnit1 = ResidualConvUnit(features) if has_skip else None
        self.resConfUnit2 = ResidualConvUnit(features)

    def forward(self, x: Tensor, skip: Tensor | None = None,
                size: tuple[int, int] | None = None) -> Tensor:
        if self.resConfUnit1 is not None:
            x = x + self.resConfUnit1(skip)
        x = self.resConfUnit2(x)
        size = size or (x.shape[-2] * 2, x.shape[-1] * 2)
        x = F.interpolate(x, size=size, mode="bilinear", align_corners=True)
        return self.out_conv(x)


class Scratch(nn.Module):
    """Container that reproduces the checkpoint's ``scratch.*`` names."""

    def __init__(self, out_channels: tuple[int, ...], features: int, head_features_2: int,
                 output_dim: int) -> None:
        super().__init__()
        for i, c in enumerate(out_channels, start=1):
            setattr(self, f"layer{i}_rn", _conv3x3(c, features, bias=False))
        self.refinenet1 = FusionBlock(features)
        self.refinenet2 = FusionBlock(features)
        self.refinenet3 = FusionBlock(features)
        self.refinenet4 = FusionBlock(features, has_skip=False)
        self.output_conv1 = _conv3x3(features, features // 2)
        self.output_conv2 = nn.Sequential(_conv3x3(features // 2, head_features_2), nn.ReLU(),
                                          nn.Conv2d(head_features_2, output_dim, kernel_size=1))


@lru_cache(maxsize=32)
def uv_embedding(grid_hw: tuple[int, int], channels: int, aspect: float, dtype: torch.dtype,
                 device: torch.device) -> Tensor:
    """Sinusoidal embedding (omega_0 = 100) of a UV grid normalized by the image diagonal.

    A constant of the input size, so it is computed once per (size, channels, dtype, device)
    and shared: recomputing the full-resolution one in float64 cost every frame ~0.3 ms.
    Callers must not modify it.

    Returns:
        (channels, h, w): first half from u (x), second half from v (y); sin then cos each.
    """
    h, w = grid_hw
    diag = (aspect ** 2 + 1.0) ** 0.5
    span_x, span_y = aspect / diag, 1.0 / diag
    grid = dtype if dtype in (torch.float32, torch.float64) else torch.float32  # bf16: f32 grid
    xs = torch.linspace(-span_x * (w - 1) / w, span_x * (w - 1) / w, w, dtype=grid, device=device)
    ys = torch.linspace(-span_y * (h - 1) / h, span_y * (h - 1) / h, h, dtype=grid, device=device)
    u, v = torch.meshgrid(xs, ys, indexing="xy")  # (h, w) each
    quarter = channels // 4
    omega = torch.arange(quarter, dtype=torch.float64, device=device) / (channels / 4.0)
    omega = 1.0 / 100 ** omega  # (c/4,)
    parts = []
    for coord in (u, v):
        angles = torch.einsum("m,d->md", coord.reshape(-1), omega)  # (h*w, c/4) float64
        parts.append(torch.cat([angles.sin(), angles.cos()], dim=1).float())  # (h*w, c/2)
    emb = torch.cat(parts, dim=-1).view(h, w, channels)  # (h, w, c)
    return emb.permute(2, 0, 1).to(dtype)  # (c, h, w); a bf16 head adds it in bf16


class DPTHead(nn.Module):
    def __init__(self, config: DPTConfig, dim_in: int, patch_size: int, output_dim: int) -> None:
        super().__init__()
        oc = config.out_channels
        self.config = config
        self.patch_size = patch_size
        self.output_dim = output_dim
        self.norm = nn.LayerNorm(dim_in)
        self.projects = nn.ModuleList(nn.Conv2d(dim_in, c, kernel_size=1) for c in oc)
        self.resize_layers = nn.ModuleList([
            nn.ConvTranspose2d(oc[0], oc[0], kernel_size=4, stride=4),
            nn.ConvTranspose2d(oc[1], oc[1], kernel_size=2, stride=2),
            nn.Identity(),
            nn.Conv2d(oc[3], oc[3], kernel_size=3, stride=2, padding=1)])
        self.scratch = Scratch(oc, config.features, config.head_features_2, output_dim)

    def forward(self, layers: list[Tensor], patch_start: int,
                image_hw: tuple[int, int]) -> Tensor:
        """Raw head output (before activation), in chunks of ``frames_chunk_size`` frames.

        Args:
            layers: the 4 selected layers, each (n, T, 2C) float32.
            patch_start: index of the first patch token.
            image_hw: (H, W) input size.
        Returns:
            (n, output_dim, h*patch, w*patch).
        """
        n, chunk = layers[0].shape[0], self.config.frames_chunk_size
        chunks = [self._forward_chunk([t[s:s + chunk] for t in layers], patch_start, image_hw)
                  for s in range(0, n, chunk)]
        return torch.cat(chunks, dim=0)

    def _forward_chunk(self, layers: list[Tensor], patch_start: int,
                       image_hw: tuple[int, int]) -> Tensor:
        height, width = image_hw
        h, w = height // self.patch_size, width // self.patch_size
        aspect = width / height
        feats = []
        for i, tokens in enumerate(layers):
            x = self.norm(tokens[:, patch_start:])  # (n, h*w, 2C)
            x = x.permute(0, 2, 1).reshape(x.shape[0], x.shape[-1], h, w)  # (n, 2C, h, w)
            x = self.projects[i](x)
            x = x + 0.1 * uv_embedding((h, w), x.shape[1], aspect, x.dtype, x.device)[None]
            feats.append(self.resize_layers[i](x))
        s = self.scratch
        l1, l2, l3, l4 = (getattr(s, f"layer{i}_rn")(f) for i, f in enumerate(feats, start=1))
        out = s.refinenet4(l4, size=l3.shape[2:])
        out = s.refinenet3(out, l3, size=l2.shape[2:])
        out = s.refinenet2(out, l2, size=l1.shape[2:])
        out = s.refinenet1(out, l1)
        out = s.output_conv1(out)
        out = F.interpolate(out, size=(h * self.patch_size, w * self.patch_size), mode="bilinear",
                            align_corners=True)
        out = out + 0.1 * uv_embedding(out.shape[2:], out.shape[1], aspect, out.dtype,
                                       out.device)[None]
        return s.output_conv2(out)


def activate_depth(raw: Tensor) -> tuple[Tensor, Tensor]:
    """(n, 2, H, W) -> depth (n, H, W, 1) = exp, confidence (n, H, W) = 1 + exp."""
    fmap = raw.permute(0, 2, 3, 1)  # (n, H, W, 2)
    return torch.exp(fmap[..., :-1]), 1 + fmap[..., -1].exp()


def activate_points(raw: Tensor) -> tuple[Tensor, Tensor]:
    """(n, 4, H, W) -> points (n, H, W, 3) = sign * expm1(|x|), confidence (n, H, W) = 1 + exp."""
    fmap = raw.permute(0, 2, 3, 1)  # (n, H, W, 4)
    xyz = fmap[..., :-1]
    return torch.sign(xyz) * torch.expm1(xyz.abs()), 1 + fmap[..., -1].exp()
