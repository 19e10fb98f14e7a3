"""Bag frames for the offline runner: :class:`BagSource` (one image topic of a rosbag2
sqlite3/mcap bag or a ROS 1 bag), :func:`list_image_topics`, and the message decoders
:func:`image_from_msg` (raw ``sensor_msgs/Image``) and :func:`image_from_compressed`
(``sensor_msgs/CompressedImage``).

A :class:`BagSource` behaves like the other sources in :mod:`lingbot_ros.tools.sources.files` (which
opens one for a bag path in ``open_source``; both build on :mod:`lingbot_ros.tools.sources.frame`):
it iterates :class:`SourceFrame` with strictly increasing stamps, skips bad messages by reason into its
:class:`SourceStats`, and raises at construction when the bag or the topic cannot exist. Raw images
are decoded by :mod:`lingbot_ros.image_decode`, the decoder the ROS node uses too.

A truncated bag (a recorder killed mid-write), which ``rosbags`` refuses whole, is read by
:mod:`lingbot_ros.tools.sources.bag_salvage` up to the cut; a bag that breaks while it is read ends
there. Either way the source's ``ended_early`` says so after its frames (the offline runner
writes their outputs, says the input ended early and exits 3).

No rclpy: bags are read with ``rosbags`` (``AnyReader``: rosbag2 sqlite3 and mcap, and
ROS 1 bags), imported lazily; compressed images are decoded with OpenCV.
"""
from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from ...image_decode import ImageRejected, decode_depth, decode_image
from .bag_salvage import Salvage, salvage
from .depth_stream import DepthReading, DepthStream
from .frame import FrameSource, PathLike, SkippedFrame, SourceFrame, check_container, decode_bytes

__all__ = ["BagSource", "BagDepthStream", "DEFAULT_DEPTH_TOPIC", "is_depth_topic",
           "list_image_topics", "image_from_msg", "image_from_compressed", "depth_from_msg"]

# Where a RealSense (and the synthetic bags) put the depth registered to the colour image.
DEFAULT_DEPTH_TOPIC = "/camera/aligned_depth_to_color/image_raw"

IMAGE_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage",
               "sensor_msgs/Image", "sensor_msgs/CompressedImage")  # rosbag2, ROS 1


def image_from_msg(msg) -> tuple[np.ndarray, str]:
    """A deserialized ``sensor_msgs/Image`` -> (array view, encoding), decoded by
    :func:`lingbot_ros.image_decode.decode_image`: honours ``step`` (row padding) and
    ``is_bigendian`` (16-bit data comes back in native order). Raises SkippedFrame(reason) on
    a zero size, unknown encoding, bad step (short, or not a multiple of the channel size)
    or short data."""
    try:
        return decode_image(msg, aligned_step=True), str(msg.encoding)
    except ImageRejected as err:
        raise SkippedFrame(err.reason, err.detail) from None


def image_from_compressed(msg) -> tuple[np.ndarray, str]:
    """A deserialized ``sensor_msgs/CompressedImage`` -> (decoded array, bgr8/mono8/...)."""
    fmt = str(msg.format)
    if "compresseddepth" in fmt.lower():
        raise SkippedFrame("unknown_encoding", f"CompressedImage format {fmt!r} is a depth "
                                               f"image, not a camera image")
    data = np.asarray(msg.data, dtype=np.uint8).reshape(-1)
    if data.size == 0:
        raise SkippedFrame("zero_size", "CompressedImage with no data")
    check_container(data[:16].tobytes() + data[-16:].tobytes(), "CompressedImage")
    return decode_bytes(data, f"CompressedImage ({fmt!r})")


def is_depth_topic(topic: str) -> bool:
    """A topic named as a depth image (``.../depth/...``, ``aligned_depth...``): never picked
    as *the* camera image when a bag has one colour topic beside it."""
    return "depth" in topic.lower()


def depth_from_msg(msg) -> tuple[np.ndarray, str]:
    """A deserialized depth ``sensor_msgs/Image`` -> ((H, W) array, encoding): 16UC1/mono16
    (millimetres) or 32FC1 (metres), by the one decoder
    (:func:`lingbot_ros.image_decode.decode_depth`, the step aligned as for colour images).
    SkippedFrame(reason) for another encoding or a malformed message."""
    try:
        return decode_depth(msg, aligned_step=True)
    except ImageRejected as err:
        raise SkippedFrame(err.reason, err.detail) from None


def _typestore():
    from rosbags.typesys import Stores, get_typestore
    return get_typestore(Stores.ROS2_KILTED)


def _reader(path: Path):
    from rosbags.highlevel import AnyReader
    return AnyReader([path], default_typestore=_typestore())


class _Ended:
    """In place of the next message: the bag ended before its end (``reason``)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _corrupt(err: Exception) -> SkippedFrame:
    return SkippedFrame("corrupt", f"cannot deserialize: {type(err).__name__}: {err}")


def _deserialized(path, topic: str, rescue: Optional[Salvage] = None):
    """(index, bag time, message) for each message of ``topic``; a ``SkippedFrame`` in the
    message's place when it does not deserialize (the caller counts it and goes on); last,
    an :class:`_Ended` when the bag ended early. ``rescue``: read a truncated bag so."""
    if rescue is not None:
        store, n = _typestore(), 0
        for name, msgtype, t_bag, raw in rescue.messages():
            if name != topic:
                continue
            try:
                msg = store.deserialize_cdr(raw, msgtype)
            except Exception as err:  # rosbags raises several types on bad CDR
                msg = _corrupt(err)
            yield n, t_bag, msg
            n += 1
        if rescue.cut:
            yield _Ended(f"bag {path} is truncated ({rescue.cut})")
        return
    with _reader(path) as reader:
        conns = [c for c in reader.connections if c.topic == topic]
        n = 0
        try:
            for n, (conn, t_bag, raw) in enumerate(reader.messages(connections=conns)):
                try:
                    msg = reader.deserialize(raw, conn.msgtype)
                except Exception as err:  # rosbags raises several types on bad CDR
                    msg = _corrupt(err)
                yield n, t_bag, msg
        except Exception as err:  # a cut or damage the bag's index did not show
            yield _Ended(f"bag {path} broke off after message {n} of {topic}: "
                         f"{' '.join(str(err).split()) or type(err).__name__}")


def list_image_topics(path: PathLike) -> dict[str, str]:
    """``{topic: message type}`` of the Image / CompressedImage topics in a bag."""
    return {topic: msgtype for topic, (msgtype, _) in _image_topics(Path(path))[0].items()}


def _image_topics(path: Path) -> tuple[dict[str, tuple[str, int]], Optional[Salvage]]:
    """``{topic: (message type, message count)}`` of the image topics (from the index), and
    the :class:`Salvage` to read the bag with when ``rosbags`` refuses it (truncated: the
    counts are then those of the whole messages before the cut). ValueError (one line) for
    a bag that cannot be read at all."""
    if not path.exists():
        raise FileNotFoundError(f"bag {path} does not exist")
    topics: dict[str, tuple[str, int]] = {}
    try:
        with _reader(path) as reader:
            for c in reader.connections:
                if c.msgtype in IMAGE_TYPES:
                    _, count = topics.get(c.topic, (c.msgtype, 0))
                    topics[c.topic] = (c.msgtype, count + int(c.msgcount))
        return topics, None
    except ImportError:
        raise
    except Exception as err:  # rosbags' own types: a truncated or damaged bag
        why = " ".join(str(err).split()) or type(err).__name__
        rescue = salvage(path)
        found = rescue.topics() if rescue is not None else {}
        if not found:
            cut = f" ({rescue.cut})" if rescue is not None and rescue.cut else ""
            raise ValueError(f"bag {path} cannot be read: {why}{cut}") from None
    return {t: v for t, v in found.items() if v[0] in IMAGE_TYPES}, rescue


class BagSource(FrameSource):
    """Images from one topic of a bag (rosbag2 sqlite3/mcap directory or file, or ROS 1).

    ``topic=None`` picks the only image topic whose name does not say ``depth`` (an error
    lists them if there are several).
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
        self.header_stamps = stamps == "header"  # else the bag's record times
        indexed, self._rescue = _image_topics(self.path)
        topics = {t: m for t, (m, _) in indexed.items()}
        if topic is None:
            camera = {t: m for t, m in topics.items() if not is_depth_topic(t)}
            if len(camera) != 1:
                raise ValueError(f"bag {self.path} has {len(camera)} image topics (besides "
                                 f"depth ones); choose one with topic=: "
                                 f"{self._describe(topics)}")
            topic = next(iter(camera))
        elif topic not in topics:
            raise ValueError(f"bag {self.path} has no image topic {topic!r}; image topics: "
                             f"{self._describe(topics)}")
        self.topic, self.msgtype = topic, topics[topic]
        self.message_count = indexed[topic][1]  # from the bag's index: a progress total
        # read up to the cut (bag_salvage): what rosbags refused
        self.truncated = self._rescue is not None and self._rescue.cut is not None

    def __len__(self) -> int:
        """Messages on the topic (bad ones are skipped and counted while iterating)."""
        return self.message_count

    @staticmethod
    def _describe(topics: dict) -> str:
        return ", ".join(f"{t} ({m})" for t, m in sorted(topics.items())) or "none"

    def __iter__(self) -> Iterator[SourceFrame]:
        self._restart()
        compressed = self.msgtype.endswith("CompressedImage")
        for item in _deserialized(self.path, self.topic, self._rescue):
            if isinstance(item, _Ended):
                self.ended_early = item.reason
                break
            n, t_bag, msg = item
            where = f"{self.topic} message {n} (t={t_bag})"
            try:
                if isinstance(msg, SkippedFrame):
                    raise msg
                img, enc = (image_from_compressed(msg) if compressed
                            else image_from_msg(msg))
            except SkippedFrame as skip:
                self.stats.skip(skip.reason, f"{where}: {skip}")
                continue
            if self.header_stamps:
                st = msg.header.stamp
                stamp = int(st.sec) * 1_000_000_000 + int(st.nanosec)
            else:
                stamp = int(t_bag)
            frame = self._emit(stamp, img, enc, where)
            if frame is not None:
                yield frame


class BagDepthStream(DepthStream):
    """The depth images of one topic of a bag (16UC1/mono16 mm or 32FC1 m), read lazily
    beside the colour frames: ``nearest(stamp_ns)`` for non-decreasing stamps (the order the
    frames come in) reads ahead only until the first depth image after ``stamp_ns``. Stamps:
    the message headers. Bad messages are skipped and counted in ``stats``."""

    def __init__(self, path: PathLike, topic: str) -> None:
        super().__init__()
        self.path = Path(path)
        topics, self._rescue = _image_topics(self.path)
        if topic not in topics or topics[topic][0].endswith("CompressedImage"):
            listed = BagSource._describe({t: m for t, (m, _) in topics.items()})
            raise ValueError(f"bag {self.path} has no depth Image topic {topic!r}; image "
                             f"topics: {listed}")
        self.topic = topic
        self.message_count = topics[topic][1]
        self.description = f"depth topic {topic} ({self.message_count} messages)"
        self._messages: Optional[Iterator[DepthReading]] = None
        self._ahead: deque = deque()
        self._done = False

    def _read(self) -> Iterator[DepthReading]:
        for item in _deserialized(self.path, self.topic, self._rescue):
            if isinstance(item, _Ended):  # the colour source says so
                return
            n, t_bag, msg = item
            try:
                if isinstance(msg, SkippedFrame):
                    raise msg
                img, enc = depth_from_msg(msg)
            except SkippedFrame as skip:
                self.skip(skip.reason, f"{self.topic} message {n} (t={t_bag}): {skip}")
                continue
            st = msg.header.stamp
            yield DepthReading(int(st.sec) * 1_000_000_000 + int(st.nanosec), img, enc)

    def nearest(self, stamp_ns: int) -> Optional[DepthReading]:
        if self._messages is None:
            self._messages = self._read()
        stamp_ns = int(stamp_ns)
        while not self._done and (not self._ahead or self._ahead[-1].stamp_ns <= stamp_ns):
            try:
                self._ahead.append(next(self._messages))
            except StopIteration:
                self._done = True
        while len(self._ahead) >= 2 and self._ahead[1].stamp_ns <= stamp_ns:
            self._ahead.popleft()  # keep the last one before stamp_ns and those after
        if not self._ahead:
            return None
        return min(self._ahead, key=lambda r: abs(r.stamp_ns - stamp_ns))
