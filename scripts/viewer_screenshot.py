"""The README's picture: lingbot-ros-view on the synthetic room, saved from headless Chromium.

Renders the synthetic room (lingbot_ros.tools.synthetic), writes its ground truth as a run's
folder (trajectory.tum: the true camera path; points.ply: the renderer's depth back-projected,
coloured; no network weights ship with the repository, so these are the room as it is), opens
it with ``lingbot-ros-view`` and saves the page as a PNG.

    .venv/bin/python scripts/viewer_screenshot.py [--out docs/img/viewer.png]

Needs the view extra (viser) and Chromium (``apt-get install chromium``); every wait is
bounded. Deterministic scene; the PNG's pixels depend on Chromium's software renderer.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lingbot_ros.geometry import VoxelMap, frame_points, write_ply, write_tum  # noqa: E402
from lingbot_ros.tools.synthetic.render import render_sequence  # noqa: E402
from lingbot_ros.tools.view.browser import Chromium  # noqa: E402

FRAMES, WIDTH, HEIGHT = 90, 320, 240
FRAME = "room (x, y on the floor, z up): the synthetic room's ground truth"


class _Depth:
    """A rendered view as geometry.frame_points reads it (the ground truth's depth)."""

    def __init__(self, depth, rgb, K, c2w):
        self.depth, self.rgb, self.K_model, self.c2w = depth, rgb, K, c2w
        self.depth_conf = np.full_like(depth, 2.0)


def write_room_run(folder: Path) -> int:
    seq = render_sequence(FRAMES, WIDTH, HEIGHT)
    folder.mkdir(parents=True, exist_ok=True)
    write_tum(folder / "trajectory.tum", seq.stamps_ns, seq.c2w, frame=FRAME,
              header=["units: m", "scale: ground truth"])
    points = VoxelMap(0.03, 400_000)
    for i in range(0, FRAMES, 3):
        points.add(*frame_points(_Depth(seq.depths[i], seq.images[i], seq.K, seq.c2w[i]), 2))
    xyz, rgb = points.arrays()
    write_ply(folder / "points.ply", xyz, rgb, comments=["units: m"])
    (folder / "summary.json").write_text(json.dumps({
        "summary_format": "lingbot_ros.offline.summary/1", "frames_read": FRAMES,
        "frames_processed": FRAMES, "frames_skipped_by_source": 0,
        "keyframes": FRAMES // 2, "settings": {"input_size_hw": [HEIGHT, WIDTH]},
        "scale": {"source": "depth", "state": "locked", "metres_per_unit": 1.0}}, indent=2))
    return len(xyz)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(REPO / "docs" / "img" / "viewer.png"))
    p.add_argument("--port", type=int, default=8097)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lingbot-viewer-shot-") as tmp:
        run = Path(tmp) / "room"
        n = write_room_run(run)
        env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
        viewer = subprocess.Popen([sys.executable, "-m", "lingbot_ros.clients.view", str(run),
                                   "--port", str(args.port)], stdout=subprocess.PIPE,
                                  text=True, env=env)
        try:
            url = _url(viewer, timeout=60)
            with Chromium(width=1280, height=720) as chrome:
                chrome.open(url)
                chrome.wait_for("(() => { const t = window.__viserSceneTree; return t && "
                                "'/points' in t.getState() && '/camera' in t.getState(); })()",
                                timeout=60)
                chrome.evaluate(  # hide viser's notice about software WebGL (headless)
                    "(() => { const s = document.createElement('style'); s.textContent ="
                    " '.mantine-Notifications-root { display: none !important; }';"
                    " document.head.appendChild(s); return true; })()")
                shot = _small_png(chrome.screenshot_until(
                    lambda png: _settled(chrome, png), timeout=60))
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_bytes(shot)
        finally:
            viewer.terminate()
            viewer.wait(timeout=20)
    print(f"{args.out}: the synthetic room, {FRAMES} poses, {n} points "
          f"({Path(args.out).stat().st_size // 1024} KiB)")
    return 0


def _small_png(png: bytes, width: int = 960) -> bytes:
    """The screenshot scaled to ``width`` (area averaging), PNG at full compression."""
    import cv2
    image = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR)
    h, w = image.shape[:2]
    image = cv2.resize(image, (width, round(h * width / w)), interpolation=cv2.INTER_AREA)
    ok, data = cv2.imencode(".png", image, [cv2.IMWRITE_PNG_COMPRESSION, 9])
    assert ok
    return data.tobytes()


def _settled(chrome: Chromium, png: bytes) -> bool:
    """The scene is drawn in full colour (viser draws on demand: until its lighting is ready
    the first frames are pale), and still: the next screenshot, asked to render, is the same."""
    import cv2
    image = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR)
    scene = image[:, : image.shape[1] * 7 // 10]
    drawn = (255 - scene.min(axis=2)) > 30
    saturation = cv2.cvtColor(scene, cv2.COLOR_BGR2HSV)[..., 1][drawn]
    chrome.evaluate("window.__viserMutable.requestRender(), true")
    chrome.pump(0.5)
    return saturation.size > 1000 and float(saturation.mean()) > 80 and \
        png == chrome.screenshot()


def _url(proc: subprocess.Popen, timeout: float) -> str:
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if " at http://" in line:
            return line.split(" at ")[-1].split()[0]
    raise RuntimeError(f"lingbot-ros-view printed no address within {timeout} s")


if __name__ == "__main__":
    sys.exit(main())
