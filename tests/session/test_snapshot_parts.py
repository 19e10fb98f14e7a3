"""A snapshot's parts are registered in one place (session/snapshot_parts.py), each owner
implements the one protocol (state_dict / load_state_dict), and a key the registry does not
name is refused."""
import numpy as np
import pytest

from lingbot_ros.geometry import VoxelMap
from lingbot_ros.scale import ScaleConfig, ScaleEstimator
from lingbot_ros.session import (PARTS, SCALE, VOXEL_MAP, SnapshotPart, StreamingSession,
                                 front_end_state, saved_part)
from lingbot_ros.session.input_policy import InputPolicy
from lingbot_ros.session.snapshot_parts import FRONT_END, STREAM, part, stream_parts
from lingbot_ros.session.stats import LatencyWindow
from tests.session.micro_model import micro_model
from tests.session.test_snapshot import IMAGES, config, push_all


def test_every_part_has_one_key_and_one_side():
    keys = [p.key for p in PARTS]
    assert len(keys) == len(set(keys))
    assert {p.side for p in PARTS} == {STREAM, FRONT_END}
    assert part(SCALE).side == part(VOXEL_MAP).side == FRONT_END


def test_a_key_the_registry_does_not_name_is_refused():
    with pytest.raises(KeyError, match="registered front_end snapshot part"):
        front_end_state({"points": VoxelMap(0.1, 10)})
    with pytest.raises(KeyError, match="registered front_end snapshot part"):
        saved_part({"points": {}}, "points")
    with pytest.raises(KeyError):  # a stream part is not a front end's
        front_end_state({"segments": VoxelMap(0.1, 10)})


def test_front_end_parts_save_and_load_through_the_protocol():
    points = VoxelMap(0.5, 100)
    points.add(np.array([[0.0, 0.0, 1.0], [2.0, 0.0, 1.0]]), np.zeros((2, 3), np.uint8))
    scale = ScaleEstimator(ScaleConfig(source="fixed", factor=0.25))
    for owner in (points, scale, InputPolicy(config()), LatencyWindow()):
        assert isinstance(owner, SnapshotPart), type(owner).__name__
    state = front_end_state({SCALE: scale, VOXEL_MAP: points})
    assert set(state) == {SCALE, VOXEL_MAP}
    assert front_end_state({VOXEL_MAP: None}) == {VOXEL_MAP: None}  # the node without a map
    again = VoxelMap(0.5, 100)
    again.load_state_dict(saved_part(state, VOXEL_MAP))
    assert np.array_equal(again.arrays()[0], points.arrays()[0])
    assert saved_part({}, SCALE) is None and saved_part(None, SCALE) is None  # older builds


def test_the_stream_state_holds_every_registered_stream_part():
    session = StreamingSession(micro_model(), config())
    push_all(session, IMAGES[:4], 0)
    state = session.snapshots.state_dict()
    assert {p.key for p in stream_parts()} <= set(state)


@pytest.mark.parametrize("key", [p.key for p in stream_parts() if not p.optional])
def test_a_state_without_a_required_stream_part_does_not_load(key):
    session = StreamingSession(micro_model(), config())
    push_all(session, IMAGES[:4], 0)
    state = session.snapshots.state_dict()
    del state[key]
    fresh = StreamingSession(micro_model(), config())
    with pytest.raises(KeyError, match=f"the state has no {key}"):
        fresh.snapshots.load_state_dict(state)
