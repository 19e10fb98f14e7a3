"""`make demo` runs lingbot-ros-demo: the node on a synthetic bag, end to end (short run)."""
import subprocess
import sys

from tests.ros.ros_helpers import REPO


def test_ros_demo_runs_node_replay_and_services(ros_env, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "lingbot_ros.ros.demo", "--frames", "20",
                           "--out", str(tmp_path)], env=ros_env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "bag frames published     20" in out
    assert "poses received           " in out and "RANDOM weights" in proc.stderr
    assert "wrote " in out and (tmp_path / "trajectory.tum").exists()
    assert "after reset              0 frames committed" in out
