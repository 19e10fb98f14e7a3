"""The frame every offline source yields, and what every source shares to yield it.

Here: :class:`Frame` ``(stamp_ns: int, image: np.ndarray, encoding: str)``; the skip
bookkeeping (:data:`SKIP_REASONS`, :class:`SkippedFrame`, :class:`SourceStats`); the
:class:`FrameSource` base (strictly increasing stamps, stats); and the OpenCV decoding of
encoded image bytes (:func:`decode_bytes`, :func:`check_container`, :func:`cv_encoding`).
The sources themselves are in :mod:`lingbot_ros.tools.frame_sources` (image folder, video,
``open_source``) and :mod:`lingbot_ros.tools.bag_source` (bags), which both build on this one.

Skipped frames are logged on logger ``lingbot_ros.frame_sources`` (WARNING). No rclpy; OpenCV
is imported lazily.
"""
from __future__ import annotations

import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple, Optional, Union

import numpy as np

__all__ = ["Frame", "FrameSource", "PathLike", "SKIP_REASONS", "SkippedFrame", "SourceStats",
           "check_container", "cv_encoding", "decode_bytes", "require_cv2"]

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


class Frame(NamedTuple):
    stamp_ns: int
    image: np.ndarray
    encoding: str


class SkippedFrame(Exception):
    """A frame a source skips, with its reason (one of SKIP_REASONS); sources catch it and
    count it in their stats."""

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


class FrameSource:
    """Base of every source: stamp monotonicity and stats."""

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


def require_cv2():
    """The ``cv2`` module, or a RuntimeError that says how to install it."""
    try:
        import cv2
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise RuntimeError("frame sources need OpenCV: pip install opencv-python-headless") \
            from err
    return cv2


def cv_encoding(img: np.ndarray) -> str:
    """Encoding of an OpenCV-decoded array (BGR order)."""
    bits = {np.dtype(np.uint8): "8", np.dtype(np.uint16): "16"}.get(img.dtype)
    channels = 1 if img.ndim == 2 else img.shape[2]
    name = {1: "mono", 3: "bgr", 4: "bgra"}.get(channels)
    if bits is None or name is None:
        raise SkippedFrame("unknown_encoding", f"decoded image has dtype {img.dtype} and "
                                               f"{channels} channel(s)")
    return name + bits


def decode_bytes(buf: np.ndarray, what: str) -> tuple[np.ndarray, str]:
    """Encoded image bytes (PNG, JPEG, anything ``cv2.imdecode`` reads) -> (array, encoding).
    Raises SkippedFrame('corrupt') when OpenCV cannot decode them."""
    cv2 = require_cv2()
    try:
        img = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
    except cv2.error as err:
        raise SkippedFrame("corrupt", f"{what}: OpenCV cannot decode it ({err})") from None
    if img is None:
        raise SkippedFrame("corrupt", f"{what}: OpenCV cannot decode it")
    if img.ndim == 3 and img.shape[2] == 1:
        img = img[:, :, 0]
    return img, cv_encoding(img)


def check_container(data: bytes, what: str) -> None:
    """Catch truncation decoders only warn about: PNG needs its IEND chunk, JPEG its EOI."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        if b"IEND" not in data[-16:]:
            raise SkippedFrame("corrupt", f"{what}: truncated PNG (no IEND chunk at the end)")
    elif data[:2] == b"\xff\xd8":
        if b"\xff\xd9" not in data[-16:]:
            raise SkippedFrame("corrupt", f"{what}: truncated JPEG (no end-of-image marker)")
