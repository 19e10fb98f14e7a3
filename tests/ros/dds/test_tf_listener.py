"""TfListener over DDS: a publisher in a child process (tests/ros/tf_publisher.py), the
listener on a BackgroundNode in this process. Waits are generous (a loaded 2-core machine)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager

import numpy as np
import pytest

from lingbot_ros.clients.background_node import BackgroundNode
from lingbot_ros.geometry import R_BODY_OPTICAL, tq_to_matrix
from lingbot_ros.ros.tf.listener import TfListener
from lingbot_ros.ros.tf.tree import TransformTree
from tests.ros.ros_helpers import REPO
from tests.ros.tf_publisher import (MALFORMED, ODOM_POSES, ODOM_STAMPS_NS, STATIC_CHAIN)

TIMEOUT = 30.0  # s for discovery and delivery


class TfProbe(BackgroundNode):
    def __init__(self) -> None:
        super().__init__(f"test_tf_listener_{os.getpid()}", start_parameter_services=False)
        self.tree = TransformTree()

    def setup(self, node) -> None:
        self.listener = TfListener(node, self.tree)


@contextmanager
def publisher(env, tmp_path, tf: bool):
    """The publisher child, in its own process group, killed (the group) on exit."""
    ready = tmp_path / "ready"
    log = open(tmp_path / "tf_publisher.log", "w")
    cmd = [sys.executable, "-m", "tests.ros.tf_publisher", str(ready)] + (["--tf"] if tf else [])
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        proc.ready_file = ready
        yield proc
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait(timeout=30)
        log.close()


def wait_until(predicate, what: str, proc, log_path, timeout: float = TIMEOUT):
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            pytest.fail(f"the publisher exited with {proc.returncode} while waiting for "
                        f"{what}:\n{log_path.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def expected_static() -> np.ndarray:
    """T_base_link_camera_optical_frame from the published chain."""
    (_, _, t1, q1), (_, _, t2, q2) = STATIC_CHAIN
    return tq_to_matrix(t1, q1) @ tq_to_matrix(t2, q2)


def test_chain_and_interpolated_odometry(ros_env, tmp_path):
    log_path = tmp_path / "tf_publisher.log"
    with TfProbe() as probe, publisher(ros_env, tmp_path, tf=True) as proc:
        tree = probe.tree
        mid = (ODOM_STAMPS_NS[0] + ODOM_STAMPS_NS[1]) // 2
        wait_until(lambda: tree.can_transform("odom", "camera_optical_frame", mid)
                   and tree.can_transform("odom", "camera_optical_frame", ODOM_STAMPS_NS[1]),
                   "odom -> camera_optical_frame", proc, log_path)

        T_base_opt = expected_static()
        np.testing.assert_allclose(tree.lookup("base_link", "camera_optical_frame", None),
                                   T_base_opt, atol=1e-12)
        # the optical frame's rotation in camera_link is the standard one
        np.testing.assert_allclose(tree.lookup("camera_link", "camera_optical_frame", 0)[:3, :3],
                                   R_BODY_OPTICAL, atol=1e-12)
        for stamp, (t, q) in zip(ODOM_STAMPS_NS, ODOM_POSES):
            np.testing.assert_allclose(tree.lookup("odom", "camera_optical_frame", stamp),
                                       tq_to_matrix(t, q) @ T_base_opt, atol=1e-12)
        # halfway: 0.5 m forward, 45 deg yaw
        c, s = np.cos(np.pi / 4), np.sin(np.pi / 4)
        T_odom_base_mid = np.array([[c, -s, 0, 0.5], [s, c, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]])
        np.testing.assert_allclose(tree.lookup("odom", "camera_optical_frame", mid),
                                   T_odom_base_mid @ T_base_opt, atol=1e-12)
        # the latest common time is the newest odometry stamp
        assert tree.latest_common_time("odom", "camera_optical_frame") == ODOM_STAMPS_NS[1]

        # the malformed static transforms were skipped and counted, not raised
        wait_until(lambda: probe.listener.rejected >= len(MALFORMED), "the rejections", proc,
                   log_path)
        assert "bad_quaternion" not in tree.frames()
        assert set(tree.frames()) == {"odom", "base_link", "camera_link",
                                      "camera_optical_frame"}


def test_late_joiner_receives_latched_static_transforms(ros_env, tmp_path):
    log_path = tmp_path / "tf_publisher.log"
    with publisher(ros_env, tmp_path, tf=False) as proc:
        # /tf_static has been published once before the listener exists
        wait_until(proc.ready_file.exists, "the publisher's first /tf_static", proc, log_path)
        with TfProbe() as probe:
            wait_until(lambda: probe.tree.can_transform("base_link", "camera_optical_frame"),
                       "the latched base_link -> camera_optical_frame", proc, log_path)
            np.testing.assert_allclose(
                probe.tree.lookup("camera_optical_frame", "base_link", None),
                np.linalg.inv(expected_static()), atol=1e-12)
            probe.listener.destroy()
            probe.listener.destroy()  # idempotent


def test_malformed_transforms_are_counted_not_raised(ros_env):
    from tf2_msgs.msg import TFMessage

    from tests.ros.tf_publisher import transform_stamped

    good = ("base_link", "camera_link", (0.1, 0.0, 0.2), (0.0, 0.0, 0.0, 2.0))  # normalised
    bad = [("base_link", "nan", (float("nan"), 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)),
           ("base_link", "inf", (0.0, 0.0, 0.0), (0.0, float("inf"), 0.0, 1.0)),
           ("base_link", "zero_q", (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 0.0)),
           ("", "no_parent", (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)),
           ("/", "slash_parent", (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)),
           ("base_link", "base_link", (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)),
           ("camera_link", "base_link", (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0))]  # a loop
    with TfProbe() as probe:
        listener, tree = probe.listener, probe.tree
        listener.feed(TFMessage(transforms=[transform_stamped(*good, 0)]), True)
        listener.feed(TFMessage(transforms=[transform_stamped(*b, 0) for b in bad]), False)
        assert listener.rejected == len(bad)
        assert "loop" in listener.last_rejection
        assert tree.frames() == ["base_link", "camera_link"]
        np.testing.assert_allclose(tree.lookup("base_link", "camera_link"),
                                   tq_to_matrix((0.1, 0.0, 0.2), (0, 0, 0, 1)), atol=1e-12)
        # a new parent replaces the edge; the listener warns, the tree counts it
        listener.feed(TFMessage(transforms=[transform_stamped(
            "mount", "camera_link", (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0), 0)]), True)
        assert tree.reparents == 1 and listener.rejected == len(bad)
