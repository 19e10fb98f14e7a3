"""lingbot-ros-view in a real browser: headless Chromium (the distribution's package) opens
the page of a synthetic run while ``lingbot-ros-offline --view`` shows it, then the page of
the finished run's folder (``lingbot-ros-view RUN_DIR``), and reads what the viewer's own
client holds.

Skipped only where Chromium (or the view extra) is missing outside CI; under CI (CI=true)
``make test`` installs both (scripts/setup_browser.sh, setup.py's view extra), and a missing
one fails the test."""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pytest

from lingbot_ros.geometry import read_ply, read_tum
from lingbot_ros.tools.synthetic.render import render_sequence
from lingbot_ros.tools.synthetic.writers import write_image_folder
from lingbot_ros.tools.view.browser import Chromium, find_chromium

REPO = Path(__file__).resolve().parents[2]
UNDER_CI = os.environ.get("CI") == "true"
FRAMES = 8
MAX_POINTS = 200_000  # the viewer's default budget


def _require(what: str, present: bool) -> None:
    if not present:
        if UNDER_CI:
            pytest.fail(f"{what} is missing under CI: make test installs it")
        pytest.skip(f"{what} is missing (make test installs it)")


def _viser_present() -> bool:
    try:
        import viser  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def live_run(tmp_path_factory):
    """``lingbot-ros-offline ... --view --view-keep`` on the synthetic room: the run shown as
    it streams, then kept on show; its folder is a finished run (points.ply, summary.json).
    Yields ``(run folder, the live page's URL)``; Ctrl-C (SIGINT) ends it."""
    _require("Chromium (apt-get install chromium)", find_chromium() is not None)
    _require("viser (setup.py's view extra)", _viser_present())
    root = tmp_path_factory.mktemp("viewer_run")
    written = write_image_folder(render_sequence(FRAMES, 80, 60), root / "frames")
    out = root / "run"
    proc = Process([sys.executable, "-m", "lingbot_ros.tools.offline.cli", str(written.path),
                    "--out", str(out), "--ply", "--ply-stride", "1", "--min-conf", "0",
                    "--width", "56", "--scale-frames", "2", "--window", "4", "--keyframes",
                    "every_n", "--no-progress", "--view", "--view-port", str(_free_port()),
                    "--view-keep"])
    try:
        url = proc.url("its view stays at", timeout=300)
        yield out, url
    finally:
        rc = proc.stop(signal.SIGINT)
    assert rc == 0, "".join(proc.lines)[-3000:]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Process:
    """A command as a user starts it, its output read as it comes; ``url`` waits (bounded)
    for the line that gives the page's address."""

    def __init__(self, argv: list) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [str(REPO), os.environ.get("PYTHONPATH")])), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     env=env, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    def url(self, marker: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if marker in line and "http://" in line:
                    return "http://" + line.split("http://")[-1].split()[0]
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no '{marker}' line with a URL within {timeout} s: "
                             f"{''.join(self.lines)[-3000:]}")

    def stop(self, sig=signal.SIGTERM) -> int:
        """``sig`` (SIGTERM: the viewer stops as on Ctrl-C), then the exit status."""
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise


def test_the_live_run_in_headless_chromium(live_run):
    run_dir, url = live_run
    summary = json.loads((run_dir / "summary.json").read_text())
    keyframes = summary["keyframes"]
    assert urlparse(url).hostname == "127.0.0.1"
    with Chromium(width=1280, height=800) as chrome:
        chrome.open(url)
        state = chrome.wait_for(
            "(() => { const s = %s; return s && s.nodes['/keyframes'] && "
            "s.text.includes('poses: %d') ? s : null; })()" % (_state_js(), FRAMES),
            timeout=60)
        nodes = state["nodes"]
        assert nodes["/trajectory/front_end/poses"]["count"] == FRAMES
        assert nodes["/keyframes"]["count"] == keyframes * 8 * 2  # 8 edges a frustum
        assert nodes["/points"]["count"] > 0
        assert nodes["/camera"]["image_bytes"] > 0  # the latest frame's image
        assert f"frames in: {FRAMES}" in state["text"]
        assert f"keyframes: {keyframes}" in state["text"]
        png = chrome.screenshot_until(_drawn, timeout=30)
        assert chrome.console_errors == [], chrome.console_errors
    _assert_not_blank(png)


def test_a_finished_run_in_headless_chromium(live_run):
    finished_run = live_run[0]
    _, poses = read_tum(finished_run / "trajectory.tum")
    xyz, _ = read_ply(finished_run / "points.ply")
    assert len(poses) == FRAMES and len(xyz) > 0
    viewer = Process([sys.executable, "-m", "lingbot_ros.clients.view", str(finished_run),
                      "--port", str(_free_port())])
    try:
        url = viewer.url("lingbot-ros-view: ", timeout=60)
        assert urlparse(url).hostname == "127.0.0.1"  # loopback unless --host
        with Chromium(width=1280, height=800) as chrome:
            chrome.open(url)
            poses_node = "/trajectory/front_end/poses"
            state = chrome.wait_for(
                "(() => { const t = window.__viserSceneTree; if (!t) return null;"
                " const s = t.getState(); return ['/points', '/camera', '%s']"
                ".every((n) => n in s) && document.body.innerText.includes('poses: %d'); })()"
                % (poses_node, FRAMES), timeout=60)
            assert state
            state = chrome.wait_for(
                "(() => { const s = %s; return s && s.rendered_points >= %d ? s : null; })()"
                % (_state_js(), FRAMES + 1), timeout=60)
            nodes = state["nodes"]
            # the viewer's own scene: one point per trajectory pose, the run's point cloud
            assert nodes[poses_node]["count"] == FRAMES
            assert nodes["/points"]["count"] == min(len(xyz), MAX_POINTS) > 0
            assert nodes["/trajectory/front_end"]["type"] == "LineSegmentsMessage"
            assert nodes["/camera"]["type"] == "CameraFrustumMessage"
            assert state["rendered_points"] >= FRAMES + nodes["/points"]["count"]
            for text in (f"frames in: {FRAMES}", f"processed: {FRAMES}", "dropped: 0",
                         f"points: {len(xyz)}", "scale: UNKNOWN (source none)"):
                assert text in state["text"], (text, state["text"])
            png = chrome.screenshot_until(_drawn, timeout=30)  # bounded: objects fade in
            assert chrome.console_errors == [], chrome.console_errors
            foreign = [u for u in chrome.requests if urlparse(u).scheme in ("http", "https", "ws",
                       "wss") and urlparse(u).hostname != "127.0.0.1"]
            assert foreign == [], f"the page fetched from outside: {foreign}"
        _assert_not_blank(png)
    finally:
        rc = viewer.stop()
    assert rc == 0, "".join(viewer.lines)[-2000:]


def _state_js() -> str:
    from lingbot_ros.tools.view.browser import SCENE_STATE_JS
    return SCENE_STATE_JS.strip()


def _decode(png: bytes) -> np.ndarray:
    import cv2
    image = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None and image.shape[:2] == (800, 1280)
    return image


def _drawn_pixels(png: bytes) -> int:
    """Pixels of the 3D canvas (away from the panel and the notices) that differ clearly
    from its background."""
    scene = _decode(png)[200:, :900].astype(np.int16)
    background = np.median(scene.reshape(-1, 3), axis=0)
    return int((np.abs(scene - background).max(axis=2) > 60).sum())


def _drawn(png: bytes) -> bool:
    return _drawn_pixels(png) > 200


def _assert_not_blank(png: bytes) -> None:
    image = _decode(png)
    assert float(image.std()) > 5.0, "the screenshot is blank"
    assert _drawn(png), f"the 3D view is empty ({_drawn_pixels(png)} pixels drawn)"
