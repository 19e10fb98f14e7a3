"""lingbot-ros-offline --view: the run shown as it streams (the viewer serving, no browser:
test_viewer_browser.py opens the page)."""
import json
import socket

import pytest

from lingbot_ros.session import StreamingSession
from lingbot_ros.tools.offline.cli import load_model, main, parse_args, session_config
from lingbot_ros.tools.offline.run_spec import OfflineRun
from lingbot_ros.tools.synthetic.render import render_sequence
from lingbot_ros.tools.synthetic.writers import write_image_folder

pytest.importorskip("viser", reason="the view extra (make test installs it)")
FAST = ["--width", "56", "--scale-frames", "2", "--window", "4", "--keyframes", "every_n",
        "--no-progress"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SourceFrame:
    def __init__(self, image):
        self.image, self.encoding = image, "rgb8"


def test_offline_view_shows_every_pose_keyframes_points_and_the_latest_image():
    from lingbot_ros.tools.view.live import OfflineView
    seq = render_sequence(6, 80, 60)
    args = OfflineRun.from_namespace(parse_args(["unused", *FAST]))
    model, _ = load_model(args)
    session = StreamingSession(model, session_config(args, return_depth=True))
    view = OfflineView("127.0.0.1", free_port(), max_points=5000, point_stride=1, min_conf=0.0)
    assert view.viewer.url.startswith("http://127.0.0.1:")
    processed = keyframes = 0
    for i, (image, stamp) in enumerate(zip(seq.images, seq.stamps_ns)):
        results = session.push(image, int(stamp), "rgb8")
        processed += len(results)
        keyframes += sum(r.keyframe for r in results)
        view.frame(SourceFrame(image), results, session.info(), i + 1, 0, None)
    view.close()
    snap = view.model.snapshot()
    assert snap.poses_seen == processed == session.info().frames_processed > 0
    assert len(snap.keyframes) == keyframes > 0
    assert 0 < len(snap.points_xyz) <= 5000
    assert snap.camera is not None and snap.camera.image.shape == (60, 80, 3)
    assert snap.counters.frames_in == 6 and snap.counters.processed == processed


def test_the_offline_runner_with_view(tmp_path, capsys):
    written = write_image_folder(render_sequence(4, 80, 60), tmp_path / "frames")
    out = tmp_path / "out"
    port = free_port()
    assert main([str(written.path), "--out", str(out), "--view", "--view-port", str(port),
                 *FAST]) == 0
    printed = capsys.readouterr().out
    assert f"lingbot-ros-offline: live view at http://127.0.0.1:{port}" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["frames_processed"] == 4
    # --view asks the session for depth (the viewer's points), not for a points.ply
    assert not (out / "points.ply").exists()
    with socket.socket() as s:  # the viewer was closed with the run: its port is free
        s.bind(("127.0.0.1", port))
