"""loop/graph_record.py: the graph's inputs on file, replayed, and a corrected trajectory."""
from __future__ import annotations

import json

import numpy as np
import pytest

from lingbot_ros.geometry import ate_rmse
from lingbot_ros.loop.config import LoopConfig
from lingbot_ros.loop.graph_record import (GraphRecord, GraphRecordError, RecordedLoop,
                                           corrected_poses, read_graph_record, record_of,
                                           replay, scaled, write_graph_record)
from lingbot_ros.loop.graph_types import EdgeSigmas
from lingbot_ros.loop.pose_graph import PoseGraph
from lingbot_ros.loop.synthetic import drifted, loop_measurement, loop_path

N = 200
EXACT = EdgeSigmas(0.01, 0.1, 0.005)


@pytest.fixture(scope="module")
def room():
    truth = loop_path(N + 1, per_lap=N)
    front_end, units = drifted(truth, seed=1)
    loops = tuple(RecordedLoop(a, b, loop_measurement(truth, units, a, b), EXACT)
                  for a, b in ((0, N), (1, N - 1), (2, N)))
    stamps = tuple(1_000 + k * 100_000_000 for k in range(N + 1))
    return truth, GraphRecord(tuple(range(N + 1)), stamps, (0,) * (N + 1), front_end, loops)


def test_a_record_round_trips_bit_exactly(room, tmp_path):
    _, record = room
    path = write_graph_record(tmp_path / "g.json", record)
    back = read_graph_record(path)
    assert back.ids == record.ids and back.stamps_ns == record.stamps_ns
    assert np.array_equal(back.poses, record.poses)
    for a, b in zip(back.loops, record.loops):
        assert (a.id_a, a.id_b, a.sigmas) == (b.id_a, b.id_b, b.sigmas)
        assert np.array_equal(a.T_a_b, b.T_a_b)
    write_graph_record(path, back)  # ours: replaced


def test_replay_equals_the_graph_built_online(room):
    truth, record = room
    graph = PoseGraph(LoopConfig())
    for k in range(N + 1):
        graph.add_keyframe(k, record.stamps_ns[k], record.poses[k], 0)
    for lp in record.loops:
        graph.add_loop(lp.id_a, lp.id_b, lp.T_a_b, lp.sigmas)
    online = graph.optimize()
    from_file = record_of(graph.state_dict())
    assert from_file.ids == record.ids and len(from_file.loops) == 3
    for a, b in zip(from_file.loops, record.loops):
        np.testing.assert_allclose(a.T_a_b, b.T_a_b, atol=0)
        assert a.sigmas.t_m == pytest.approx(b.sigmas.t_m)
        assert a.sigmas.deg == pytest.approx(b.sigmas.deg)
        assert a.sigmas.log_scale == pytest.approx(b.sigmas.log_scale)
    replayed = replay(record)
    centres = np.array([replayed.poses[k][:3, 3] for k in range(N + 1)])
    fe_ate = ate_rmse(record.poses[:, :3, 3], truth[:, :3, 3])
    assert ate_rmse(centres, truth[:, :3, 3]) <= 0.1 * fe_ate
    np.testing.assert_allclose(centres, [online.poses[k][:3, 3] for k in range(N + 1)],
                               atol=5e-3)


def test_corrected_poses_move_frames_with_their_keyframe(room):
    _, record = room
    result = replay(record)
    kf = corrected_poses(result, record, record.stamps_ns, record.poses)
    for k in (0, 57, N):
        np.testing.assert_allclose(kf[k], result.poses[k], atol=1e-12)
    # a frame between keyframes 10 and 11 keeps its offset from keyframe 10, scaled
    mid = record.poses[10].copy()
    mid[:3, 3] = 0.5 * (record.poses[10][:3, 3] + record.poses[11][:3, 3])
    out = corrected_poses(result, record, [record.stamps_ns[10] + 1], mid[None])[0]
    rel_fe = np.linalg.norm(mid[:3, 3] - record.poses[10][:3, 3])
    rel_map = np.linalg.norm(out[:3, 3] - result.poses[10][:3, 3])
    assert rel_map == pytest.approx(result.scales[10] * rel_fe, rel=1e-9)
    # before the first keyframe: the first keyframe's correction
    early = corrected_poses(result, record, [0], record.poses[:1])[0]
    np.testing.assert_allclose(early, result.poses[0], atol=1e-12)


def test_scaled_records_convert_translations_only(room):
    _, record = room
    metric = scaled(record, 0.25)
    assert metric.units == "m"
    np.testing.assert_allclose(metric.poses[:, :3, 3], 0.25 * record.poses[:, :3, 3])
    np.testing.assert_array_equal(metric.poses[:, :3, :3], record.poses[:, :3, :3])
    assert metric.loops[0].sigmas.t_m == pytest.approx(0.25 * EXACT.t_m)
    assert metric.loops[0].sigmas.deg == EXACT.deg
    with pytest.raises(ValueError, match="model-unit"):
        scaled(metric, 2.0)


def _doc(path):
    return json.loads(path.read_text())


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(format="other"), "not a loop graph record"),
    (lambda d: d.update(schema=99), "schema 99"),
    (lambda d: d["keyframes"][3].update(id=2), "ids repeat"),
    (lambda d: d["keyframes"][3].update(stamp_ns=0), "backwards"),
    (lambda d: d["keyframes"][3].update(pose=[1.0] * 16), "pose of keyframe 3"),
    (lambda d: d["loops"][0].update(id_b=10 ** 6), "does not hold"),
    (lambda d: d["loops"][0].update(T_a_b=[0.0] * 15), "16 numbers"),
    (lambda d: d["keyframes"][0].pop("segment"), "malformed"),
])
def test_a_bad_record_is_refused_with_its_reason(room, tmp_path, edit, message):
    _, record = room
    path = write_graph_record(tmp_path / "g.json", record)
    doc = _doc(path)
    edit(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(GraphRecordError, match=message):
        read_graph_record(bad)


def test_a_foreign_file_is_neither_read_nor_replaced(tmp_path, room):
    _, record = room
    other = tmp_path / "g.json"
    other.write_text("not json")
    with pytest.raises(GraphRecordError, match="not JSON"):
        read_graph_record(other)
    with pytest.raises(FileExistsError):
        write_graph_record(other, record)
    assert other.read_text() == "not json"
    link = tmp_path / "link.json"
    link.symlink_to(write_graph_record(tmp_path / "real.json", record))
    with pytest.raises(OSError):
        read_graph_record(link)
