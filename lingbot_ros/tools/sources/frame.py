"""The frame every offline source yields, and what every source shares to yield it.

Here: :class:`SourceFrame` ``(stamp_ns: int, image: np.ndarray, encoding: str)``; the skip
bookkeeping (:data:`SKIP_REASONS`, :class:`SkippedFrame`, :class:`SourceStats`); the
:class:`FrameSource` base (strictly increasing stamps, stats); and the decoding of encoded
image bytes (:func:`decode_bytes`, :func:`check_container`, :func:`cv_encoding`), which is the
ROS node's: :func:`lingbot_ros.image_header.decode_compressed` (the size read from the header
and checked before decoding, unknown formats refused) and
:func:`lingbot_ros.image_decode.opencv_encoding` (the one table of decoded encodings).
The sources themselves are in :mod:`lingbot_ros.tools.sources.files` (image folder, video,
``open_source``) and :mod:`lingbot_ros.tools.sources.bag` (bags), which both build on this one.

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

from ...image_decode import ImageRejected, opencv_encoding, require_cv2
from ...image_header import decode_compressed

__all__ = ["FrameSource", "MAX_IMAGE_PIXELS", "PathLike", "SKIP_REASONS", "SkippedFrame",
           "SourceFrame", "SourceStats", "Strided", "check_container", "cv_encoding",
           "decode_bytes", "require_cv2"]

log = logging.getLogger("lingbot_ros.frame_sources")

PathLike = Union[str, os.PathLike]

SKIP_REASONS = (
    "unreadable",  # a file that cannot be read or decoded
    "corrupt",  # a file/payload whose structure is broken (truncated PNG/JPEG, bad CDR), or
    # encoded bytes in no format whose header lingbot_ros.image_header reads (never decoded)
    "truncated",  # an Image message with fewer data bytes than step * height
    "bad_step",  # an Image message whose step is smaller than width * bytes per pixel
    "unknown_encoding",  # an Image/CompressedImage encoding we cannot turn into pixels
    "too_large",  # an encoded image whose header declares more than MAX_IMAGE_PIXELS
    "zero_size",  # width or height 0
    "non_monotonic_stamp",  # a stamp not after the previous yielded frame's
    "bad_stamp",  # a stamp that cannot be derived (e.g. a file name that is not a time)
    "missing_frames",  # a video that ended before its announced frame count
    "missing_file",  # an image a dataset's index lists (rgb.txt, data.csv, ...) that is absent
)

# Encoded images (files, CompressedImage) declaring more pixels than this are skipped
# (too_large) before decoding. Larger than the node's default (4096 x 4096): offline input
# may be full-resolution photos; still a bound on what a few bytes can make us allocate.
MAX_IMAGE_PIXELS = 8192 * 8192

# image_header's reasons -> ours
_SKIP_REASON = {"decode_failed": "corrupt", "unknown_format": "corrupt",
                "too_large": "too_large", "zero_size": "zero_size",
                "unknown_encoding": "unknown_encoding"}


class SourceFrame(NamedTuple):
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
        # Why the input stopped before its end (a truncated bag), after an iteration; None
        # when it was read to the end.
        self.ended_early: Optional[str] = None

    def _emit(self, stamp_ns: int, image: np.ndarray, encoding: str,
              where: str) -> Optional[SourceFrame]:
        if image.size == 0 or min(image.shape[:2]) == 0:
            self.stats.skip("zero_size", f"{where}: image of shape {image.shape}")
            return None
        if self._last_stamp is not None and stamp_ns <= self._last_stamp:
            self.stats.skip("non_monotonic_stamp", f"{where}: stamp {stamp_ns} ns is not after "
                                                   f"the previous frame's {self._last_stamp} ns")
            return None
        self._last_stamp = stamp_ns
        self.stats.yielded += 1
        return SourceFrame(int(stamp_ns), image, encoding)

    def _restart(self) -> None:
        self.stats = SourceStats()
        self._last_stamp = None
        self.ended_early = None


def cv_encoding(img: np.ndarray) -> str:
    """Encoding of an OpenCV-decoded array (BGR order): mono8/16, bgr8/16, bgra8/16, from
    :func:`lingbot_ros.image_decode.opencv_encoding`. SkippedFrame('unknown_encoding') else."""
    try:
        return opencv_encoding(img)
    except ImageRejected as err:
        raise SkippedFrame("unknown_encoding", err.detail) from None


def decode_bytes(buf, what: str, *,
                 max_pixels: int = MAX_IMAGE_PIXELS) -> tuple[np.ndarray, str]:
    """Encoded image bytes -> (array, encoding), by
    :func:`lingbot_ros.image_header.decode_compressed`: the size is read from the header and
    checked before decoding. Raises SkippedFrame: corrupt (a bad header, a format we do not
    read -- not decoded --, or OpenCV cannot decode it), too_large (declares over
    ``max_pixels``; not decoded), zero_size, unknown_encoding (e.g. a float image). The
    message starts with image_header's reason (decode_failed, unknown_format, ...)."""
    require_cv2()
    try:
        return decode_compressed(buf, max_pixels=max_pixels)
    except ImageRejected as err:
        raise SkippedFrame(_SKIP_REASON[err.reason], f"{what}: {err}") from None


def check_container(data: bytes, what: str) -> None:
    """Catch truncation decoders only warn about: PNG needs its IEND chunk, JPEG its EOI."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        if b"IEND" not in data[-16:]:
            raise SkippedFrame("corrupt", f"{what}: truncated PNG (no IEND chunk at the end)")
    elif data[:2] == b"\xff\xd8":
        if b"\xff\xd9" not in data[-16:]:
            raise SkippedFrame("corrupt", f"{what}: truncated JPEG (no end-of-image marker)")


class Strided:
    """Every ``stride``-th frame of ``source`` (the first, then each ``stride`` frames it
    yields on: ``--stride``, the benchmarks' frame sampling, e.g. 7-Scenes at 5). Its
    length (the progress total) is the source's divided, rounded up; its ``stats`` and
    ``ended_early`` are the source's (the frames left out are not skips)."""

    def __init__(self, source, stride: int):
        if isinstance(stride, bool) or not isinstance(stride, int) or stride < 1:
            raise ValueError(f"stride must be an integer >= 1, got {stride!r}")
        self.source, self.stride = source, stride

    def __iter__(self):
        for i, frame in enumerate(self.source):
            if i % self.stride == 0:
                yield frame

    def __len__(self) -> int:
        return -(-len(self.source) // self.stride)  # ceil: TypeError when it has no length

    @property
    def frame_count(self) -> Optional[int]:
        count = getattr(self.source, "frame_count", None)
        return -(-count // self.stride) if count else None

    def __getattr__(self, name):  # stats, ended_early, ...: the source's own
        return getattr(self.source, name)
