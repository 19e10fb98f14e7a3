"""`make demo` runs lingbot-ros-demo: keep it working (short run)."""
import json

from lingbot_ros.tools.offline.demo import main


def test_demo_runs_the_pipeline_on_a_synthetic_bag_and_says_weights_are_random(tmp_path, capsys):
    assert main(["--frames", "14", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "RANDOM weights" in out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["frames_processed"] == 14 and summary["random_weights"]
    assert (tmp_path / "run" / "trajectory.tum").exists()
    assert (tmp_path / "scene_bag.gt.tum").exists()
