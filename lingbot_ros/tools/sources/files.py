"""Frame sources for the offline runner: an image folder, a video file or a rosbag2/ROS 1 bag.

Here: the folder and video sources, :class:`ImageListSource` (the images a dataset's index lists,
with its stamps; the public dataset layouts in :mod:`lingbot_ros.tools.sources.datasets` build on
it), and :func:`open_source`, which picks the source for a path. :class:`SourceFrame`,
:class:`SourceStats`, :data:`SKIP_REASONS` and the OpenCV decoding helpers every source shares live
in :mod:`lingbot_ros.tools.sources.frame` (and are re-exported here); the bag source (``BagSource``,
``list_image_topics``, the message decoders) lives in :mod:`lingbot_ros.tools.sources.bag`.

Every source iterates :class:`SourceFrame` ``(stamp_ns: int, image: np.ndarray, encoding: str)``
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

import math
import re
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from ...geometry import parse_stamp
from .bag import BagSource
from .frame import (SKIP_REASONS, FrameSource, PathLike, SkippedFrame, SourceFrame, SourceStats,
                    check_container, cv_encoding, decode_bytes, require_cv2)

__all__ = ["SourceFrame", "SourceStats", "SkippedFrame", "SKIP_REASONS", "IMAGE_EXTENSIONS",
           "ImageFolderSource", "ImageListSource", "VideoSource", "name_stamp_kind",
           "open_source", "read_image_file", "stamp_from_name"]

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm",
                    ".pnm")


# --- image files -------------------------------------------------------------------------

def _natural_key(name: str):
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", name)]


# File stems that are times: seconds with a decimal point (TUM RGB-D ``1305031102.175304``),
# or an integer count of nanoseconds of 16 digits or more (EuRoC ``1403636579763555584``;
# 16 digits of seconds would be 300 million years, so such an integer is never seconds).
_SECONDS_NAME = re.compile(r"\d+\.\d+")
_NANOSECONDS_NAME = re.compile(r"\d{16,}")


def name_stamp_kind(stems) -> Optional[str]:
    """``'seconds'`` when every stem is seconds with a decimal point (``1305031102.175304``),
    ``'nanoseconds'`` when every stem is an integer of 16 digits or more
    (``1403636579763555584``), else None (no stems, or any other or a mixed naming)."""
    kinds = {("seconds" if _SECONDS_NAME.fullmatch(s) else
              "nanoseconds" if _NANOSECONDS_NAME.fullmatch(s) else None) for s in stems}
    return kinds.pop() if len(kinds) == 1 else None


def stamp_from_name(stem: str) -> int:
    """A file stem read as a time -> integer nanoseconds, exactly: an integer of 16 digits or
    more is nanoseconds (EuRoC), anything else is seconds in decimal (TUM RGB-D; read by
    :func:`lingbot_ros.geometry.parse_stamp`). ValueError when it is neither."""
    if _NANOSECONDS_NAME.fullmatch(stem):
        return int(stem)
    return parse_stamp(stem)


def read_image_file(path: Path) -> tuple[np.ndarray, str]:
    """An image file -> (array, encoding), by :func:`lingbot_ros.tools.sources.frame.decode_bytes`.
    Raises SkippedFrame: missing_file (it does not exist), unreadable (any other OS error),
    corrupt (truncated PNG/JPEG, undecodable), too_large, zero_size, unknown_encoding."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SkippedFrame("missing_file", f"{path}: no such file") from None
    except OSError as err:
        raise SkippedFrame("unreadable", f"{path}: {err}") from None
    check_container(data, str(path))
    return decode_bytes(np.frombuffer(data, np.uint8), str(path))


class ImageFolderSource(FrameSource):
    """Images in a folder, in natural order (``frame2`` before ``frame10``).

    Stamps: ``stamps='fps'`` -> ``round(i * 1e9 / fps)`` where i is the file's position in
    the sorted listing (a skipped file keeps its slot on the timeline); ``stamps='filename'``
    -> the file stem read by :func:`stamp_from_name`: seconds (TUM RGB-D style
    ``1305031102.175304.png``) or, for an integer of 16 digits or more, nanoseconds (EuRoC
    style ``1403636579763555584.png``), and the files are then ordered by that stamp (names
    that are no time come last and are skipped as ``bad_stamp``); ``stamps='auto'`` ->
    ``'filename'`` when :func:`name_stamp_kind` says every stem is a time, else ``'fps'``.
    ``self.stamps`` is the choice made (``'fps'`` or ``'filename'``), ``self.name_kind``
    what the names are (``'seconds'``, ``'nanoseconds'`` or None).
    """

    def __init__(self, path: PathLike, fps: float = 30.0, stamps: str = "fps") -> None:
        super().__init__()
        self.path = Path(path)
        if not self.path.is_dir():
            raise FileNotFoundError(f"image folder {self.path} does not exist")
        if stamps not in ("fps", "filename", "auto"):
            raise ValueError(f"stamps must be 'fps', 'filename' or 'auto', got {stamps!r}")
        if stamps != "filename" and not (isinstance(fps, (int, float)) and math.isfinite(fps)
                                         and fps > 0):
            raise ValueError(f"fps must be a positive number, got {fps!r}")
        files = sorted((p for p in self.path.iterdir()
                        if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS),
                       key=lambda p: _natural_key(p.name))
        if not files:
            raise FileNotFoundError(f"no images ({', '.join(IMAGE_EXTENSIONS)}) in {self.path}")
        self.name_kind = name_stamp_kind(p.stem for p in files)
        if stamps == "auto":
            stamps = "filename" if self.name_kind else "fps"
        self.fps, self.stamps = float(fps), stamps
        self._name_stamps: dict[Path, Optional[int]] = {}
        if stamps == "filename":  # in time order: decimal names do not sort naturally
            for p in files:
                try:
                    self._name_stamps[p] = stamp_from_name(p.stem)
                except ValueError:
                    self._name_stamps[p] = None
            timed = [p for p in files if self._name_stamps[p] is not None]
            timed.sort(key=lambda p: self._name_stamps[p])  # stable: ties keep natural order
            files = timed + [p for p in files if self._name_stamps[p] is None]
        self.files = files

    def __len__(self) -> int:
        return len(self.files)

    def _stamp(self, i: int, f: Path) -> int:
        if self.stamps == "fps":
            return round(i * 1e9 / self.fps)
        stamp = self._name_stamps.get(f)
        if stamp is None:
            raise SkippedFrame("bad_stamp", f"{f.name}: file name is not a time (seconds, or "
                                            f"integer nanoseconds of 16+ digits)")
        return stamp

    def __iter__(self) -> Iterator[SourceFrame]:
        self._restart()
        for i, f in enumerate(self.files):
            try:
                stamp = self._stamp(i, f)
                img, enc = read_image_file(f)
            except SkippedFrame as skip:
                self.stats.skip(skip.reason, str(skip))
                continue
            frame = self._emit(stamp, img, enc, str(f))
            if frame is not None:
                yield frame


class ImageListSource(FrameSource):
    """Images a dataset's index lists, with the index's stamps: ``entries`` is a sequence of
    ``(stamp_ns, path)`` in the index's order (``index`` names the index for messages).

    A listed file that does not exist is skipped as ``missing_file`` (counted, logged); a stamp
    not after the previous frame's as ``non_monotonic_stamp``; bad images as in
    :class:`ImageFolderSource`. ``len()`` is the number of entries."""

    def __init__(self, entries, index: str = "the index") -> None:
        super().__init__()
        self.entries = [(int(stamp), Path(path)) for stamp, path in entries]
        self.index = index
        if not self.entries:
            raise ValueError(f"{index} lists no images")

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[SourceFrame]:
        self._restart()
        for stamp, f in self.entries:
            try:
                img, enc = read_image_file(f)
            except SkippedFrame as skip:
                msg = str(skip)
                if skip.reason == "missing_file":
                    msg = f"{f}: listed in {self.index} but there is no such file"
                self.stats.skip(skip.reason, msg)
                continue
            frame = self._emit(stamp, img, enc, str(f))
            if frame is not None:
                yield frame


# --- video -------------------------------------------------------------------------------

class VideoSource(FrameSource):
    """A video file decoded with OpenCV (FFmpeg). Stamps from the container's presentation
    times (``CAP_PROP_POS_MSEC``, rounded to the nanosecond); when the container has
    none, ``round(i * 1e9 / fps)``. Frames are ``bgr8``. Fewer frames than the container
    announces are counted as ``missing_frames``."""

    def __init__(self, path: PathLike, fps: Optional[float] = None) -> None:
        super().__init__()
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"video file {self.path} does not exist")
        cv2 = require_cv2()
        cap = cv2.VideoCapture(str(self.path))
        try:
            if not cap.isOpened():
                raise ValueError(f"OpenCV cannot open video {self.path} (corrupt or unsupported "
                                 f"codec)")
            self.fps = float(fps or cap.get(cv2.CAP_PROP_FPS) or 30.0)
            self.frame_count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
        finally:
            cap.release()

    def __iter__(self) -> Iterator[SourceFrame]:
        self._restart()
        cv2 = require_cv2()
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
                    enc = cv_encoding(img)
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
                stamps: Optional[str] = None) -> FrameSource:
    """Pick the source for ``path``: a bag (a rosbag2 directory with ``metadata.yaml``,
    a ``.db3``/``.mcap``/``.bag`` file), an image folder, or a video file."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p} does not exist")
    is_bag = ((p.is_dir() and (p / "metadata.yaml").is_file())
              or p.suffix.lower() in (".db3", ".mcap", ".bag"))
    if is_bag:
        return BagSource(p, topic, stamps or "header")
    if p.is_dir():
        return ImageFolderSource(p, fps, stamps or "fps")
    return VideoSource(p, fps if stamps == "fps" else None)
