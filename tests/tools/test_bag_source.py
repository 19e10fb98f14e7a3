"""Bag sources on generated rosbag2s (sqlite3 and mcap): raw and compressed image topics,
every encoding, and every kind of bad message -- skipped, counted by reason, never fatal."""
import cv2
import numpy as np
import pytest

from lingbot_ros.preprocess import preprocess
from lingbot_ros.tools.sources.bag import BagSource, list_image_topics
from lingbot_ros.tools.sources.files import SKIP_REASONS
from lingbot_ros.tools.synthetic.render import render_sequence
from lingbot_ros.tools.synthetic.writers import write_bag
from tests.tools.test_frame_sources import as_rgb


@pytest.fixture(scope="module")
def seq():
    return render_sequence(12, width=64, height=48)


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_bag_raw_and_compressed_topics(seq, tmp_path, storage):
    out = write_bag(seq, tmp_path / "b", storage=storage,
                    compressed_topic="/camera/image_raw/compressed")
    assert list_image_topics(out.path) == {"/camera/image_raw": "sensor_msgs/msg/Image",
                                           "/camera/image_raw/compressed":
                                               "sensor_msgs/msg/CompressedImage",
                                           # the synthetic bags carry the aligned depth
                                           "/camera/aligned_depth_to_color/image_raw":
                                               "sensor_msgs/msg/Image"}
    raw = BagSource(out.path, "/camera/image_raw")
    assert len(raw) == len(seq)  # from the bag's index, before reading: a progress total
    frames = list(raw)
    assert [f.stamp_ns for f in frames] == seq.stamps_ns.tolist()
    assert all(f.encoding == "rgb8" for f in frames)
    assert np.array_equal(np.stack([f.image for f in frames]), seq.images)
    comp = BagSource(out.path, "/camera/image_raw/compressed")
    cframes = list(comp)
    assert len(cframes) == len(seq) and cframes[0].encoding == "bgr8"
    assert np.abs(as_rgb(cframes[2]).astype(int) - seq.images[2]).mean() < 10
    with pytest.raises(ValueError, match="has 2 image topics \\(besides depth ones\\).*"
                                         "/camera/image_raw/compressed"):
        BagSource(out.path)
    with pytest.raises(ValueError, match="no image topic '/cam'.*/camera/image_raw \\("):
        BagSource(out.path, "/cam")


def write_messages(path, storage, messages):
    """messages: (topic, msgtype, t_ns, msg or raw bytes)."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore
    ts = get_typestore(Stores.ROS2_KILTED)
    plugin = {"sqlite3": StoragePlugin.SQLITE3, "mcap": StoragePlugin.MCAP}[storage]
    with Writer(path, version=9, storage_plugin=plugin) as w:
        conns = {}
        for topic, msgtype, t, msg in messages:
            if topic not in conns:
                conns[topic] = w.add_connection(topic, msgtype, typestore=ts)
            raw = msg if isinstance(msg, bytes) else bytes(ts.serialize_cdr(msg, msgtype))
            w.write(conns[topic], t, raw)
    return ts


def image_msg(ts, t_ns, arr, encoding, step=None, bigendian=0, data=None, width=None):
    T = ts.types
    h = arr.shape[0]
    w = arr.shape[1] if width is None else width
    row = (arr.reshape(h, -1).view(np.uint8).reshape(h, -1) if arr.size
           else np.zeros((h, 0), np.uint8))
    step = row.shape[1] if step is None else step
    if data is None:
        data = np.zeros((h, step), np.uint8)
        data[:, : row.shape[1]] = row[:, :step]
        data = data.reshape(-1)
    hdr = T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](
        sec=t_ns // 10**9, nanosec=t_ns % 10**9), frame_id="cam")
    return T["sensor_msgs/msg/Image"](header=hdr, height=h, width=w, encoding=encoding,
                                      is_bigendian=bigendian, step=step, data=data)


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_bag_encodings_and_every_kind_of_bad_message(tmp_path, storage):
    from rosbags.typesys import Stores, get_typestore
    ts = get_typestore(Stores.ROS2_KILTED)
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 255, (6, 5, 3), np.uint8)
    mono16 = rng.integers(0, 65535, (6, 5), np.uint16)
    ms = 10**6
    good = image_msg(ts, 1 * ms, rgb, "rgb8")
    cut_raw = bytes(ts.serialize_cdr(good, "sensor_msgs/msg/Image"))[:40]
    padded = image_msg(ts, 6 * ms, rgb, "bgr8", step=20)  # 15 bytes of pixels + 5 padding
    big = image_msg(ts, 7 * ms, mono16.astype(">u2"), "mono16", bigendian=1)
    msgs = [
        ("/img", "sensor_msgs/msg/Image", 1 * ms, good),
        ("/img", "sensor_msgs/msg/Image", 2 * ms, cut_raw),  # truncated CDR: corrupt
        ("/img", "sensor_msgs/msg/Image", 3 * ms, image_msg(ts, 3 * ms, rgb, "rgb8", step=10)),
        ("/img", "sensor_msgs/msg/Image", 4 * ms,
         image_msg(ts, 4 * ms, rgb, "rgb8", data=np.zeros(50, np.uint8))),  # short data
        ("/img", "sensor_msgs/msg/Image", 5 * ms, image_msg(ts, 5 * ms, rgb, "yuv422")),
        ("/img", "sensor_msgs/msg/Image", 6 * ms, padded),
        ("/img", "sensor_msgs/msg/Image", 7 * ms, big),
        ("/img", "sensor_msgs/msg/Image", 8 * ms, image_msg(ts, 8 * ms, rgb[:0], "rgb8", width=0)),
        ("/img", "sensor_msgs/msg/Image", 9 * ms, image_msg(ts, 3 * ms, rgb, "rgb8")),  # stamp back
        ("/img", "sensor_msgs/msg/Image", 10 * ms, image_msg(ts, 7 * ms, rgb, "rgb8")),  # repeated
        ("/img", "sensor_msgs/msg/Image", 11 * ms,
         image_msg(ts, 11 * ms, np.dstack([rgb, rgb[..., :1]]), "rgba8")),
        ("/img", "sensor_msgs/msg/Image", 12 * ms,
         image_msg(ts, 12 * ms, mono16, "16UC1", step=12)),  # little-endian, padded rows
        ("/img", "sensor_msgs/msg/Image", 13 * ms,
         image_msg(ts, 13 * ms, mono16, "mono16", step=11)),  # odd step for 16-bit
        ("/img", "sensor_msgs/msg/Image", 14 * ms, image_msg(ts, 14 * ms, rgb[..., 0], "mono8")),
    ]
    path = tmp_path / "bad"
    write_messages(path, storage, msgs)
    src = BagSource(path)  # the only image topic
    frames = list(src)  # never raises
    assert [f.stamp_ns // ms for f in frames] == [1, 6, 7, 11, 12, 14]
    assert dict(src.stats.skipped) == {"corrupt": 1, "bad_step": 2, "truncated": 1,
                                       "unknown_encoding": 1, "zero_size": 1,
                                       "non_monotonic_stamp": 2}
    assert src.stats.yielded + src.stats.total_skipped == len(msgs)
    assert set(src.stats.skipped) <= set(SKIP_REASONS)
    by_stamp = {f.stamp_ns // ms: f for f in frames}
    assert np.array_equal(by_stamp[1].image, rgb)
    assert by_stamp[6].encoding == "bgr8" and np.array_equal(by_stamp[6].image, rgb)  # step
    assert by_stamp[7].image.dtype == np.uint16 and np.array_equal(by_stamp[7].image, mono16)
    assert by_stamp[7].image.dtype.isnative
    assert by_stamp[11].encoding == "rgba8" and by_stamp[11].image.shape == (6, 5, 4)
    assert np.array_equal(by_stamp[12].image, mono16)
    assert np.array_equal(by_stamp[14].image, rgb[..., 0])
    for f in frames:  # everything yielded is something preprocess accepts
        preprocess(f.image, f.encoding)
    msg_text = " | ".join(src.stats.messages)
    assert "step 10 < width 5 x 3" in msg_text and "'yuv422'" in msg_text
    assert "cannot deserialize" in msg_text and "not after the previous" in msg_text


def test_bad_compressed_messages_and_bag_stamps(tmp_path):
    from rosbags.typesys import Stores, get_typestore
    ts = get_typestore(Stores.ROS2_KILTED)
    T = ts.types
    img = np.random.default_rng(1).integers(0, 255, (8, 8, 3), np.uint8)

    def comp(t, data, fmt="jpeg"):
        hdr = T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](sec=0, nanosec=t),
                                       frame_id="cam")
        return T["sensor_msgs/msg/CompressedImage"](header=hdr, format=fmt,
                                                    data=np.frombuffer(data, np.uint8).copy())

    png = cv2.imencode(".png", img)[1].tobytes()
    jpg = cv2.imencode(".jpg", img)[1].tobytes()
    msgs = [("/c", "sensor_msgs/msg/CompressedImage", 100, comp(1, png, "png")),
            ("/c", "sensor_msgs/msg/CompressedImage", 200, comp(2, png[:-30], "png")),
            ("/c", "sensor_msgs/msg/CompressedImage", 300, comp(3, b"garbage!" * 4)),
            ("/c", "sensor_msgs/msg/CompressedImage", 400, comp(4, b"")),
            ("/c", "sensor_msgs/msg/CompressedImage", 500, comp(5, png, "16UC1; compressedDepth")),
            ("/c", "sensor_msgs/msg/CompressedImage", 600, comp(6, jpg))]
    write_messages(tmp_path / "c", "mcap", msgs)
    src = BagSource(tmp_path / "c", "/c")
    frames = list(src)
    assert [f.stamp_ns for f in frames] == [1, 6]
    assert np.array_equal(frames[0].image, img)  # png: lossless, BGR as encoded
    assert dict(src.stats.skipped) == {"corrupt": 2, "zero_size": 1, "unknown_encoding": 1}
    by_bag = list(BagSource(tmp_path / "c", "/c", stamps="bag"))
    assert [f.stamp_ns for f in by_bag] == [100, 600]
