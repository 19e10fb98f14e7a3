"""What the launch tests need around the real launch system: where it comes from, an ament
prefix that installs this package as colcon would, the tiny model's params file and a bag.

The launch system is test tooling, never part of the repository: ``scripts/setup_ros.sh``
installs it into the venv from ``../shared/ros2-launch`` (or a sourced ROS install provides
it). Without either, ``require_launch()`` skips with the reason.

``ament_prefix(root)`` lays out ``root`` like ``colcon build --symlink-install`` would for the
package: the ament index marker, ``share/lingbot_ros/{launch,config}/...`` and ``package.xml``
linked file by file (as setup.py's data_files install them) to the checkout's (the real launch
file), and ``lib/lingbot_ros/<script>`` linked to the venv's console scripts. With it first on
``AMENT_PREFIX_PATH``, ``ros2 launch lingbot_ros lingbot_ros.launch.py`` and
``FindPackageShare`` / ``Node(package="lingbot_ros")`` resolve as on a robot.
"""
from __future__ import annotations

import os
import random
import shutil
import sys
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "lingbot_ros"
SCRIPTS = ("lingbot_ros_node", "lingbot-ros-replay")
IMAGE_TOPIC = "/camera/image_raw"
BAG_START_NS = 1_700_000_000 * 10**9
# Tiny model on tiny images, a bare camera (no TF needed), nothing dropped: each frame takes
# tens of milliseconds on a CPU.
TINY_PARAMS: dict[str, Any] = {
    "model.preset": "tiny", "device": "cpu", "input.width": 56,
    "session.num_scale_frames": 2, "cache.window": 4, "warmup": False, "frames.base": "",
    "qos.image": "reliable", "qos.image_depth": 100, "queue_size": 100,
}
LAUNCH_MISSING = ("the ROS 2 launch system is not installed: run `bash scripts/setup_ros.sh "
                  ".venv` with ../shared/ros2-launch beside the checkout, or source a ROS 2 "
                  "install (/opt/ros/<distro>/setup.bash)")


def launch_available() -> Optional[str]:
    """None when launch, launch_ros and launch_testing import; else why not."""
    try:
        import launch  # noqa: F401
        import launch_ros.actions  # noqa: F401
        import launch_testing  # noqa: F401
    except ImportError as exc:
        return f"{LAUNCH_MISSING} ({exc})"
    return None


def require_launch() -> None:
    """Skip without the launch system, except under CI (``CI`` set): ``make test`` installs
    it there (scripts/setup_ros.sh), so its absence is a failure, not a reason to skip."""
    reason = launch_available()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI: {reason}", pytrace=False)
        pytest.skip(reason, allow_module_level=True)


def ament_prefix(root: Path) -> Path:
    """An ament prefix holding this package (links to the checkout and the venv's scripts)."""
    root.mkdir(parents=True, exist_ok=True)
    index = root / "share" / "ament_index" / "resource_index" / "packages"
    index.mkdir(parents=True, exist_ok=True)
    (index / PACKAGE).touch()
    share = root / "share" / PACKAGE
    share.mkdir(parents=True, exist_ok=True)
    _link(share / "package.xml", REPO / "package.xml")
    for folder, pattern in (("launch", "*.launch.py"), ("config", "*.yaml"),
                            ("config", "*.rviz")):
        (share / folder).mkdir(exist_ok=True)
        for source in (REPO / folder).glob(pattern):  # files, as setup.py installs them
            _link(share / folder / source.name, source)
    lib = root / "lib" / PACKAGE
    lib.mkdir(parents=True, exist_ok=True)
    bindir = Path(sys.executable).parent
    for script in SCRIPTS:
        target = bindir / script
        if not target.is_file():
            pytest.fail(f"{target} is missing: install the package (make venv)")
        _link(lib / script, target)
    return root


def _link(link: Path, target: Path) -> None:
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


def launch_environment(tmp: Path) -> dict[str, str]:
    """The environment of a launch: the prefix first on AMENT_PREFIX_PATH, loopback discovery
    in a random domain, logs under ``tmp``, one torch thread (a loaded 2-core machine)."""
    prefix = ament_prefix(tmp / "install")
    env = dict(os.environ)
    for name in ("ROS_LOCALHOST_ONLY", "ROS_STATIC_PEERS", "RMW_IMPLEMENTATION"):
        env.pop(name, None)
    base = env.get("AMENT_PREFIX_PATH") or sys.prefix
    env.update({
        "AMENT_PREFIX_PATH": os.pathsep.join([str(prefix), base]),
        "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
        "ROS_DOMAIN_ID": str(random.randint(1, 101)),
        "ROS_LOG_DIR": str(tmp / "ros_log"),
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
    })
    return env


def tiny_params_file(path: Path, **params: Any) -> Path:
    """The installed params file with TINY_PARAMS and ``params`` over it."""
    data = yaml.safe_load((REPO / "config" / "lingbot_ros.yaml").read_text())
    data["/**"]["ros__parameters"].update({**TINY_PARAMS, **params})
    path.write_text(yaml.safe_dump(data))
    return path


def synthetic_bag(path: Path, frames: int, storage: str = "mcap") -> list[int]:
    """A synthetic rosbag2 (rgb8 images + camera_info at 30 Hz); its image stamps (ns)."""
    from lingbot_ros.tools.synthetic.render import render_sequence
    from lingbot_ros.tools.synthetic.writers import write_bag
    seq = render_sequence(frames, 80, 60, start_ns=BAG_START_NS)
    write_bag(seq, path, storage=storage, topic=IMAGE_TOPIC)
    return [int(t) for t in seq.stamps_ns]


def ros2_cli() -> str:
    """The ``ros2`` command of this environment (the venv's, or a sourced install's)."""
    path = shutil.which("ros2", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                      os.environ.get("PATH", "")]))
    if path is None:
        if os.environ.get("CI"):  # installed by make test there: missing is a failure
            pytest.fail(f"CI: no ros2 command: {LAUNCH_MISSING}", pytrace=False)
        pytest.skip(f"no ros2 command: {LAUNCH_MISSING}")
    return path
