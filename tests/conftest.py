"""Shared test fixtures: the reference_tiny golden fixture, its model and frames."""
import logging
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


@pytest.fixture(autouse=True)
def standard_loggers():
    """launch_testing's pytest plugin (installed for tests/launch) imports ``launch``, which
    makes every logger created afterwards a ``LaunchLogger`` that does not propagate, and
    sets that class again each time a launch test resets its logging: ``caplog`` would then
    see nothing of our modules. Each test starts with the standard class, and our loggers
    propagate as usual."""
    if logging.getLoggerClass() is not logging.Logger:
        logging.setLoggerClass(logging.Logger)
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if name.startswith("lingbot_ros") and isinstance(logger, logging.Logger):
            logger.propagate = True
    yield


@pytest.fixture(scope="session")
def tiny_config() -> GCTConfig:
    return GCTConfig.from_fixture_json(FIXTURE / "config.json")


@pytest.fixture(scope="session")
def tiny_model(tiny_config) -> GCTModel:
    return load_weights(GCTModel(tiny_config), FIXTURE / "model.safetensors").prepare("cpu", "fp32")


@pytest.fixture(scope="session")
def frames() -> torch.Tensor:
    return load_file(str(FIXTURE / "frames.safetensors"))["frames"]
