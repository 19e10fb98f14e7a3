"""The rig tests' session: a real ``MultiStreamSession`` (one tiny model shared by the cameras,
one page pool, the batched step) on the CPU, and an rclpy node for the unit tests."""
from __future__ import annotations

import contextlib

from lingbot_ros.config import PreprocessConfig, SessionConfig
from lingbot_ros.session import MultiStreamSession, load_session_model

# The node tests' tiny configuration (tests/ros/node_harness.py TINY_PARAMS).
SESSION = SessionConfig(num_scale_frames=2, window=4, preprocess=PreprocessConfig(width=56))


def rig_session(names) -> MultiStreamSession:
    """A multi-stream session of the tiny random model, one stream per camera name."""
    model, _ = load_session_model(SESSION, "tiny")
    return MultiStreamSession(model, {name: SESSION for name in names})


@contextlib.contextmanager
def rclpy_node(name: str):
    """An rclpy node in a context of its own, shut down after the test."""
    import rclpy
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node(name, context=context)
    try:
        yield node
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)
