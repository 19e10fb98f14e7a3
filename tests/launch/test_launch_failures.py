"""``ros2 launch lingbot_ros lingbot_ros.launch.py`` as a robot integrator runs it (the real
launch system, in a child process), on the paths that must fail loudly: a bad checkpoint ends
the launch with a non-zero status, ``use_rviz:=true`` without rviz2 fails before anything
starts (no orphaned node), and a clean Ctrl-C ends everything with status 0.

Every launch is wrapped in ``timeout -s INT`` (one SIGINT: a second one can hang ros2 launch)
with a hard kill after; no ``ros2`` verb that starts the daemon is used.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.launch.launch_env import (launch_environment, require_launch, ros2_cli,
                                     tiny_params_file)

require_launch()

import psutil  # noqa: E402  -- installed with the launch system (launch_testing needs it)

LAUNCH = ("lingbot_ros", "lingbot_ros.launch.py")


def ros2_launch(tmp_path: Path, *arguments: str, seconds: int = 150) -> tuple[int, str, Path]:
    """Run ``ros2 launch`` with ``arguments`` in its own session; (status, output, params)."""
    env = launch_environment(tmp_path)
    params = tiny_params_file(tmp_path / "params.yaml")
    cmd = ["timeout", "--preserve-status", "-k", "20", "-s", "INT", str(seconds),
           ros2_cli(), "launch", *LAUNCH, f"params_file:={params}", *arguments]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, cwd=tmp_path)
    try:
        output, _ = proc.communicate(timeout=seconds + 40)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"ros2 launch did not end:\n{output[-4000:]}")
    return proc.returncode, output, params


def our_processes(params: Path) -> list[psutil.Process]:
    """Nodes started with this test's params file (``--params-file <it>``: only a node that
    launch_ros started has that in its command line)."""
    wanted = f"--params-file {params}"
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if wanted in " ".join(proc.info["cmdline"] or ()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_a_bad_checkpoint_fails_the_launch(tmp_path):
    bad = tmp_path / "lingbot-map.pt"
    bad.write_bytes(b"this is not a checkpoint\n" * 10)
    status, output, params = ros2_launch(tmp_path, f"checkpoint:={bad}")
    # The node logs why and exits 1 (autostart); the launch ends with it, non-zero.
    assert status != 0, output[-4000:]
    assert re.search(r"process has died \[pid \d+, exit code 1\b", output), output[-4000:]
    assert str(bad) in output, "the node names the checkpoint it could not load"
    assert "lingbot_ros_node-1 exited with status 1" in output, output[-4000:]
    assert not our_processes(params), "nothing left running"


def test_cuda_on_a_cpu_only_torch_fails_with_what_to_install(tmp_path):
    import torch
    if torch.version.cuda is not None or getattr(torch.version, "hip", None):
        pytest.skip(f"torch {torch.__version__} has CUDA: nothing to refuse")
    status, output, params = ros2_launch(tmp_path, "device:=cuda")
    assert status != 0, output[-4000:]
    assert "CPU-only torch" in output and "download.pytorch.org/whl/cu" in output, \
        output[-4000:]
    assert "Torch not compiled with CUDA enabled" not in output
    assert not our_processes(params)


def test_use_rviz_without_rviz2_starts_nothing(tmp_path):
    env = launch_environment(tmp_path)
    probe = subprocess.run(
        [ros2_cli(), "pkg", "prefix", "rviz2"], env=env, capture_output=True, text=True,
        timeout=60)
    if probe.returncode == 0:
        pytest.skip(f"rviz2 is installed here ({probe.stdout.strip()}): nothing to refuse")
    status, output, params = ros2_launch(tmp_path, "use_rviz:=true")
    assert status != 0, output[-4000:]
    assert "rviz2 is not installed" in output and "apt install ros-" in output, output
    assert "rviz2\n" not in output and "process started" not in output, \
        f"no process may start:\n{output}"
    assert not our_processes(params), "no orphaned node"


def test_ctrl_c_ends_the_launch_cleanly(tmp_path):
    # Started, configured, active; one SIGINT: the node and the launch exit 0.
    status, output, params = _launch_until(tmp_path, "active: listening on")
    assert status == 0, output[-4000:]
    assert "process has finished cleanly" in output, output[-4000:]
    assert "Caught exception" not in output, output[-4000:]
    assert "(SIGINT) again" not in output, "launch got one SIGINT, as from one Ctrl-C"
    assert not our_processes(params)


def _launch_until(tmp_path: Path, marker: str, timeout: float = 150.0):
    """Launch, wait for ``marker`` in the output, send one SIGINT; (status, output, params)."""
    env = launch_environment(tmp_path)
    params = tiny_params_file(tmp_path / "params.yaml")
    # The wrapper's own deadline only guards against an orphan: it covers the wait for the
    # marker (up to ``timeout``) and the wait after the SIGINT (60 s) with room to spare, so
    # a launch that became active late on a loaded machine is not killed while it exits.
    cmd = ["timeout", "--preserve-status", "-k", "20", "-s", "INT", str(int(timeout) + 120),
           ros2_cli(), "launch", *LAUNCH, f"params_file:={params}"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, cwd=tmp_path)
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        for line in proc.stdout:
            lines.append(line)
            if marker in line:
                break
            if time.monotonic() > deadline:
                break
        if not any(marker in line for line in lines):
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"no {marker!r} in the launch output:\n{''.join(lines)[-4000:]}")
        # One SIGINT, to ros2 launch itself, as a Ctrl-C in its terminal: sent to `timeout`
        # it reached launch twice (timeout passes it on, then signals its whole group: "again,
        # ignoring") and started timeout's 20 s kill-after, which a loaded machine overran
        # while launch was exiting (status -9).
        psutil.Process(proc.pid).children()[0].send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        rest, _ = proc.communicate()
        pytest.fail(f"ros2 launch did not end after SIGINT:\n{''.join(lines)[-4000:]}{rest}")
    return proc.returncode, "".join(lines) + rest, params
