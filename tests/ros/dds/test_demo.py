"""`make demo` runs lingbot-ros-demo: the node on a synthetic bag, end to end (short run),
with ``scale.source: depth`` from the bag's aligned depth: the scale locks and every output
and file is in metres (random weights: the value itself is not meaningful, and it says so)."""
import math
import subprocess
import sys

import pytest

from tests.ros.ros_helpers import REPO


def _line(out: str, label: str) -> str:
    lines = [line for line in out.splitlines() if line.startswith(label)]
    assert len(lines) == 1, (label, out)
    return lines[0][len(label):]


def test_ros_demo_runs_node_replay_and_services(ros_env, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "lingbot_ros.clients.demo", "--frames", "20",
                           "--out", str(tmp_path)], env=ros_env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "bag frames published     20" in out
    # every frame is queued: none dropped, whatever the load
    assert "processed / dropped      20 / 0  (rejected 0)" in out, out
    assert "poses received           " in out and "RANDOM weights" in proc.stderr
    assert "wrote " in out and (tmp_path / "trajectory.tum").exists()
    assert "after reset              0 frames committed" in out
    # the closing line opens the same run in the viewer, which reads the node's saved files
    view = _line(out, "see it in 3D             ")
    assert "lingbot-ros-view" in view and str(tmp_path) in view, view
    from lingbot_ros.tools.view.run_dir import read_run_dir
    run = read_run_dir(tmp_path)
    assert len(run.poses) == 20 and run.points_file == "map.ply" and run.up_axis == "+z"

    # the scale, as ~/scale said it before the reset: locked from the bag's aligned depth
    state = _line(out, "scale state              ")
    assert state.startswith("LOCKED (source depth, "), out
    samples = int(state.split(", ")[1].split()[0])
    assert 10 <= samples <= 20, state  # scale.min_samples 10 .. one per frame
    value = float(_line(out, "scale metres_per_unit    ").split()[0])
    assert math.isfinite(value) and value > 0, out
    assert "every output and file in metres" in out
    assert _line(out, "random weights: ").endswith("the value is not meaningful.")
    # ... and the files say so: metres, with the value ~/scale reported
    assert "(TUM, m)" in _line(out, "save_trajectory          ")
    header = [line for line in (tmp_path / "trajectory.tum").read_text().splitlines()
              if line.startswith("#")]
    assert "# units: m" in header, header
    scale_line = next(line for line in header if line.startswith("# scale: depth, "))
    assert float(scale_line.split(", ")[1].split()[0]) == pytest.approx(value, rel=1e-5)
