"""A checkpoint saved with pickled objects beside the weights (as upstream saves
lingbot-map.pt) in the node: refused by default with what to do (status 1 under autostart),
loaded with ``model.trust_pickle: true``."""
from __future__ import annotations

import argparse
import time

from tests.ros.node_harness import NodeProcess, Probe, good_images
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture


def _wait_quietly(predicate, timeout: float) -> bool:
    """Poll ``predicate`` for up to ``timeout`` s; its last value (no failure on time-out)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def pickled_tiny_checkpoint(path) -> None:
    import torch

    from lingbot_ros.model import GCTConfig, GCTModel
    torch.manual_seed(0)
    state = GCTModel(GCTConfig.tiny()).state_dict()
    torch.save({"model": state, "args": argparse.Namespace(lr=1e-4), "epoch": 3}, path)


def test_a_pickled_checkpoint_needs_model_trust_pickle(tmp_path, ros_env):
    ckpt = tmp_path / "lingbot-map.pt"
    pickled_tiny_checkpoint(ckpt)
    with NodeProcess(ros_env, tmp_path, {"checkpoint": str(ckpt)}, name="refused") as node:
        rc = node.wait(90)
        log = node.log()
    assert rc == 1, log[-3000:]
    assert "model.trust_pickle" in log and "configure failed" in log, log[-3000:]

    params = {"checkpoint": str(ckpt), "model.trust_pickle": True, "qos.image": "reliable"}
    with NodeProcess(ros_env, tmp_path, params, name="trusted") as node, Probe() as probe:
        probe.wait_active(node, timeout=90)
        probe.wait_for_image_subscriber()
        # Images until 3 poses (at most 40): one sent before the node's subscription has
        # matched the publisher is lost (volatile), so a fixed count could wait forever.
        for msg in good_images(40):
            probe.publish_image(msg)
            if _wait_quietly(lambda: len(probe.poses) >= 3, 3):
                break
        probe.wait_until(lambda: len(probe.poses) >= 3, 60, "3 poses")
        node.interrupt()
        assert node.wait(30) == 0
        log = node.log()
    assert "may be unpickled in full" in log and "lingbot-ros-convert-checkpoint" in log, log
