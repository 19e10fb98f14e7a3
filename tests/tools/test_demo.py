"""`make demo` runs lingbot-ros-demo: keep it working (short run)."""
import json

from lingbot_ros.tools.offline.demo import main
from lingbot_ros.tools.view.run_dir import read_run_dir


def test_demo_runs_the_pipeline_on_a_synthetic_bag_and_says_weights_are_random(tmp_path, capsys):
    assert main(["--frames", "14", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "RANDOM weights" in out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["frames_processed"] == 14 and summary["random_weights"]
    assert (tmp_path / "run" / "trajectory.tum").exists()
    assert (tmp_path / "scene_bag.gt.tum").exists()
    # it ends with the command that opens the run in the viewer, and the viewer reads it
    command = next(line for line in out.splitlines() if line.startswith("see it in 3D: "))
    assert "lingbot-ros-view" in command and command.split()[-2].endswith("run")
    run = read_run_dir(tmp_path / "run")
    assert len(run.poses) == 14 and run.counters.processed == 14
