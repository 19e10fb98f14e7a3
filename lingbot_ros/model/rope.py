"""Rotary position embeddings: 2D in the frame blocks, 3D ("video") in the global blocks.

Both are computed on demand from integer positions; there is no fixed-length table.

2D (frame blocks), rotate-half convention: the head is split into a y half and an x half; in
each half, channel i pairs with i + d/4 and rotates by ``pos * base^(-4i/d)``. Special tokens
sit at (0, 0) (identity rotation), patch (y, x) at (y + 1, x + 1).

3D (global blocks), interleaved convention: channels (2i, 2i + 1) form a pair. The first
``dims[0]`` channels rotate by the time index f, the next ``dims[1]`` by y, the last
``dims[2]`` by x, each with frequencies ``theta^(-2i/dim)``. Special token i of frame f sits
at (f, i, i); patch (y, x) of frame f at (f, S + y, S + x) with S the number of specials.

Time index: f is the number of frames committed to the KV cache before the frame (since the
last reset), so non-keyframes that were rolled back do not advance it. The reference reads
angles from a table of ``max_frame_num`` = 1024 rows and crashes once f reaches it; here the
angles are ``f * freq`` computed in float64 for any f, so a stream never crashes on length.
Past the trained range (about 320 cached views) the model's accuracy degrades; bound the
stream with keyframes or resets, not with this code.
"""
from __future__ import annotations

import torch
from torch import Tensor


def rotate(x: Tensor, cos: Tensor, signed_sin: Tensor, partner: Tensor) -> Tensor:
    """Any RoPE pairing as ``x * cos + x[..., partner] * signed_sin``: three kernels.

    Channel c pairs with ``partner[c]``; ``signed_sin`` is -sin on the first channel of each
    pair and +sin on the second, so pair (a, b) becomes (a cos - b sin, b cos + a sin).
    """
    return torch.addcmul(x * cos, x.index_select(-1, partner), signed_sin)


class FrameRope:
    """2D rotation of (B, heads, N, head_dim) tensors for one frame's token layout."""

    def __init__(self, cos_y: Tensor, sin_y: Tensor, cos_x: Tensor, sin_x: Tensor) -> None:
        self.cos_y, self.sin_y, self.cos_x, self.sin_x = cos_y, sin_y, cos_x, sin_x  # (N, d/2)
        self._cast: dict[torch.dtype, tuple[Tensor, ...]] = {}  # per-step value, not module state

    @staticmethod
    def for_grid(grid_hw: tuple[int, int], num_special: int, head_dim: int, base: float,
                 device: torch.device | str, dtype: torch.dtype = torch.float32) -> "FrameRope":
        """Angles of ``[specials, patches row-major]`` for a patch grid.

        Args:
            grid_hw: (h, w) patches per frame.
            num_special: tokens before the patches (position (0, 0)).
            head_dim: channels per head, a multiple of 4.
            base: RoPE base (100 for LingBot-Map).
        """
        h, w = grid_hw
        half = head_dim // 2
        exponents = torch.arange(0, half, 2, device=device).float() / half
        inv_freq = 1.0 / (base ** exponents)  # (d/4,)
        ys = torch.arange(h, device=device).repeat_interleave(w) + 1  # (h*w,) row-major
        xs = torch.arange(w, device=device).repeat(h) + 1
        zeros = torch.zeros(num_special, dtype=ys.dtype, device=device)
        tables = []
        for pos in (torch.cat([zeros, ys]), torch.cat([zeros, xs])):  # (N,)
            angles = pos.to(inv_freq.dtype)[:, None] * inv_freq[None, :]  # (N, d/4)
            angles = torch.cat((angles, angles), dim=-1)  # (N, d/2)
            tables += [angles.cos().to(dtype), angles.sin().to(dtype)]
        return FrameRope(*tables)

    def __call__(self, x: Tensor) -> Tensor:
        """Rotate x: (B, heads, N, head_dim) -> same shape."""
        return rotate(x, *self._tables(x.dtype))

    def tables(self) -> tuple[Tensor, Tensor, Tensor]:
        """float32 ``(cos (N, d), signed_sin (N, d), partner (d,))`` for fused kernels."""
        return self._tables(torch.float32)

    def _tables(self, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
        if dtype not in self._cast:
            # Rotate-half inside each half: channel j pairs with j + d/4 (y half, then x half).
            quarter = self.cos_y.shape[-1] // 2
            cos = torch.cat([self.cos_y, self.cos_x], dim=-1)  # (N, d)
            signed_sin = torch.cat([-self.sin_y[:, :quarter], self.sin_y[:, quarter:],
                                    -self.sin_x[:, :quarter], self.sin_x[:, quarter:]], dim=-1)
            j = torch.arange(quarter, device=cos.device)
            partner = torch.cat([j + quarter, j, j + 3 * quarter, j + 2 * quarter])  # (d,)
            self._cast[dtype] = (cos.to(dtype), signed_sin.to(dtype), partner)
        return self._cast[dtype]


class VideoRope:
    """3D rotation of (N, heads, head_dim) token lists, N = frames x tokens per frame."""

    def __init__(self, cos: Tensor, sin: Tensor) -> None:
        self.cos, self.sin = cos, sin  # (N, 1, d/2) float64
        self._cast: dict[torch.dtype, tuple[Tensor, Tensor]] = {}  # one cast per dtype and step

    @staticmethod
    def frequencies(dims: tuple[int, int, int], theta: float,
                    device: torch.device | str) -> tuple[Tensor, Tensor, Tensor]:
        """float64 inverse frequencies of the (time, y, x) channel groups."""
        return tuple(1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64, device=device)
                                      [: d // 2] / d)) for d in dims)

    @staticmethod
    def for_frames(first_frame: int, num_frames: int, grid_hw: tuple[int, int],
                   num_special: int, dims: tuple[int, int, int], theta: float,
                   device: torch.device | str) -> "VideoRope":
        """Angles of frames ``first_frame .. first_frame + num_frames - 1``.

        Args:
            first_frame: time index f of the first frame (committed frames before the step).
            num_frames: frames in the step.
            grid_hw: (h, w) patches per frame.
            num_special: special tokens per frame (6).
            dims: channels per head given to (time, y, x); they sum to head_dim.
            theta: RoPE base (10000).
        """
        if first_frame < 0:
            raise ValueError(f"first_frame must be >= 0, got {first_frame}")
        t_pos = torch.arange(first_frame, first_frame + num_frames, device=device)  # (F,)
        return VideoRope.for_time_indices(t_pos, grid_hw, num_special, dims, theta)

    @staticmethod
    def for_time_indices(t_pos: Tensor, grid_hw: tuple[int, int], num_special: int,
                         dims: tuple[int, int, int], theta: float) -> "VideoRope":
        """Angles of frames whose time indices are the (F,) integer tensor ``t_pos``.

        The time index is read on the device (no host value), so a CUDA graph that captured
        this call stays correct when the buffer behind ``t_pos`` is refilled.
        """
        device = t_pos.device
        num_frames = t_pos.numel()
        h, w = grid_hw
        f_freq, y_freq, x_freq = VideoRope.frequencies(dims, theta, device)
        special = torch.arange(num_special, device=device)
        rows = torch.arange(h, device=device).repeat_interleave(w)  # (h*w,) row-major
        cols = torch.arange(w, device=device).repeat(h)
        y_pos = torch.cat([special, num_special + rows])  # (T,)
        x_pos = torch.cat([special, num_special + cols])
        tokens = y_pos.numel()
        t_ang = torch.outer(t_pos.to(torch.float64), f_freq)  # (F, dt/2)
        t_ang = t_ang[:, None, :].expand(num_frames, tokens, -1)  # (F, T, dt/2)
        yx_ang = torch.cat([torch.outer(y_pos.to(torch.float64), y_freq),
                            torch.outer(x_pos.to(torch.float64), x_freq)], dim=-1)  # (T, (dy+dx)/2)
        yx_ang = yx_ang[None].expand(num_frames, -1, -1)  # (F, T, (dy+dx)/2)
        angles = torch.cat([t_ang, yx_ang], dim=-1)  # (F, T, d/2)
        angles = angles.reshape(num_frames * tokens, 1, -1)  # (N, 1, d/2)
        return VideoRope(angles.cos(), angles.sin())

    def __call__(self, x: Tensor) -> Tensor:
        """Rotate x: (N, heads, head_dim) -> same shape and dtype."""
        return rotate(x, *self._tables(x.dtype))

    def tables(self) -> tuple[Tensor, Tensor, Tensor]:
        """float32 ``(cos (N, d), signed_sin (N, d), partner (d,))`` for fused kernels."""
        cos, signed_sin, partner = self._tables(torch.float32)
        return cos[:, 0], signed_sin[:, 0], partner  # (N, 1, d) -> (N, d), contiguous

    def _tables(self, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
        if dtype not in self._cast:
            # Interleaved pairs: channel 2i pairs with 2i + 1.
            cos = self.cos.repeat_interleave(2, dim=-1)  # (N, 1, d)
            signed_sin = torch.stack([-self.sin, self.sin], dim=-1).flatten(-2)  # (N, 1, d)
            d = cos.shape[-1]
            partner = torch.arange(d, device=cos.device).view(-1, 2).flip(-1).flatten()  # (d,)
            self._cast[dtype] = (cos.to(dtype), signed_sin.to(dtype), partner)
        return self._cast[dtype]
