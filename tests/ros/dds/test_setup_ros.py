"""scripts/setup_ros.sh: stamps make a repeated run a no-op; a missing venv is refused."""
import subprocess
import sys
import time
from pathlib import Path

from tests.ros.ros_helpers import REPO

SCRIPT = REPO / "scripts" / "setup_ros.sh"


def run(venv) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), str(venv)], capture_output=True, text=True,
                          timeout=600)


def test_second_run_is_a_no_op():
    venv = Path(sys.prefix)
    first = run(venv)  # brings this venv up to date (a no-op too when make already ran it)
    assert first.returncode == 0, first.stderr[-3000:]
    t0 = time.monotonic()
    second = run(venv)
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout == f"setup_ros: ROS 2 ready in {venv.resolve()}\n"
    assert time.monotonic() - t0 < 20
    stamps = venv / ".lingbot_ros-ros"
    for name in ("wheels", "lingbot_ros_interfaces"):
        assert (stamps / f"{name}.key").read_text().strip()
    assert (stamps / "lingbot_ros_interfaces.manifest").read_text().count("\n") > 50


def test_refuses_a_missing_venv(tmp_path):
    result = run(tmp_path / "nope")
    assert result.returncode == 2 and "no venv" in result.stderr
