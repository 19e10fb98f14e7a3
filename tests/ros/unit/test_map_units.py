"""The map owns its units (no DDS traffic: a real rclpy node, the real ``Outputs`` and
``MapPoints``): a ~/save_map that runs while the worker adds a keyframe's points writes a
header in the units of the points it writes.

The race it guards (issue 33): the map's scale was set by ``Outputs`` after ``map.add`` and
outside the map's lock, so a save in between wrote metres under a "model units" header. The
test stops the worker thread right after the points went in (a hook on the real map's
``add``, two ``threading.Event``s), saves from the main thread at exactly that point, then
lets the worker go on: deterministic, no sleeps.
"""
from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest

from lingbot_ros.geometry import read_ply, read_ply_comments
from lingbot_ros.ros.params.node_config import NodeConfig
from lingbot_ros.ros.tf.frame_chain import FrameChain
from lingbot_ros.scale import ScaleEstimate, ScaleState

K = 0.25  # metres per model unit
WAIT_S = 60.0  # a bound for a loaded machine, never reached when the code is right


@pytest.fixture
def ros_node():
    import rclpy
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("map_units", context=context)
    try:
        yield node
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


def locked(k: float = K) -> ScaleEstimate:
    return ScaleEstimate(state=ScaleState.LOCKED, source="fixed", metres_per_unit=k,
                         sigma_log=0.0, samples=1, segment=0, min_samples=1)


def keyframe(stamp_ns: int = 1_000_000_000):
    """A keyframe with a flat depth of 2 model units over 8 x 8 pixels."""
    h = w = 8
    K_model = np.array([[8.0, 0.0, 4.0], [0.0, 8.0, 4.0], [0.0, 0.0, 1.0]])
    return SimpleNamespace(
        stamp_ns=stamp_ns, keyframe=True, index=5, c2w=np.eye(4), K=K_model, K_model=K_model,
        depth=np.full((h, w), 2.0, np.float32), depth_conf=np.full((h, w), 5.0, np.float32),
        rgb=None, crop=SimpleNamespace(input_hw=(h, w)))


def test_a_save_between_the_points_and_their_units_states_the_points_units(ros_node, tmp_path):
    from lingbot_ros.ros.outputs.frame_outputs import Outputs
    outputs = Outputs(ros_node, NodeConfig(base_frame="", map_points=True, depth_rate_hz=0,
                                           points_stride=1, map_rate_hz=0.01))
    chain = FrameChain.camera_only("camera_optical_frame", True)
    added, saved = threading.Event(), threading.Event()
    real_add = outputs.map.add

    def add_then_wait(*args, **kwargs):  # the worker, right after its points went in
        real_add(*args, **kwargs)
        added.set()
        assert saved.wait(WAIT_S)

    outputs.map.add = add_then_wait
    errors = []

    def worker():
        try:
            outputs.publish(keyframe(), chain, depth_due=False, scale=locked())
        except BaseException as exc:  # noqa: BLE001 -- reported by the main thread
            errors.append(exc)
            added.set()

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert added.wait(WAIT_S) and not errors, errors
        count, units = outputs.save_map(tmp_path / "map.ply")  # the service's call
    finally:
        saved.set()
        thread.join(WAIT_S)
    assert not errors, errors
    xyz, _ = read_ply(tmp_path / "map.ply")
    assert count == len(xyz) == 64
    # the points are in metres: the depth of 2 model units is 0.5 m along the view axis
    assert np.all(np.isclose(xyz, 2.0 * K), axis=0).any(), xyz
    header = read_ply_comments(tmp_path / "map.ply")
    assert "units: m" in header, header  # ... and the header says so
    assert units is not None and units.output_factor == K
    outputs.destroy()


def test_a_reset_forgets_the_maps_units(ros_node, tmp_path):
    from lingbot_ros.ros.outputs.frame_outputs import Outputs
    outputs = Outputs(ros_node, NodeConfig(base_frame="", map_points=True, depth_rate_hz=0,
                                           points_stride=1, map_rate_hz=0.01))
    chain = FrameChain.camera_only("camera_optical_frame", True)
    outputs.publish(keyframe(), chain, depth_due=False, scale=locked())
    assert outputs.map.units().output_factor == K
    outputs.clear()
    count, units = outputs.save_map(tmp_path / "empty.ply")
    assert (count, units) == (0, None)
    assert "units: model units (no scale estimate: nothing was scaled)" in read_ply_comments(
        tmp_path / "empty.ply")
    outputs.destroy()
