"""Shared test fixtures: the reference_tiny golden fixture, its model and frames."""
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lingbot_ros.model import GCTConfig, GCTModel, load_weights

# The golden fixtures live in the shared folder beside the checkout; LINGBOT_FIXTURES_DIR
# points elsewhere (e.g. a copy carried to a GPU machine).
FIXTURES = Path(os.environ.get(
    "LINGBOT_FIXTURES_DIR", Path(__file__).resolve().parents[1].parent / "shared" / "fixtures"))
FIXTURE = FIXTURES / "reference_tiny"
FIXTURE_KF2 = FIXTURES / "reference_tiny_kf2"  # keyframe interval 2: the deferred eviction
SCALE_FRAMES, WINDOW = 2, 3  # the fixture's streaming settings


@pytest.fixture(scope="session")
def tiny_config() -> GCTConfig:
    return GCTConfig.from_fixture_json(FIXTURE / "config.json")


@pytest.fixture(scope="session")
def tiny_model(tiny_config) -> GCTModel:
    return load_weights(GCTModel(tiny_config), FIXTURE / "model.safetensors").prepare("cpu", "fp32")


@pytest.fixture(scope="session")
def frames() -> torch.Tensor:
    return load_file(str(FIXTURE / "frames.safetensors"))["frames"]
