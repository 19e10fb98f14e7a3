"""lingbot-ros-offline RUN --reoptimize on the synthetic loop with injected drift: the
optimised ATE is at most 10 % of the drifted one, through the CLI (a real subprocess)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from lingbot_ros.geometry import read_tum
from lingbot_ros.tools.offline.loop_run import loop_config
from lingbot_ros.tools.offline.run_spec import BadRunOptions

import pytest


def _run(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          env=env, timeout=300, cwd=cwd)


def test_the_synthetic_loop_is_corrected_through_the_cli(tmp_path):
    run = tmp_path / "run"
    made = _run("lingbot_ros.tools.synthetic.loop_run", str(run))
    assert made.returncode == 0, made.stderr
    out = _run("lingbot_ros.tools.offline", str(run), "--reoptimize")
    assert out.returncode == 0, out.stderr
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["keyframes"] == 201 and line["loops"] == 3
    doc = json.loads((run / "reoptimize.json").read_text())
    front = doc["evaluation_front_end"]["ate_sim3"]["rmse"]
    optimised = doc["evaluation_optimized"]["ate_sim3"]["rmse"]
    assert front > 0.1  # the injected drift (model units, Sim(3)-aligned: metres of truth)
    assert optimised <= 0.10 * front
    assert doc["ate_ratio"] == pytest.approx(optimised / front)
    stamps, poses = read_tum(run / "trajectory_optimized.tum")
    fe_stamps, _ = read_tum(run / "trajectory.tum")
    assert np.array_equal(stamps, fe_stamps)
    # looser loop sigmas through --loop-param are read (and the result differs)
    again = _run("lingbot_ros.tools.offline", str(run), "--reoptimize",
                 "--loop-param", "loop_robust_k=0.5")
    assert again.returncode == 0, again.stderr
    assert json.loads((run / "reoptimize.json").read_text())["loop_config"][
        "loop_robust_k"] == 0.5


def test_reoptimize_refuses_a_folder_without_a_graph(tmp_path):
    out = _run("lingbot_ros.tools.offline", str(tmp_path), "--reoptimize")
    assert out.returncode == 2
    assert "loop_graph.json" in out.stderr


def test_loop_params_are_checked():
    assert loop_config(["min_age_s=3", "loop.top_k=2"]).top_k == 2
    for bad, msg in (["nope=1"], "NAME one of"), (["top_k=x"], "not a valid int"), \
            (["top_k=0"], "top_k"), (["enable=false"], "NAME one of"):
        with pytest.raises(BadRunOptions, match=msg):
            loop_config(bad)
