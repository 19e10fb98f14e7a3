"""The official-size network has exactly the checkpoint names and shapes of the fact sheet §2.

Built on the meta device: no weights are allocated. The expected table below is written out
from docs/reference-architecture.md §2, independently of the model code.
"""
import torch

from lingbot_ros.model import GCTConfig, GCTModel

BLOCK = {  # one DINO / frame / global block of width 1024 (16 tensors with q/k norms)
    "norm1.weight": (1024,), "norm1.bias": (1024,),
    "attn.qkv.weight": (3072, 1024), "attn.qkv.bias": (3072,),
    "attn.proj.weight": (1024, 1024), "attn.proj.bias": (1024,),
    "ls1.gamma": (1024,), "norm2.weight": (1024,), "norm2.bias": (1024,),
    "mlp.fc1.weight": (4096, 1024), "mlp.fc1.bias": (4096,),
    "mlp.fc2.weight": (1024, 4096), "mlp.fc2.bias": (1024,), "ls2.gamma": (1024,),
}
QK_NORM = {"attn.q_norm.weight": (64,), "attn.q_norm.bias": (64,),
           "attn.k_norm.weight": (64,), "attn.k_norm.bias": (64,)}
CAMERA_BLOCK = {
    "norm1.weight": (2048,), "norm1.bias": (2048,), "norm2.weight": (2048,), "norm2.bias": (2048,),
    "attn.qkv.weight": (6144, 2048), "attn.qkv.bias": (6144,),
    "attn.proj.weight": (2048, 2048), "attn.proj.bias": (2048,),
    "ls1.gamma": (2048,), "ls2.gamma": (2048,),
    "mlp.fc1.weight": (8192, 2048), "mlp.fc1.bias": (8192,),
    "mlp.fc2.weight": (2048, 8192), "mlp.fc2.bias": (2048,),
}


def dpt(prefix: str, out_dim: int) -> dict:
    d = {"norm.weight": (2048,), "norm.bias": (2048,)}
    for i, c in enumerate((256, 512, 1024, 1024)):
        d[f"projects.{i}.weight"], d[f"projects.{i}.bias"] = (c, 2048, 1, 1), (c,)
        d[f"scratch.layer{i + 1}_rn.weight"] = (256, c, 3, 3)
    d |= {"resize_layers.0.weight": (256, 256, 4, 4), "resize_layers.0.bias": (256,),
          "resize_layers.1.weight": (512, 512, 2, 2), "resize_layers.1.bias": (512,),
          "resize_layers.3.weight": (1024, 1024, 3, 3), "resize_layers.3.bias": (1024,)}
    for r in (1, 2, 3, 4):
        units = ("resConfUnit2",) if r == 4 else ("resConfUnit1", "resConfUnit2")
        d[f"scratch.refinenet{r}.out_conv.weight"] = (256, 256, 1, 1)
        d[f"scratch.refinenet{r}.out_conv.bias"] = (256,)
        for u in units:
            for conv in ("conv1", "conv2"):
                d[f"scratch.refinenet{r}.{u}.{conv}.weight"] = (256, 256, 3, 3)
                d[f"scratch.refinenet{r}.{u}.{conv}.bias"] = (256,)
    d |= {"scratch.output_conv1.weight": (128, 256, 3, 3), "scratch.output_conv1.bias": (128,),
          "scratch.output_conv2.0.weight": (32, 128, 3, 3), "scratch.output_conv2.0.bias": (32,),
          "scratch.output_conv2.2.weight": (out_dim, 32, 1, 1),
          "scratch.output_conv2.2.bias": (out_dim,)}
    return {f"{prefix}.{k}": v for k, v in d.items()}


def fact_sheet_keys(point_head: bool) -> dict:
    keys = {
        "aggregator.camera_token": (1, 2, 1, 1024), "aggregator.register_token": (1, 2, 4, 1024),
        "aggregator.scale_token": (1, 2, 1, 1024),
        "aggregator.patch_embed.cls_token": (1, 1, 1024),
        "aggregator.patch_embed.pos_embed": (1, 1370, 1024),
        "aggregator.patch_embed.register_tokens": (1, 4, 1024),
        "aggregator.patch_embed.mask_token": (1, 1024),
        "aggregator.patch_embed.patch_embed.proj.weight": (1024, 3, 14, 14),
        "aggregator.patch_embed.patch_embed.proj.bias": (1024,),
        "aggregator.patch_embed.norm.weight": (1024,), "aggregator.patch_embed.norm.bias": (1024,),
    }
    for i in range(24):
        keys |= {f"aggregator.patch_embed.blocks.{i}.{k}": v for k, v in BLOCK.items()}
        for kind in ("frame_blocks", "global_blocks"):
            keys |= {f"aggregator.{kind}.{i}.{k}": v for k, v in (BLOCK | QK_NORM).items()}
    keys |= {
        "camera_head.empty_pose_tokens": (1, 1, 9),
        "camera_head.embed_pose.weight": (2048, 9), "camera_head.embed_pose.bias": (2048,),
        "camera_head.poseLN_modulation.1.weight": (6144, 2048),
        "camera_head.poseLN_modulation.1.bias": (6144,),
        "camera_head.token_norm.weight": (2048,), "camera_head.token_norm.bias": (2048,),
        "camera_head.trunk_norm.weight": (2048,), "camera_head.trunk_norm.bias": (2048,),
        "camera_head.pose_branch.fc1.weight": (1024, 2048),
        "camera_head.pose_branch.fc1.bias": (1024,),
        "camera_head.pose_branch.fc2.weight": (9, 1024), "camera_head.pose_branch.fc2.bias": (9,),
    }
    for j in range(4):
        keys |= {f"camera_head.trunk.{j}.{k}": v for k, v in CAMERA_BLOCK.items()}
    keys |= dpt("depth_head", 2)
    if point_head:
        keys |= dpt("point_head", 4)
    return keys


def _meta_state(point_head: bool) -> dict:
    with torch.device("meta"):
        model = GCTModel(GCTConfig.official(point_head=point_head))
    assert all(p.is_meta for p in model.parameters())
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}, model


def test_streaming_checkpoint_layout_matches_the_fact_sheet():
    state, _ = _meta_state(point_head=False)
    assert state == fact_sheet_keys(point_head=False)
    assert len(state) == 1404 - 62


def test_stage1_layout_with_point_head_matches_the_fact_sheet():
    state, model = _meta_state(point_head=True)
    assert state == fact_sheet_keys(point_head=True)
    assert len(state) == 1404
    assert sum(p.numel() for p in model.parameters()) == 1_190_598_168
