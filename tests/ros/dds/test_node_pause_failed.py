"""~/status states over DDS: PAUSED (~/pause, std_srvs/SetBool: images dropped and counted,
the stream kept) and FAILED (a non-finite model output: the step rolled back, the node goes
on, /diagnostics ERROR)."""
from __future__ import annotations

import time

import torch

from tests.ros.node_harness import NodeProcess, good_images
from tests.ros.robot_probe import RobotProbe
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture

PARAMS = {"qos.image": "reliable", "qos.image_depth": 100, "queue_size": 100}
PAUSED, FAILED = 3, 4


def send(probe, images, gap_s: float = 0.02) -> None:
    probe.wait_for_image_subscriber()
    for msg in images:
        probe.publish_image(msg)
        time.sleep(gap_s)


def pause(probe, on: bool):
    from std_srvs.srv import SetBool
    return probe.call("pause", SetBool.Request(data=on))


def states(probe, state: int) -> list:
    return [g.msg for g in probe.snapshot("state_changes") if g.msg.state == state]


def test_pause_drops_and_counts_images_and_resume_goes_on(tmp_path, ros_env):
    images = good_images(15)
    with NodeProcess(ros_env, tmp_path, PARAMS) as node, RobotProbe() as probe:
        probe.wait_active(node)
        send(probe, images[:5])
        probe.wait_until(lambda: len(probe.poses) >= 5, 60, "5 poses")

        reply = pause(probe, True)
        assert reply.success and reply.message.startswith("paused"), reply.message
        probe.wait_until(lambda: states(probe, PAUSED), 15, "a PAUSED status")
        assert pause(probe, True).message == "already paused"
        send(probe, images[5:10])
        probe.wait_until(lambda: probe.counter("dropped_paused") >= 5, 30,
                         lambda: f"5 images dropped while paused ({probe.last_diag()})")
        probe.wait_until(lambda: len(states(probe, PAUSED)) >= 6, 15,
                         "a PAUSED status on the pause and per dropped image")
        level, message = probe.wait_until(
            lambda: probe.last_level() if "paused" in probe.last_level()[1] else None, 15,
            lambda: f"'paused' on /diagnostics (last: {probe.last_level()})")
        assert level == 0, message  # chosen, not a fault
        assert len(probe.poses) == 5 and probe.last_diag()["paused"] == "True"
        paused_status = states(probe, PAUSED)[-1]
        assert paused_status.frames_dropped >= 5

        reply = pause(probe, False)
        assert reply.success and reply.message == "resumed"
        send(probe, images[10:])
        probe.wait_until(lambda: len(probe.poses) >= 10, 60, "poses after resuming")
        # The stream was kept: the frames after the pause continue its indices (statuses
        # come on their own topic: wait for the last one).
        probe.wait_until(lambda: [g for g in probe.snapshot("status")
                                  if g.msg.frame_index == 9], 30, "the status of frame 9")
        assert sorted(g.msg.frame_index for g in probe.snapshot("status")) == list(range(10))
    assert node.poll() is not None


def nan_checkpoint(path):
    """The tiny network with a diverged camera head: every pose comes out NaN."""
    from safetensors.torch import save_file
    from lingbot_ros.model.presets import preset_config, random_model
    state = random_model(preset_config("tiny")).state_dict()
    state = {k: (torch.full_like(v, float("nan")) if k.startswith("camera_head.") else v)
             for k, v in state.items()}
    save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    return path


def test_a_non_finite_output_is_failed_rolled_back_and_the_node_goes_on(tmp_path, ros_env):
    checkpoint = nan_checkpoint(tmp_path / "diverged.safetensors")
    images = good_images(6)
    with NodeProcess(ros_env, tmp_path, {**PARAMS, "checkpoint": str(checkpoint)}) as node, \
            RobotProbe() as probe:
        probe.wait_active(node)
        send(probe, images)
        failed = probe.wait_until(lambda: states(probe, FAILED)[2:], 60,
                                  "three FAILED statuses (one per anchor batch)")
        assert all("not finite" in m.message and "rolled back" in m.message for m in failed)
        # The failure's ERROR: an earlier /diagnostics may still be the stall's ERROR (images
        # arrived, none processed for stall_timeout_s on a loaded machine); from the first
        # failure on, every one says the last frame failed until a frame succeeds.
        level, message = probe.wait_until(
            lambda: probe.last_level() if probe.last_level()[0] == 2
            and "last frame failed" in probe.last_level()[1] else None, 15,
            lambda: f"the failure's ERROR on /diagnostics (last: {probe.last_level()})")
        assert "not finite" in message
        # each image of a failed anchor step is counted: 6 images, 3 steps
        probe.wait_until(lambda: probe.counter("failed_non_finite") == 6, 15,
                         lambda: f"failed_non_finite 6 ({probe.last_diag()})")
        assert len(probe.poses) == 0
        info = probe.call("get_cache_info")
        assert info.success and info.info.frames_committed == 0  # every step rolled back
        assert probe.call("reset").success  # still serving
        assert node.poll() is None
    assert "failed: FrameFailed" in node.log()
