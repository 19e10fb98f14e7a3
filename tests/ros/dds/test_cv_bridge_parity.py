"""convert.py agrees with cv_bridge, array for array and byte for byte.

No cv_bridge can live in the main venv: the PyPI ``cv-bridge`` (a pure-Python port of the ROS 1
bridge; ROS 2's own has no wheels) calls numpy APIs removed in numpy 2.3 (``tostring``) and
assumes OpenCV 4's type numbering, while the main venv has newer numpy and OpenCV. So this test
builds a throwaway venv under build/ with cv-bridge, numpy<2.3 and opencv<5 (cached between runs,
keyed on SPEC), sees the main venv's ROS packages through a .pth placed *after* its own
site-packages, and runs tests/ros/cv_bridge_probe.py there.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from lingbot_ros.ros.intake.convert import ENCODINGS
from tests.ros.ros_helpers import REPO

SPEC = ["cv-bridge==1.13.0.post0", "numpy>=2,<2.3", "opencv-python-headless>=4.8,<5"]
VENV = REPO / "build" / "cv-bridge-venv"
# The port's own bugs, which keep it out of backend="auto": it maps 16UCn to 8-bit types, and
# its big-endian path calls ndarray.newbyteorder (gone since numpy 2.0; ROS 2's cv_bridge has
# the same call).
PORT_16UC = {"16UC1", "16UC3", "16UC4"}


def cv_bridge_python() -> Path:
    """The throwaway venv's python, created (under a lock) unless SPEC is already installed."""
    VENV.parent.mkdir(exist_ok=True)
    stamp = VENV / "lingbot-spec.txt"
    with open(VENV.parent / "cv-bridge-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.is_file() or stamp.read_text() != "\n".join(SPEC):
            shutil.rmtree(VENV, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
            run = subprocess.run([str(VENV / "bin" / "python"), "-m", "pip", "install", "-q",
                                  *SPEC], capture_output=True, text=True, timeout=600)
            assert run.returncode == 0, f"pip install {SPEC} failed:\n{run.stderr[-3000:]}"
            site = subprocess.run([str(VENV / "bin" / "python"), "-c",
                                   "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip()
            # ROS packages (rclpy, sensor_msgs) from the main venv, after the venv's own numpy.
            Path(site, "lingbot_main_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
            stamp.write_text("\n".join(SPEC))
    return VENV / "bin" / "python"


@pytest.fixture(scope="module")
def probe() -> dict:
    python = cv_bridge_python()
    site = Path(sysconfig.get_paths()["purelib"])
    # The ROS wheels' shared libraries, as the main venv's bootstrapper would set them.
    libs = [str(Path(sys.prefix) / "lib")] + [str(p) for p in sorted(site.glob("ros_*.libs"))]
    env = dict(os.environ, PYTHONPATH=str(REPO), _ROS_WHEELS_BOOTSTRAP_COMPLETE="1",
               LD_LIBRARY_PATH=os.pathsep.join(libs + [os.environ.get("LD_LIBRARY_PATH", "")]))
    run = subprocess.run([str(python), "-W", "ignore", str(REPO / "tests/ros/cv_bridge_probe.py")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_probe_ran_on_numpy_below_2_3(probe):
    major, minor = map(int, probe["numpy"].split(".")[:2])
    assert (major, minor) < (2, 3)


@pytest.mark.parametrize("encoding", sorted(set(ENCODINGS) - PORT_16UC))
def test_cv_bridge_gives_identical_arrays_and_messages(probe, encoding):
    result = probe["results"][encoding]
    assert result == {"numpy_ok": True, "decode_equal": True, "backend_equal": True,
                      "encode_equal": True}, result


@pytest.mark.parametrize("encoding", sorted(PORT_16UC))
def test_the_ports_16_bit_bug_is_caught_not_passed_on(probe, encoding):
    # backend="cv_bridge" notices the 8-bit result and rejects the frame (decode_failed)
    # instead of handing wrong pixels on; numpy decodes it correctly.
    result = probe["results"][encoding]
    assert result["numpy_ok"] and not result["decode_equal"], result
    assert result["backend_rejected"] == "decode_failed", result


@pytest.mark.parametrize("encoding", sorted(e for e, f in ENCODINGS.items() if f.dtype == "uint16"))
def test_big_endian_failures_become_decode_failed(probe, encoding):
    result = probe["results"][f"{encoding}/be"]
    assert result["numpy_ok"], result
    assert "newbyteorder" in result["decode_error"], result
    assert result["backend_rejected"] == "decode_failed", result
