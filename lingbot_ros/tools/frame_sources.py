"""Frame sources for the offline runner: an image folder, a video file or a rosbag2/ROS 1 bag.

Every source iterates :class:`Frame` ``(stamp_ns: int, image: np.ndarray, encoding: str)``
with strictly increasing stamps; ``encoding`` is one that :mod:`lingbot_ros.preprocess`
understands (``bgr8``/``bgra8``/``mono8`` (and 16-bit) for OpenCV-decoded images, the message
encoding for raw ``sensor_msgs/Image``). Images may be read-only views: copy before writing.

Bad input is skipped, never fatal mid-run: each skipped frame is logged (logger
``lingbot_ros.frame_sources``, WARNING) and counted by reason in the source's
:class:`SourceStats` (``stats.skipped[reason]``, reasons in :data:`SKIP_REASONS`). Opening a
source that cannot exist (missing path, no images, an unreadable video, a bag without the
topic) raises at construction with a clear message -- :func:`list_image_topics` says what a
bag does have.

No rclpy: bags are read with ``rosbags`` (``AnyReader``: rosbag2 sqlite3 and mcap, and
ROS 1 bags), images decoded with OpenCV. Both are imported lazily.
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

__all__ = ["Frame", "SourceStats", "SkippedFrame", "SKIP_REASONS", "IMAGE_EXTENSIONS", "ImageFolderSource",
           "VideoSource", "BagSource", "list_image_topics", "image_from_msg",
           "image_from_compressed", "open_source"]

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

# raw sensor_msgs/Image encodings -> (channels, numpy dtype)
_RAW_ENCODINGS = {
    "rgb8": (3, np.uint8), "bgr8": (3, np.uint8), "rgba8": (4, np.uint8),
    "bgra8": (4, np.uint8), "mono8": (1, np.uint8), "8UC1": (1, np.uint8),
    "8UC3": (3, np.uint8), "8UC4": (4, np.uint8),
    "rgb16": (3, np.uint16), "bgr16": (3, np.uint16), "rgba16": (4, np.uint16),
    "bgra16": (4, np.uint16), "mono16": (1, np.uint16), "16UC1": (1, np.uint16),
    "16UC3": (3, np.uint16), "16UC4": (4, np.uint16),
}
IMAGE_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage",
               "sensor_msgs/Image", "sensor_msgs/CompressedImage")  # rosbag2, ROS 1


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


# --- bags --------------------------------------------------------------------------------

def image_from_msg(msg) -> tuple[np.ndarray, str]:
    """A deserialized ``sensor_msgs/Image`` -> (array view, encoding). Honours ``step``
    (row padding) and ``is_bigendian`` (16-bit data is byte-swapped to native order).
    Raises SkippedFrame(reason) on a zero size, unknown encoding, bad step or short data."""
    h, w, enc = int(msg.height), int(msg.width), str(msg.encoding)
    if h == 0 or w == 0:
        raise SkippedFrame("zero_size", f"Image of {w}x{h}")
    if enc not in _RAW_ENCODINGS:
        raise SkippedFrame("unknown_encoding", f"Image encoding {enc!r} (supported: "
                                               f"{', '.join(_RAW_ENCODINGS)})")
    ch, dt = _RAW_ENCODINGS[enc]
    dt = np.dtype(dt)
    row = w * ch * dt.itemsize
    step = int(msg.step)
    if step < row or step % dt.itemsize:
        raise SkippedFrame("bad_step", f"Image step {step} < width {w} x {ch} channel(s) x "
                                       f"{dt.itemsize} byte(s) = {row}" if step < row else
                           f"Image step {step} is not a multiple of {dt.itemsize}")
    data = np.asarray(msg.data, dtype=np.uint8).reshape(-1)
    if data.size < step * h:
        raise SkippedFrame("truncated", f"Image data has {data.size} bytes, {h} rows of step "
                                        f"{step} need {step * h}")
    if dt.itemsize > 1:
        dt = dt.newbyteorder(">" if msg.is_bigendian else "<")
    rows = np.lib.stride_tricks.as_strided(data, shape=(h, row), strides=(step, 1))
    img = np.ascontiguousarray(rows).view(dt).reshape(h, w, ch) if dt.itemsize > 1 else \
        rows.reshape(h, w, ch)
    if dt.itemsize > 1 and not dt.isnative:
        img = img.astype(dt.newbyteorder("="))
    return (img[:, :, 0] if ch == 1 else img), enc


def image_from_compressed(msg) -> tuple[np.ndarray, str]:
    """A deserialized ``sensor_msgs/CompressedImage`` -> (decoded array, bgr8/mono8/...)."""
    fmt = str(msg.format)
    if "compresseddepth" in fmt.lower():
        raise SkippedFrame("unknown_encoding", f"CompressedImage format {fmt!r} is a depth "
                                               f"image, not a camera image")
    data = np.asarray(msg.data, dtype=np.uint8).reshape(-1)
    if data.size == 0:
        raise SkippedFrame("zero_size", "CompressedImage with no data")
    _check_container(data[:16].tobytes() + data[-16:].tobytes(), "CompressedImage")
    return _decode_bytes(data, f"CompressedImage ({fmt!r})")


def _reader(path: Path):
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore
    return AnyReader([path], default_typestore=get_typestore(Stores.ROS2_KILTED))


def list_image_topics(path: PathLike) -> dict[str, str]:
    """``{topic: message type}`` of the Image / CompressedImage topics in a bag."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"bag {path} does not exist")
    with _reader(path) as reader:
        return {c.topic: c.msgtype for c in reader.connections if c.msgtype in IMAGE_TYPES}


class BagSource(_Source):
    """Images from one topic of a bag (rosbag2 sqlite3/mcap directory or file, or ROS 1).

    ``topic=None`` picks the only image topic (an error lists them if there are several).
    Stamps: ``stamps='header'`` (the message's ``header.stamp``, default) or ``'bag'`` (the
    record time). Undeserializable messages count as ``corrupt``.
    """

    def __init__(self, path: PathLike, topic: Optional[str] = None,
                 stamps: str = "header") -> None:
        super().__init__()
        self.path = Path(path)
        if stamps not in ("header", "bag"):
            raise ValueError(f"stamps must be 'header' or 'bag', got {stamps!r}")
        self.stamp_source = stamps
        topics = list_image_topics(self.path)
        if topic is None:
            if len(topics) != 1:
                raise ValueError(f"bag {self.path} has {len(topics)} image topics; choose one "
                                 f"with topic=: {self._describe(topics)}")
            topic = next(iter(topics))
        elif topic not in topics:
            raise ValueError(f"bag {self.path} has no image topic {topic!r}; image topics: "
                             f"{self._describe(topics)}")
        self.topic, self.msgtype = topic, topics[topic]

    @staticmethod
    def _describe(topics: dict) -> str:
        return ", ".join(f"{t} ({m})" for t, m in sorted(topics.items())) or "none"

    def __iter__(self) -> Iterator[Frame]:
        self._restart()
        compressed = self.msgtype.endswith("CompressedImage")
        with _reader(self.path) as reader:
            conns = [c for c in reader.connections if c.topic == self.topic]
            for n, (conn, t_bag, raw) in enumerate(reader.messages(connections=conns)):
                where = f"{self.topic} message {n} (t={t_bag})"
                try:
                    try:
                        msg = reader.deserialize(raw, conn.msgtype)
                    except Exception as err:  # rosbags raises several types on bad CDR
                        raise SkippedFrame("corrupt", f"cannot deserialize: "
                                                      f"{type(err).__name__}: {err}") from None
                    img, enc = (image_from_compressed(msg) if compressed
                                else image_from_msg(msg))
                except SkippedFrame as skip:
                    self.stats.skip(skip.reason, f"{where}: {skip}")
                    continue
                if self.stamp_source == "header":
                    st = msg.header.stamp
                    stamp = int(st.sec) * 1_000_000_000 + int(st.nanosec)
                else:
                    stamp = int(t_bag)
                frame = self._emit(stamp, img, enc, where)
                if frame is not None:
                    yield frame


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
        return BagSource(p, topic, stamps or "header")
    if p.is_dir():
        return ImageFolderSource(p, fps, stamps or "fps")
    return VideoSource(p, fps if stamps == "fps" else None)
