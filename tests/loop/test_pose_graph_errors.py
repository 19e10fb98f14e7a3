"""PoseGraph.optimize() when GTSAM fails (lingbot_ros/loop/pose_graph.py): a loop with
absurd sigmas (1e-15 in every component, 54x scale) against the drifted chain makes iSAM2
raise "Indeterminate linear system"; the graph drops the loops added since the last good
optimize, counts them and returns the graph without them. Small room: 21 keyframes."""
import numpy as np
import pytest

from lingbot_ros.loop.pose_graph import EdgeSigmas, PoseGraph, PoseGraphError
from lingbot_ros.loop.synthetic import drifted, loop_measurement, loop_path

N = 20
EXACT = EdgeSigmas(0.01, 0.1, 0.005)
ABSURD = EdgeSigmas(1e-15, 1e-15, 1e-15)


@pytest.fixture(scope="module")
def room():
    truth = loop_path(N + 1, per_lap=N)  # (N + 1, 4, 4)
    front_end, units = drifted(truth, seed=1)
    return truth, front_end, units


def build(fe, upto=N + 1) -> PoseGraph:
    graph = PoseGraph()
    for k in range(upto):
        graph.add_keyframe(k, 1_000 + k, fe[k], 0)
    return graph


def bad_loop(truth, units) -> np.ndarray:
    m = loop_measurement(truth, units, 0, N)
    m[:3, :3] *= 54.0  # a 54x relative scale
    return m


def same_poses(got, want, atol) -> None:
    assert got.ids == want.ids
    for i in want.ids:
        np.testing.assert_allclose(got.poses[i], want.poses[i], atol=atol)
        assert got.scales[i] == pytest.approx(want.scales[i], abs=atol)


def test_the_absurd_loop_is_a_real_gtsam_failure(room):
    truth, fe, units = room
    graph = build(fe)
    graph.add_loop(0, N, bad_loop(truth, units), ABSURD)
    with pytest.raises(RuntimeError, match="Indeterminate linear system"):
        graph._feed(len(graph), len(graph.state_dict()["edge_kinds"]))  # GTSAM, unguarded


@pytest.mark.parametrize("pending", [0, 5])  # keyframes added with the loop, not yet fed
def test_an_indeterminate_loop_is_dropped_and_counted(room, pending):
    truth, fe, units = room
    graph, ref = build(fe, N + 1 - pending), build(fe, N + 1 - pending)
    graph.optimize(), ref.optimize()
    for k in range(N + 1 - pending, N + 1):
        graph.add_keyframe(k, 1_000 + k, fe[k], 0)
        ref.add_keyframe(k, 1_000 + k, fe[k], 0)
    graph.add_loop(0, N, bad_loop(truth, units), ABSURD)
    result = graph.optimize()
    assert result.rejected_loops == ((0, N),) and result.loops == ()
    assert dict(graph.rejected_loops) == {"indeterminate": 1}
    assert graph.state_dict()["edge_kinds"] == ["odometry"] * N  # the loop is gone
    same_poses(result, ref.optimize(), atol=1e-9)
    assert graph.result is result and graph.optimize() is result  # nothing pending


def test_a_later_good_loop_still_optimizes_and_the_state_round_trips(room):
    truth, fe, units = room
    graph, ref = build(fe), build(fe)
    graph.optimize(), ref.optimize()
    graph.add_loop(0, N, bad_loop(truth, units), ABSURD)
    graph.add_loop(1, N - 1, loop_measurement(truth, units, 1, N - 1), EXACT)  # dropped too
    assert len(graph.optimize().rejected_loops) == 2
    state = graph.state_dict()
    copy = PoseGraph()
    copy.load_state_dict(state)
    assert dict(copy.rejected_loops) == {"indeterminate": 2}
    same_poses(copy.result, graph.result, atol=0.0)  # bit for bit
    for g in (graph, copy, ref):
        g.add_loop(0, N, loop_measurement(truth, units, 0, N), EXACT)
        g.add_keyframe(N + 1, 2_000 + N, fe[N], 0)
    results = [g.optimize() for g in (graph, copy, ref)]
    assert results[0].rejected_loops == () and graph.rejected_loops["indeterminate"] == 2
    assert results[0].loops[0].residual_m < 0.01 and results[0].loops[0].weight == 1.0
    same_poses(results[0], results[2], atol=5e-3)  # iSAM2 linearized elsewhere: converged
    same_poses(results[1], results[0], atol=5e-3)


def test_a_failure_without_a_new_loop_raises_and_restores(room):
    _, fe, _ = room
    graph = build(fe, 10)
    before = graph.optimize()
    state = graph.state_dict()
    graph.add_keyframe(10, 2_000, fe[10], 1, rollover_sigmas=EdgeSigmas(1e200, 1e200, 1e200))
    with pytest.raises(PoseGraphError, match="no loop was added since the last optimize"):
        graph.optimize()
    assert graph.result is before and dict(graph.rejected_loops) == {"indeterminate": 0}
    after = graph.state_dict()
    assert (after["fed_nodes"], after["fed_edges"]) == (state["fed_nodes"], state["fed_edges"])
    np.testing.assert_array_equal(after["estimate"], state["estimate"])
    assert len(graph) == 11  # the input stays, pending: a retry raises the same way
    with pytest.raises(PoseGraphError):
        graph.optimize()


def test_a_failing_rebuild_raises_and_keeps_the_previous_result(room):
    truth, fe, units = room
    graph = build(fe, N)
    before = graph.optimize()
    graph.add_keyframe(N, 2_000, fe[N], 1, rollover_sigmas=EdgeSigmas(1e200, 1e200, 1e200))
    graph.add_loop(0, N, bad_loop(truth, units), ABSURD)
    with pytest.raises(PoseGraphError, match="did not help"):
        graph.optimize()
    assert graph.result is before and graph.rejected_loops["indeterminate"] == 0
    assert graph.state_dict()["edge_kinds"][-1] == "loop"  # nothing dropped: it did not help
