"""python -m lingbot_ros.tools.bench.loop.graph_cost: its JSON, on a small graph (no timing
checked)."""
import json

from lingbot_ros.tools.bench.loop.graph_cost import main


def test_graph_cost_prints_and_writes_its_report(tmp_path, capsys):
    out = tmp_path / "graph.json"
    assert main(["--keyframes", "400", "--loops", "2", "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert json.loads(out.read_text()) == {"written_by": "lingbot-ros-bench-graph", **report}
    assert {"cpu", "cores", "python", "system"} <= set(report["machine"])
    (graph,) = report["graphs"]
    assert graph["keyframes"] == 400 and graph["keyframes_at_end"] == 480
    for kind in ("recent", "first_lap"):
        entry = graph["loop_update_ms"][kind]
        for key in ("isam2_ms", "optimize_ms"):
            assert set(entry[key]) == {"median", "p90", "max", "n"} and entry[key]["n"] == 2
        assert len(entry["iterations"]) == 2
    assert {"keyframes_update_ms", "build_s", "state_dict_s", "load_state_dict_s",
            "loops_in_graph"} <= set(graph)
    accuracy = report["accuracy"]
    assert {"drifted_ate_m", "huber", "huber_wrong_loop", "cauchy", "cauchy_wrong_loop",
            "scale_pinned", "huber_drift_x2", "huber_drift_x3"} <= set(accuracy)
    assert set(accuracy["huber"]) == {"drifted_ate_m", "ate_m", "ratio", "iterations",
                                      "loop_residuals_m", "loop_weights"}


def test_graph_cost_refuses_a_graph_too_small(capsys):
    assert main(["--keyframes", "100"]) == 2
    assert "keyframes must be >= 400" in capsys.readouterr().err
