"""Camera head: iterative pose refinement of the camera token with its own KV cache.

Input: the camera token (index 0) of the last selected layer. The head runs in float32 as in
the reference, or in bfloat16 (``GCTModel.prepare(camera_head_precision="bf16")``: its
weights are read once per block per iteration for a single token, so it is bound by their
bytes). Each iteration
embeds the previous (raw) estimate (a learned empty pose first), modulates the normed token
AdaLN-style (shift, scale, gate), runs the trunk blocks, whose attention spans every cached
frame of that iteration plus the step's own frames, and adds a delta predicted by
``pose_branch``. Activations: translation and quaternion linear, FoV relu.

The cache is reached only through the step's camera-cache transaction (``write``/``visible``),
so a rolled-back step leaves no trace.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import CameraHeadConfig
from .layers import Block, Mlp, attend

if TYPE_CHECKING:  # pragma: no cover
    from ..cache.camera_cache import CameraCacheTxn

POSE_DIM = 9  # [tx, ty, tz, qx, qy, qz, qw, fov_h, fov_w]


class CameraBlock(Block):
    """Trunk block whose attention runs over the camera cache of (iteration, layer)."""

    def forward_cached(self, x: Tensor, txn: "CameraCacheTxn", iteration: int,
                       layer: int) -> Tensor:
        """Args: x (n, C) the step's camera tokens. Returns (n, C)."""
        q, k, v = self.attn.project_qkv(self.norm1(x))  # (n, h, d) each
        txn.write(iteration, layer, k, v)
        k_all, v_all = txn.visible(iteration, layer)  # (m, h, d), m = cached + n
        out = attend(q, k_all, v_all, txn.visible_mask)  # (n, h*d)
        x, _ = self.ffn_residual(x, self.attn.proj(out))  # (n, C)
        return x


def activate_pose(raw: Tensor) -> Tensor:
    """Translation and quaternion linear, FoV relu. (..., 9) -> (..., 9)."""
    return torch.cat([raw[..., :7], F.relu(raw[..., 7:])], dim=-1)


class CameraHead(nn.Module):
    def __init__(self, config: CameraHeadConfig, dim_in: int) -> None:
        super().__init__()
        c = config
        self.config = c
        self.trunk = nn.ModuleList(
            CameraBlock(dim_in, c.num_heads, c.mlp_ratio, norm_eps=1e-5,
                        layerscale_init=c.layerscale_init) for _ in range(c.trunk_depth))
        self.token_norm = nn.LayerNorm(dim_in)
        self.trunk_norm = nn.LayerNorm(dim_in)
        self.empty_pose_tokens = nn.Parameter(torch.zeros(1, 1, POSE_DIM))
        self.embed_pose = nn.Linear(POSE_DIM, dim_in)
        self.poseLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim_in, 3 * dim_in))
        self.adaln_norm = nn.LayerNorm(dim_in, elementwise_affine=False, eps=1e-6)
        self.pose_branch = Mlp(dim_in, dim_in // 2, POSE_DIM)

    @property
    def dtype(self) -> torch.dtype:
        """The head's weight and activation dtype: float32 (the reference), or bfloat16 with
        ``GCTModel.prepare(camera_head_precision="bf16")``; its cache stores the same."""
        return self.embed_pose.weight.dtype

    def forward(self, camera_tokens: Tensor, txn: "CameraCacheTxn") -> list[Tensor]:
        """Refine the poses of the step's frames.

        Args:
            camera_tokens: (n, 2C) camera tokens of the last selected layer (cast to the
                head's dtype; LayerNorm statistics and softmax run in float32 either way).
            txn: the step's camera-cache transaction (n frames).
        Returns:
            ``num_iterations`` activated pose encodings, each (n, 9) float32; the last is the
            output.
        """
        dtype = self.dtype
        tokens = self.token_norm(camera_tokens.to(dtype))  # (n, 2C)
        n = tokens.shape[0]
        raw = None  # float32 whatever the head's dtype: the deltas add up over iterations
        outputs = []
        for it in range(self.config.num_iterations):
            pose_in = self.empty_pose_tokens[0].expand(n, -1) if raw is None else raw  # (n, 9)
            shift, scale, gate = self.poseLN_modulation(
                self.embed_pose(pose_in.to(dtype))).chunk(3, dim=-1)  # (n, 2C) each
            x = gate * (self.adaln_norm(tokens) * (1 + scale) + shift) + tokens  # (n, 2C)
            for layer, block in enumerate(self.trunk):
                x = block.forward_cached(x, txn, it, layer)
            delta = self.pose_branch(self.trunk_norm(x)).float()  # (n, 9)
            raw = delta if raw is None else raw + delta
            outputs.append(activate_pose(raw))
        return outputs
