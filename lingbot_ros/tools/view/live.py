"""A stream shown as it runs: the hand-over from a stream's thread to the viewer's.

The stream's thread (the offline runner's loop, a ROS subscriber's callbacks) calls
:meth:`Handover.put_pose`, :meth:`Handover.put_keyframe` and :meth:`Handover.put_latest`:
each only appends a reference or replaces one under a lock, whatever the viewer is doing
(the cost per frame: ``scripts/bench_viewer.py``, docs/viewer.md). A feeder thread takes
what was handed over and does the work (a keyframe's points from its depth, the image's
thumbnail, the scene's bounds) into the :class:`~.scene.SceneModel`, which the viewer draws.

What is bounded and what is not lost:

- poses: every pose is kept (up to ``max_pending`` waiting; past that the oldest waiting
  ones are dropped and counted in :attr:`Handover.poses_lost`);
- keyframes: the last ``max_keyframes_pending`` waiting keyframes (their points are what
  the viewer computes; older ones waiting are dropped when the viewer lags);
- the latest frame (camera, image, counters, scale): one slot, replaced by each frame.

:class:`OfflineView` is ``lingbot-ros-offline --view``'s hook over it.
"""
from __future__ import annotations

import collections
import logging
import math
import threading
from dataclasses import dataclass
from typing import Any, Optional

from ...geometry import frame_points
from .scene import SceneModel, ScaleView

__all__ = ["Latest", "Handover", "Feeder", "OfflineView", "offline_view", "scale_view",
           "add_view_args"]

log = logging.getLogger("lingbot_ros.view")


@dataclass(frozen=True)
class Latest:
    """The newest frame's facts (what the latest-value slot holds)."""
    c2w: Any  # (4, 4) camera-to-world, or None (no pose for this frame)
    K: Any  # (3, 3) intrinsics of ``image``, or None
    hw: tuple[int, int]
    image: Any  # (H, W, 3) uint8, or None
    counters: dict  # frames_in, processed, dropped, keyframes
    scale: Optional[ScaleView]


class Handover:
    """The bounded hand-over (module doc). Thread-safe; the stream's side never waits for
    the viewer: each put is an append or a swap under a lock held for that alone."""

    def __init__(self, max_pending: int = 100_000, max_keyframes_pending: int = 4) -> None:
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._poses: collections.deque = collections.deque()
        self._max_pending = max_pending
        self._keyframes: collections.deque = collections.deque(maxlen=max_keyframes_pending)
        self._latest: Optional[Latest] = None
        self._cleared = False
        self.poses_lost = 0
        self.keyframes_lost = 0

    def put_pose(self, c2w, keyframe: bool) -> None:
        with self._lock:
            if len(self._poses) >= self._max_pending:
                self._poses.popleft()
                self.poses_lost += 1
            self._poses.append((c2w, keyframe))
        self._ready.set()

    def put_keyframe(self, depth_frame) -> None:
        """A keyframe whose points the viewer computes (a FrameResult with its depth)."""
        with self._lock:
            if len(self._keyframes) == self._keyframes.maxlen:
                self.keyframes_lost += 1
            self._keyframes.append(depth_frame)
        self._ready.set()

    def put_latest(self, latest: Latest) -> None:
        with self._lock:
            self._latest = latest
        self._ready.set()

    def put_clear(self) -> None:
        """The stream restarted (a reset): the viewer forgets what it shows."""
        with self._lock:
            self._poses.clear()
            self._keyframes.clear()
            self._cleared = True
        self._ready.set()

    def wake(self) -> None:
        """End a :meth:`take` that is waiting (the feeder is stopping)."""
        self._ready.set()

    def take(self, timeout: float):
        """``(cleared, poses, keyframes, latest)`` handed over since the last take (waits
        up to ``timeout`` seconds for something; all empty then)."""
        self._ready.wait(timeout)
        with self._lock:
            self._ready.clear()
            out = (self._cleared, list(self._poses), list(self._keyframes), self._latest)
            self._poses.clear()
            self._keyframes.clear()
            self._latest, self._cleared = None, False
        return out


class Feeder:
    """The thread that moves what was handed over into the scene (module doc)."""

    def __init__(self, handover: Handover, model: SceneModel, point_stride: int = 4,
                 min_conf: float = 1.5) -> None:
        self.handover, self.model = handover, model
        self._stride, self._min_conf = point_stride, min_conf
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lingbot-ros-view-feed",
                                        daemon=True)
        self._thread.start()

    def close(self, drain: bool = True) -> None:
        """Stop the thread; with ``drain``, what was handed over is moved in first."""
        self._stop.set()
        self.handover.wake()
        self._thread.join(timeout=10)
        if drain:
            self.feed_once(0.0)

    def feed_once(self, timeout: float) -> None:
        cleared, poses, keyframes, latest = self.handover.take(timeout)
        model = self.model
        if cleared:
            model.clear()
        for c2w, keyframe in poses:
            model.add_pose(c2w, keyframe)
        for frame in keyframes:
            xyz, rgb = frame_points(frame, self._stride, self._min_conf)
            if len(xyz):
                model.add_points(xyz, rgb)
        if latest is not None:
            if latest.c2w is not None and latest.K is not None:
                model.set_camera(latest.c2w, latest.K, latest.hw, latest.image)
            model.set_counters(**latest.counters)
            if latest.scale is not None:
                model.set_scale(latest.scale)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.feed_once(0.25)
            except Exception:  # noqa: BLE001 -- a bad frame must not end the viewer
                log.exception("the viewer could not take a frame")


def scale_view(estimate, units: str = "model units") -> Optional[ScaleView]:
    """A :class:`~lingbot_ros.scale.ScaleEstimate` as the viewer shows it."""
    if estimate is None:
        return None
    mpu = float(estimate.metres_per_unit)
    return ScaleView(state=str(getattr(estimate.state, "value", estimate.state)).upper(),
                     source=str(estimate.source),
                     metres_per_unit=mpu if math.isfinite(mpu) else None, units=units)


class OfflineView:
    """``lingbot-ros-offline --view``: the run in the browser while it streams. The runner
    calls :meth:`frame` once per input frame and :meth:`close` at the end; the viewer keeps
    serving the finished run until Ctrl-C when ``hold`` is set."""

    def __init__(self, host: str, port: int, max_points: int, point_stride: int,
                 min_conf: float) -> None:
        from .server import Viewer  # viser: the optional extra, imported only here
        self.model = SceneModel(max_points=max_points)
        self.handover = Handover()
        self.viewer = Viewer(self.model, host=host, port=port, up="-y",
                             title="lingbot-ros-offline")
        self.feeder = Feeder(self.handover, self.model, point_stride, min_conf)
        log.info("viewer: %s (the run, live)", self.viewer.url)
        print(f"lingbot-ros-offline: live view at {self.viewer.url}", flush=True)

    def frame(self, frame, results, info, frames_in: int, dropped: int, scale=None) -> None:
        """After each input frame: its results (FrameResults, possibly none), the session's
        ``info()``, the frames read and dropped so far, the scale's estimate. Appends and
        swaps references only (the points and the thumbnail are the feeder's work)."""
        handover = self.handover
        for r in results:
            handover.put_pose(r.c2w, r.keyframe)
            if r.keyframe and r.depth is not None:
                handover.put_keyframe(r)
        last = results[-1] if results else None
        image = frame.image if frame is not None and getattr(frame.image, "ndim", 0) == 3 \
            else None
        if image is not None and frame.encoding in ("bgr8", "bgra8"):
            image = image[:, :, 2::-1]  # a view: the feeder's thumbnail copies it
        K = None if last is None else last.K
        hw = image.shape[:2] if image is not None else (
            (0, 0) if K is None else (round(2 * K[1, 2] + 1), round(2 * K[0, 2] + 1)))
        handover.put_latest(Latest(
            c2w=None if last is None else last.c2w, K=K, hw=hw, image=image,
            counters={"frames_in": frames_in, "processed": info.frames_processed,
                      "dropped": dropped, "keyframes": info.keyframes},
            scale=scale_view(scale)))

    def close(self, hold: bool = False) -> None:
        """The run ended: the last frames shown; with ``hold``, serve until Ctrl-C."""
        self.feeder.close(drain=True)
        self.viewer.sync()
        if hold:
            print(f"lingbot-ros-offline: the run is done; its view stays at "
                  f"{self.viewer.url} until Ctrl-C", flush=True)
            try:
                threading.Event().wait()
            except KeyboardInterrupt:
                pass
        self.viewer.close()


def offline_view(args) -> Optional[OfflineView]:
    """The live viewer ``args`` (an OfflineRun) asks for with ``--view``, else None."""
    if not getattr(args, "view", False):
        return None
    return OfflineView(args.view_host, args.view_port, args.view_max_points,
                       args.ply_stride, args.min_conf)


def add_view_args(p) -> None:
    """``lingbot-ros-offline``'s ``--view`` options."""
    p.add_argument("--view", action="store_true", help="show the run in the browser as it "
                   "streams (lingbot-ros-view's scene; needs the view extra: "
                   "pip install 'lingbot_ros[view]')")
    p.add_argument("--view-host", default="127.0.0.1", help="--view: the address it listens "
                   "on (another than 127.0.0.1 opens it to the network: a warning says so)")
    p.add_argument("--view-port", type=int, default=8080, help="--view: its port (the next "
                   "free one when taken; the URL is printed)")
    p.add_argument("--view-max-points", type=int, default=200_000,
                   help="--view: the most points shown")
    p.add_argument("--view-keep", action="store_true", help="--view: keep serving the "
                   "finished run until Ctrl-C")
