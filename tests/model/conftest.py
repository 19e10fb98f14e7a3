"""Shared helpers for the model tests: the reference_tiny fixture and fresh stream caches."""
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lingbot_ros.attention import make_backend
from lingbot_ros.cache import PagedKVCache
from lingbot_ros.cache.camera_cache import CameraKVCache
from lingbot_ros.model import GCTConfig, GCTModel, load_weights

# The golden fixture lives in the shared folder beside the checkout; LINGBOT_FIXTURE_DIR
# points elsewhere (e.g. a copy carried to a GPU machine).
FIXTURE = Path(os.environ.get(
    "LINGBOT_FIXTURE_DIR",
    Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "reference_tiny"))
SCALE_FRAMES, WINDOW = 2, 3  # the fixture's streaming settings


class Stream:
    """The per-stream state a session would own: both caches and the backend."""

    def __init__(self, config: GCTConfig, image_hw, scale_frames=SCALE_FRAMES, window=WINDOW,
                 **cache_kwargs):
        self.cache = PagedKVCache(config.cache_config(image_hw, scale_frames, window,
                                                      **cache_kwargs))
        self.camera = CameraKVCache(**config.camera_cache_dims(), chunk_frames=4)
        self.backend = make_backend("torch_ref", self.cache.storage)


@pytest.fixture(scope="session")
def tiny_config() -> GCTConfig:
    return GCTConfig.from_fixture_json(FIXTURE / "config.json")


@pytest.fixture(scope="session")
def tiny_model(tiny_config) -> GCTModel:
    return load_weights(GCTModel(tiny_config), FIXTURE / "model.safetensors").prepare("cpu", "fp32")


@pytest.fixture(scope="session")
def frames() -> torch.Tensor:
    return load_file(str(FIXTURE / "frames.safetensors"))["frames"]
