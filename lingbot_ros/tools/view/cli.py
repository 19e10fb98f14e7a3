"""lingbot-ros-view: the map, trajectories, camera and counters of a run in the browser.

    lingbot-ros-view RUN_DIR              a finished run's outputs (trajectory.tum,
                                          points.ply or map.ply, summary.json)
    lingbot-ros-view --ros [--node NAME]  a running node's topics, live
    lingbot-ros-offline INPUT --view      an offline run, live (its own option)

It listens on 127.0.0.1 only unless ``--host`` says otherwise (with a warning: anyone who
reaches the port sees the map and the camera). Needs the view extra
(``pip install 'lingbot_ros[view]'``); its web page comes from the installed package,
nothing is fetched from the internet. Ctrl-C stops it. docs/viewer.md.
"""
from __future__ import annotations

import argparse
import logging
import shlex
import signal
import sys
import threading
from pathlib import Path
from typing import Callable, Optional

from .run_dir import RunDirError, load_into, read_run_dir
from .scene import SceneModel
from .server import LOOPBACK, Viewer, ViewerUnavailable

__all__ = ["parse_args", "main", "serve", "view_command", "EXIT_FAILED"]

log = logging.getLogger("lingbot_ros.view")
EXIT_FAILED = 2
# lingbot-ros-view --ros: given by the console entry point (lingbot_ros/clients/view.py),
# which may import rclpy; called with (model, args), returns a context manager that feeds
# the model while it is entered.
RosSource = Callable[[SceneModel, argparse.Namespace], object]


def parse_args(argv):
    p = argparse.ArgumentParser(prog="lingbot-ros-view", description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("run_dir", nargs="?", help="a finished run's folder (lingbot-ros-offline "
                   "--out, or make demo's --out)")
    p.add_argument("--ros", action="store_true", help="show a running node's topics live")
    p.add_argument("--node", default="/lingbot_ros", help="--ros: the node's full name "
                   "(its namespace and name: its topics are NODE/pose, NODE/path, ...)")
    p.add_argument("--image", help="--ros: an image topic to show in the camera frustum "
                   "(the node's input, e.g. /camera/image_raw); default: none")
    p.add_argument("--host", default=LOOPBACK, help="address to listen on; another than "
                   "127.0.0.1 (e.g. 0.0.0.0) opens the viewer to the network")
    p.add_argument("--port", type=int, default=8080,
                   help="port (the next free one when taken; the URL is printed)")
    p.add_argument("--max-points", type=int, default=200_000, help="the most points shown "
                   "(a larger map is subsampled, the same points each time)")
    args = p.parse_args(argv)
    if args.ros == bool(args.run_dir):
        p.error("give either RUN_DIR or --ros")
    return args


def view_command(run_dir) -> str:
    """The command that opens ``run_dir`` in the viewer (the demos end by printing it): this
    environment's ``lingbot-ros-view`` (relative to the working folder when under it)."""
    script = Path(sys.executable).parent / "lingbot-ros-view"
    exe = str(script) if script.exists() else "lingbot-ros-view"
    folder = Path(run_dir).resolve()
    cwd = Path.cwd()
    exe, folder = (_relative(Path(exe), cwd) if script.exists() else exe), _relative(folder, cwd)
    return f"{exe} {shlex.quote(str(folder))}"


def _relative(path: Path, cwd: Path) -> str:
    try:
        return str(path.relative_to(cwd))
    except ValueError:
        return str(path)


def serve(model: SceneModel, args, what: str, up: str) -> Viewer:
    """Start the viewer on ``model`` and say where it is."""
    viewer = Viewer(model, host=args.host, port=args.port, up=up, title="lingbot-ros-view")
    print(f"lingbot-ros-view: {what} at {viewer.url} (Ctrl-C to stop)", flush=True)
    return viewer


def main(argv=None, ros_source: Optional[RosSource] = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    stop = threading.Event()
    # SIGTERM ends it as Ctrl-C does: the server stops, the port is freed
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        return _serve_until_stopped(args, ros_source, stop)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _serve_until_stopped(args, ros_source: Optional[RosSource], stop: threading.Event) -> int:
    try:
        model = SceneModel(max_points=args.max_points)
        if args.ros:
            if ros_source is None:
                log.error("--ros needs the lingbot-ros-view command (its ROS subscriber)")
                return EXIT_FAILED
            source = ros_source(model, args)
            with source:
                viewer = serve(model, args, f"node {args.node}", "+z")
                _wait(stop)
        else:
            run = read_run_dir(args.run_dir)
            load_into(model, run)
            viewer = serve(model, args, f"run {run.folder} ({len(run.poses)} poses, "
                           f"{len(run.xyz)} points)", run.up_axis)
            _wait(stop)
        viewer.close()
    except (RunDirError, ViewerUnavailable, OSError, ValueError) as exc:
        log.error("%s", " ".join(str(exc).split()))
        return EXIT_FAILED
    return 0


def _wait(stop: threading.Event) -> None:
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
