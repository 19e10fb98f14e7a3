"""Frame sources for the offline runner: an image folder, a video file or a rosbag2/ROS 1 bag.

Here: :class:`Frame`, :class:`SourceStats`, :data:`SKIP_REASONS`, the OpenCV decoding
helpers, the folder and video sources, and :func:`open_source`, which picks the source for a
path. The bag source (``BagSource``, ``list_image_topics``, the message decoders) lives in
:mod:`lingbot_ros.tools.bag_source`.

Every source iterates :class:`Frame` ``(stamp_ns: int, image: np.ndarray, encoding: str)``
with strictly increasing stamps; ``encoding`` is one that :mod:`lingbot_ros.preprocess`
understands (``bgr8``/``bgra8``/``mono8`` (and 16-bit) for OpenCV-decoded images, the message
encoding for raw ``sensor_msgs/Image``). Images may be read-only views: copy before writing.

Bad input is skipped, never fatal mid-run: each skipped frame is logged (logger
``lingbot_ros.frame_sources``, WARNING) and counted by reason in the source's
:class:`SourceStats` (``stats.skipped[reason]``, reasons in :data:`SKIP_REASONS`). Opening a
source that cannot exist (missing path, no images, an unreadable video, a bag without the
topic) raises at construction with a clear message. No rclpy; OpenCV is imported lazily.
"""
from __future__ import annotations

import logging
import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, NamedTuple, Optional, Union

import numpy as np

__all__ = ["Frame", "SourceStats", "SkippedFrame", "SKIP_REASONS", "IMAGE_EXTENSIONS",
           "ImageFolderSource", "VideoSource", "open_source"]

log = logging.getLogger("lingbot_ros.frame_sources")

PathLike = Union[str, os.PathLike]

SKIP_REASONS = (
    "unreadable",  # a file that cannot be read or decoded
    "corrupt",  # a file/payload whose structure is broken (truncated PNG/JPEG, bad CDR)
    "truncated",  # an Image message with fewer data bytes than step * height
    "bad_step",  # an Image message whose step is smaller than width * bytes per pixel
    "unknown_encoding",  # an Image/CompressedImage encoding we cannot turn into pixels
    "zero_size",  # width or height 0
    "non_monotonic_stamp",  # a stamp not after the previous yielded frame's
    "bad_stamp",  # a stamp that cannot be derived (e.g. a file name that is not a time)
    "missing_frames",  # a video that ended before its announced frame count
)

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm",
                    ".pnm")


class Frame(NamedTuple):
    stamp_ns: int
    image: np.ndarray
    encoding: str


class SkippedFrame(Exception):
    """Internal: a frame to skip, with its reason (one of SKIP_REASONS)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class SourceStats:
    """What a source yielded and what it skipped, by reason. ``messages`` keeps the first
    ``max_messages`` skip messages (all are logged)."""

    yielded: int = 0
    skipped: Counter = field(default_factory=Counter)
    messages: list = field(default_factory=list)
    max_messages: int = 100

    @property
    def total_skipped(self) -> int:
        return sum(self.skipped.values())

    def skip(self, reason: str, message: str, count: int = 1) -> None:
        assert reason in SKIP_REASONS, reason
        self.skipped[reason] += count
        log.warning("skipped %s: %s", reason, message)
        if len(self.messages) < self.max_messages:
            self.messages.append(f"{reason}: {message}")

    def summary(self) -> str:
        parts = ", ".join(f"{k} {v}" for k, v in sorted(self.skipped.items()))
        return f"{self.yielded} frames" + (f", skipped {parts}" if parts else ", none skipped")


class _Source:
    """Shared: stamp monotonicity and stats."""

    def __init__(self) -> None:
        self.stats = SourceStats()
        self._last_stamp: Optional[int] = None

    def _emit(self, stamp_ns: int, image: np.ndarray, encoding: str,
              where: str) -> Optional[Frame]:
        if image.size == 0 or min(image.shape[:2]) == 0:
            self.stats.skip("zero_size", f"{where}: image of shape {image.shape}")
            return None
        if self._last_stamp is not None and stamp_ns <= self._last_stamp:
            self.stats.skip("non_monotonic_stamp", f"{where}: stamp {stamp_ns} ns is not after "
                                                   f"the previous frame's {self._last_stamp} ns")
            return None
        self._last_stamp = stamp_ns
        self.stats.yielded += 1
        return Frame(int(stamp_ns), image, encoding)

    def _restart(self) -> None:
        self.stats = SourceStats()
        self._last_stamp = None


def _cv2():
    try:
        import cv2
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise RuntimeError("frame sources need OpenCV: pip install opencv-python-headless") \
            from err
    return cv2


def _cv_encoding(img: np.ndarray) -> str:
    """Encoding of an OpenCV-decoded array (BGR order)."""
    bits = {np.dtype(np.uint8): "8", np.dtype(np.uint16): "16"}.get(img.dtype)
    channels = 1 if img.ndim == 2 else img.shape[2]
    name = {1: "mono", 3: "bgr", 4: "bgra"}.get(channels)
    if bits is None or name is None:
        raise SkippedFrame("unknown_encoding", f"decoded image has dtype {img.dtype} and "
                                               f"{channels} channel(s)")
    return name + bits


def _decode_bytes(buf: np.ndarray, what: str) -> tuple[np.ndarray, str]:
    cv2 = _cv2()
    try:
        img = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
    except cv2.error as err:
        raise SkippedFrame("corrupt", f"{what}: OpenCV cannot decode it ({err})") from None
    if img is None:
        raise SkippedFrame("corrupt", f"{what}: OpenCV cannot decode it")
    if img.ndim == 3 and img.shape[2] == 1:
        img = img[:, :, 0]
    return img, _cv_encoding(img)


def _check_container(data: bytes, what: str) -> None:
    """Catch truncation decoders only warn about: PNG needs its IEND chunk, JPEG its EOI."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        if b"IEND" not in data[-16:]:
            raise SkippedFrame("corrupt", f"{what}: truncated PNG (no IEND chunk at the end)")
    elif data[:2] == b"\xff\xd8":
        if b"\xff\xd9" not in data[-16:]:
            raise SkippedFrame("corrupt", f"{what}: truncated JPEG (no end-of-image marker)")


# --- image folder ------------------------------------------------------------------------

def _natural_key(name: str):
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", name)]


class ImageFolderSource(_Source):
    """Images in a folder, in natural order (``frame2`` before ``frame10``).

    Stamps: ``stamps='fps'`` -> ``round(i * 1e9 / fps)`` where i is the file's position in
    the sorted listing (a skipped file keeps its slot on the timeline); ``stamps='filename'``
    -> the file stem read as seconds (TUM RGB-D style ``1305031102.175304.png``).
    """

    def __init__(self, path: PathLike, fps: float = 30.0, stamps: str = "fps") -> None:
        super().__init__()
        self.path = Path(path)
        if not self.path.is_dir():
            raise FileNotFoundError(f"image folder {self.path} does not exist")
        if stamps not in ("fps", "filename"):
            raise ValueError(f"stamps must be 'fps' or 'filename', got {stamps!r}")
        if stamps == "fps" and not (isinstance(fps, (int, float)) and math.isfinite(fps)
                                    and fps > 0):
            raise ValueError(f"fps must be a positive number, got {fps!r}")
        self.fps, self.stamps = float(fps), stamps
        self.files = sorted((p for p in self.path.iterdir()
                             if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS),
                            key=lambda p: _natural_key(p.name))
        if not self.files:
            raise FileNotFoundError(f"no images ({', '.join(IMAGE_EXTENSIONS)}) in {self.path}")

    def __len__(self) -> int:
        return len(self.files)

    def _stamp(self, i: int, f: Path) -> int:
        if self.stamps == "fps":
            return round(i * 1e9 / self.fps)
        from ..session.poses import parse_stamp
        try:
            return parse_stamp(f.stem)
        except ValueError:
            raise SkippedFrame("bad_stamp", f"{f.name}: file name is not a time in seconds") \
                from None

    def __iter__(self) -> Iterator[Frame]:
        self._restart()
        for i, f in enumerate(self.files):
            try:
                stamp = self._stamp(i, f)
                try:
                    data = f.read_bytes()
                except OSError as err:
                    raise SkippedFrame("unreadable", f"{f}: {err}") from None
                _check_container(data, str(f))
                img, enc = _decode_bytes(np.frombuffer(data, np.uint8), str(f))
            except SkippedFrame as skip:
                self.stats.skip(skip.reason, str(skip))
                continue
            frame = self._emit(stamp, img, enc, str(f))
            if frame is not None:
                yield frame


# --- video -------------------------------------------------------------------------------

class VideoSource(_Source):
    """A video file decoded with OpenCV (FFmpeg). Stamps from the container's presentation
    times (``CAP_PROP_POS_MSEC``, rounded to the nanosecond); when the container has
    none, ``round(i * 1e9 / fps)``. Frames are ``bgr8``. Fewer frames than the container
    announces are counted as ``missing_frames``."""

    def __init__(self, path: PathLike, fps: Optional[float] = None) -> None:
        super().__init__()
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"video file {self.path} does not exist")
        cv2 = _cv2()
        cap = cv2.VideoCapture(str(self.path))
        try:
            if not cap.isOpened():
                raise ValueError(f"OpenCV cannot open video {self.path} (corrupt or unsupported "
                                 f"codec)")
            self.fps = float(fps or cap.get(cv2.CAP_PROP_FPS) or 30.0)
            self.frame_count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
        finally:
            cap.release()

    def __iter__(self) -> Iterator[Frame]:
        self._restart()
        cv2 = _cv2()
        cap = cv2.VideoCapture(str(self.path))
        i = 0
        prev_ms = None
        use_pos = True
        try:
            while True:
                ok, img = cap.read()
                if not ok or img is None:
                    break
                ms = cap.get(cv2.CAP_PROP_POS_MSEC)
                # containers without timestamps report 0 (or repeat): fall back to i / fps
                if use_pos and i > 0 and (ms <= 0 or ms == prev_ms):
                    use_pos = False
                prev_ms = ms
                stamp = round(ms * 1e6) if use_pos else round(i * 1e9 / self.fps)
                try:
                    enc = _cv_encoding(img)
                except SkippedFrame as skip:
                    self.stats.skip(skip.reason, f"{self.path} frame {i}: {skip}")
                    i += 1
                    continue
                frame = self._emit(stamp, img, enc, f"{self.path} frame {i}")
                i += 1
                if frame is not None:
                    yield frame
        finally:
            cap.release()
        if self.frame_count and i < self.frame_count:
            self.stats.skip("missing_frames", f"{self.path}: decoded {i} of "
                                              f"{self.frame_count} announced frames "
                                              f"(truncated or corrupt)", self.frame_count - i)


def open_source(path: PathLike, topic: Optional[str] = None, fps: float = 30.0,
                stamps: Optional[str] = None) -> _Source:
    """Pick the source for ``path``: a bag (a rosbag2 directory with ``metadata.yaml``,
    a ``.db3``/``.mcap``/``.bag`` file), an image folder, or a video file."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p} does not exist")
    is_bag = ((p.is_dir() and (p / "metadata.yaml").is_file())
              or p.suffix.lower() in (".db3", ".mcap", ".bag"))
    if is_bag:
        from .bag_source import BagSource  # bag_source imports this module: import it here
        return BagSource(p, topic, stamps or "header")
    if p.is_dir():
        return ImageFolderSource(p, fps, stamps or "fps")
    return VideoSource(p, fps if stamps == "fps" else None)
