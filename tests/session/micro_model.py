"""A micro network with the full architecture, small enough for 10,000-frame CPU tests."""
import torch

from lingbot_ros.config import PreprocessConfig
from lingbot_ros.model import (AggregatorConfig, CameraHeadConfig, DinoConfig, DPTConfig,
                               GCTConfig, GCTModel)

MICRO = GCTConfig(
    dino=DinoConfig(embed_dim=32, depth=1, num_heads=2),
    aggregator=AggregatorConfig(embed_dim=32, depth=4, num_heads=2, video_rope_dims=(4, 6, 6),
                                selected_layers=(0, 1, 2, 3)),
    camera_head=CameraHeadConfig(trunk_depth=1, num_heads=2, num_iterations=2),
    depth_head=DPTConfig(features=8, out_channels=(8, 8, 8, 8), head_features_2=8))
SIZE_28 = PreprocessConfig(width=28, height=28)  # 2 x 2 patches
SIZE_42x56 = PreprocessConfig(width=56, height=42)  # 3 x 4 patches


def micro_model(seed: int = 0, config: GCTConfig = MICRO) -> GCTModel:
    torch.manual_seed(seed)
    model = GCTModel(config)
    agg = model.aggregator
    for token in (agg.camera_token, agg.register_token, agg.scale_token):
        torch.nn.init.normal_(token)  # distinct first/other variants, like trained weights
    return model.prepare("cpu", "fp32")
