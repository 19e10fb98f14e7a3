"""lingbot-ros-replay end to end: bags written with rosbags, played by the tool in a child
process, received over real DDS (loopback only) by a raw subscriber in this process."""
from __future__ import annotations

import signal
import time

import numpy as np
import pytest

from lingbot_ros.tools.replay.cli import parse_args
from lingbot_ros.tools.replay.player import ReplayOptions
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture
from tests.ros.ros_helpers import (BAG_START_NS, RawReceiver, Recorded, finish, start_replay,
                                   write_bag)

IMAGE, TF = "/cam/image_raw", "/tf"
THING = "uint32 id\nstring note\n"  # lingbot_fake_msgs/msg/Thing: a type no install has
FRAMES, HZ = 21, 20.0  # 1.0 s of camera


def recorded_messages() -> list[Recorded]:
    """21 small rgb8 images (stamp == bag time), 5 TF messages and 3 of an unknown type."""
    from builtin_interfaces.msg import Time
    from geometry_msgs.msg import TransformStamped
    from rclpy.serialization import serialize_message
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore
    from std_msgs.msg import Header
    from tf2_msgs.msg import TFMessage

    from lingbot_ros.ros.intake.convert import array_to_image

    def header(t_ns: int, frame: str) -> Header:
        return Header(stamp=Time(sec=t_ns // 10**9, nanosec=t_ns % 10**9), frame_id=frame)

    out = []
    rng = np.random.default_rng(0)
    for i in range(FRAMES):
        t = BAG_START_NS + int(i * 1e9 / HZ)
        msg = array_to_image(rng.integers(0, 255, (6, 8, 3), dtype=np.uint8), "rgb8",
                             header=header(t, "cam"))
        out.append(Recorded(IMAGE, "sensor_msgs/msg/Image", t, serialize_message(msg)))
    for i in range(5):
        t = BAG_START_NS + int(i * 0.25e9) + 1
        tf = TransformStamped(header=header(t, "map"), child_frame_id="cam")
        tf.transform.translation.x = float(i)
        out.append(Recorded(TF, "tf2_msgs/msg/TFMessage", t, serialize_message(
            TFMessage(transforms=[tf]))))
    store = get_typestore(Stores.ROS2_KILTED)
    store.register(get_types_from_msg(THING, "lingbot_fake_msgs/msg/Thing"))
    thing = store.types["lingbot_fake_msgs/msg/Thing"]
    for i in range(3):
        out.append(Recorded("/mystery", "lingbot_fake_msgs/msg/Thing", BAG_START_NS + i * 10**8 + 2,
                            bytes(store.serialize_cdr(thing(id=i, note="?"), thing.__msgtype__))))
    return sorted(out, key=lambda m: m.time_ns)


def raws(messages, topic):
    return [m.raw for m in messages if m.topic == topic]


def message_types():
    from sensor_msgs.msg import Image
    from tf2_msgs.msg import TFMessage
    return Image, TFMessage


@pytest.fixture(scope="module")
def recorded():
    return recorded_messages()


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_replay_publishes_recorded_bytes(tmp_path, ros_env, recorded, storage):
    from rclpy.serialization import deserialize_message
    Image, TFMessage = message_types()
    bag = write_bag(tmp_path / "bag", storage, recorded, extra_types=THING, fake_hashes=(TF,))
    # The sqlite3 case plays the bag directory, the mcap case the single .mcap file (and waits
    # for the acknowledgements, which must all come).
    target, extra = (bag, []) if storage == "sqlite3" else (bag / "bag.mcap",
                                                             ["--wait-for-all-acked", "10"])
    with RawReceiver({IMAGE: Image, TF: TFMessage}) as rx:
        rc, out, err = finish(start_replay([str(target), "--wait-for-subscribers", "2", *extra],
                                           ros_env))
        assert rc == 0, err
        assert "acknowledged" not in err
        # each topic's last recorded message is its sentinel: all before it have arrived
        assert rx.wait_for_last({IMAGE: raws(recorded, IMAGE)[-1], TF: raws(recorded, TF)[-1]},
                                timeout=5), (rx.count(IMAGE), rx.count(TF))
    got = {t: [raw for raw, _ in rx.received[t]] for t in (IMAGE, TF)}
    assert got[IMAGE] == raws(recorded, IMAGE)
    assert got[TF] == raws(recorded, TF)
    stamps = [deserialize_message(raw, Image).header.stamp for raw in got[IMAGE]]
    assert [s.sec * 10**9 + s.nanosec for s in stamps] == \
        [m.time_ns for m in recorded if m.topic == IMAGE]
    # The unknown type is skipped with a warning, not a crash, and the summary says so.
    assert "skipping /mystery (lingbot_fake_msgs/msg/Thing)" in err
    assert f"{IMAGE}  sensor_msgs/msg/Image  {FRAMES} msgs" in out
    assert "skipped /mystery" in out
    # A recorded definition other than the installed one is played, with a warning. (Type
    # hashes live in metadata.yaml: a bare .mcap file gives rosbags none to compare.)
    if target.is_dir():
        assert f"{TF}: recorded tf2_msgs/msg/TFMessage differs from this install's" in err
    assert f"{IMAGE}: recorded" not in err


def test_full_size_frames_arrive_intact(tmp_path, ros_env):
    # 640x480 rgb8 (~0.9 MB a message: fragmented on the wire) at 15 Hz, as a camera would.
    from rclpy.serialization import serialize_message

    from lingbot_ros.ros.intake.convert import array_to_image
    Image, _ = message_types()
    rng = np.random.default_rng(1)
    frames = [Recorded(IMAGE, "sensor_msgs/msg/Image", BAG_START_NS + int(i * 1e9 / 15),
                       serialize_message(array_to_image(
                           rng.integers(0, 255, (480, 640, 3), dtype=np.uint8), "rgb8")))
              for i in range(10)]
    bag = write_bag(tmp_path / "bag", "mcap", frames)
    with RawReceiver({IMAGE: Image}) as rx:
        rc, out, err = finish(start_replay([str(bag), "--wait-for-subscribers", "1"], ros_env))
        assert rc == 0, err
        assert rx.wait_for_last({IMAGE: frames[-1].raw}, timeout=10), (rx.count(IMAGE), out)
    assert [raw for raw, _ in rx.received[IMAGE]] == [f.raw for f in frames]


def test_rate_scales_the_playback_duration(tmp_path, ros_env, recorded):
    Image, _ = message_types()
    bag = write_bag(tmp_path / "bag", "sqlite3", recorded, extra_types=THING)
    spans = {}
    for rate in (1.0, 2.0):
        with RawReceiver({IMAGE: Image}) as rx:
            rc, _, err = finish(start_replay([str(bag), "--topics", IMAGE, "--rate", str(rate),
                                              "--wait-for-subscribers", "1"], ros_env))
            assert rc == 0, err
            assert rx.wait_for({IMAGE: FRAMES}, timeout=5)
        times = [t for _, t in rx.received[IMAGE]]
        spans[rate] = times[-1] - times[0]
    bag_span = (FRAMES - 1) / HZ
    # Pacing only ever delays, so 1x cannot be much faster than the bag; bounds stay generous
    # for a loaded 2-core CI machine.
    assert 0.85 * bag_span <= spans[1.0] <= 2.0 * bag_span, spans
    assert 0.3 <= spans[2.0] / spans[1.0] <= 0.75, spans


def test_remap_topic_filter_and_sensor_qos(tmp_path, ros_env, recorded):
    from rclpy.qos import ReliabilityPolicy
    Image, TFMessage = message_types()
    bag = write_bag(tmp_path / "bag", "mcap", recorded, extra_types=THING)
    with RawReceiver({IMAGE: Image, "/robot/camera": Image, TF: TFMessage},
                     best_effort={"/robot/camera"}) as rx:
        proc = start_replay([str(bag), "--topics", IMAGE, "--remap", f"{IMAGE}:=/robot/camera",
                             "--qos", "sensor", "--wait-for-subscribers", "1"], ros_env)
        assert rx.wait_for({"/robot/camera": 1}, timeout=15)
        # The replay made all its publishers before it played: having heard one, this
        # process has discovered them all (announced in order), none on /cam or /tf.
        publishers = {t: rx.node.get_publishers_info_by_topic(t)
                      for t in ("/robot/camera", IMAGE, TF)}
        rc, out, err = finish(proc)
        assert rc == 0, err
        assert rx.wait_for_last({"/robot/camera": raws(recorded, IMAGE)[-1]}, timeout=5)
    assert [p.qos_profile.reliability for p in publishers["/robot/camera"]] == \
        [ReliabilityPolicy.BEST_EFFORT]
    assert publishers[IMAGE] == [] and publishers[TF] == [], publishers
    assert [raw for raw, _ in rx.received["/robot/camera"]] == raws(recorded, IMAGE)
    assert rx.count(IMAGE) == 0 and rx.count(TF) == 0  # remapped away, filtered out
    assert "skipping" not in err  # /mystery was filtered out before its type was looked up


def test_clock_follows_bag_time(tmp_path, ros_env, recorded):
    from builtin_interfaces.msg import Time
    from rclpy.serialization import deserialize_message, serialize_message
    from rosgraph_msgs.msg import Clock
    Image, _ = message_types()
    bag = write_bag(tmp_path / "bag", "sqlite3", recorded, extra_types=THING)
    with RawReceiver({IMAGE: Image, "/clock": Clock}, best_effort={"/clock"}) as rx:
        # /clock subscriptions are not counted by --wait-for-subscribers: only data topics.
        rc, out, err = finish(start_replay([str(bag), "--clock", "50", "--topics", IMAGE,
                                          "--wait-for-subscribers", "1"], ros_env))
        assert rc == 0, err
        assert rx.wait_for_last({IMAGE: raws(recorded, IMAGE)[-1]}, timeout=5), \
            (rx.count(IMAGE), out, err)
        # /clock's sentinel: the final tick, on the last message's time
        last_ns = BAG_START_NS + int((FRAMES - 1) * 1e9 / HZ)
        last_tick = serialize_message(Clock(clock=Time(sec=last_ns // 10**9,
                                                       nanosec=last_ns % 10**9)))
        assert rx.wait_for_last({"/clock": last_tick}, timeout=5), rx.count("/clock")
    clock_ns = [c.clock.sec * 10**9 + c.clock.nanosec
                for c in (deserialize_message(raw, Clock) for raw, _ in rx.received["/clock"])]
    assert len(clock_ns) >= 25, len(clock_ns)  # 50 Hz over >= 1 s of playback (+ settle)
    assert all(BAG_START_NS <= c <= last_ns for c in clock_ns), (clock_ns[0], clock_ns[-1])
    assert clock_ns == sorted(clock_ns)
    assert clock_ns[-1] == last_ns  # the final tick lands on the last message


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_a_looping_replay_cleanly(tmp_path, ros_env, recorded, sig):
    Image, _ = message_types()
    bag = write_bag(tmp_path / "bag", "sqlite3", recorded, extra_types=THING)
    with RawReceiver({IMAGE: Image}) as rx:
        proc = start_replay([str(bag), "--loop", "--rate", "4", "--topics", IMAGE,
                             "--wait-for-subscribers", "1"], ros_env)
        try:
            assert rx.wait_for({IMAGE: FRAMES + 5}, timeout=15)  # into the second loop
        finally:
            proc.send_signal(sig)
        rc, out, err = finish(proc, timeout=10)
    assert rc == 0, err
    assert f"stopped by {sig.name}" in out
    assert "loop(s)" in out and "Traceback" not in err


def test_wait_for_subscribers_times_out(tmp_path, ros_env, recorded):
    bag = write_bag(tmp_path / "bag", "sqlite3", recorded, extra_types=THING)
    t0 = time.monotonic()
    rc, _, err = finish(start_replay([str(bag), "--wait-for-subscribers", "1",
                                      "--wait-timeout", "1"], ros_env))
    assert rc == 3 and "did not match within 1.0 s" in err
    assert time.monotonic() - t0 < 15


def test_unreadable_bag_is_an_error_not_a_crash(tmp_path, ros_env):
    rc, _, err = finish(start_replay([str(tmp_path / "missing")], ros_env))
    assert rc == 2 and "cannot read" in err and "Traceback" not in err
    (tmp_path / "junk.mcap").write_bytes(b"not an mcap file")
    rc, _, err = finish(start_replay([str(tmp_path / "junk.mcap")], ros_env))
    assert rc == 2 and "cannot read" in err and "Traceback" not in err


def test_parse_args():
    opts = parse_args(["b", "--rate", "2", "--clock", "--remap", "a:=/b", "--remap", "/c:=d",
                       "--topics", "x", "/y", "--qos", "sensor", "--loop"])
    assert opts == ReplayOptions(bag=opts.bag, rate=2.0, clock_hz=100.0, loop=True,
                                 remaps=(("/a", "/b"), ("/c", "/d")), topics=("/x", "/y"),
                                 qos="sensor")
    for bad in (["b", "--remap", "nope"], ["b", "--rate", "0"], ["b", "--qos", "fast"]):
        with pytest.raises(SystemExit) as exc:
            parse_args(bad)
        assert exc.value.code == 2
    with pytest.raises(ValueError, match="rate"):
        ReplayOptions(bag=opts.bag, rate=-1)


def test_ros_args_go_to_rclpy_and_the_rest_is_ours():
    """As a launch_ros Node: ``--ros-args ... [--]`` sections (node name, remaps) are handed
    to rclpy; the tool's own ``--remap a:=b`` values stay the tool's."""
    opts = parse_args(["b", "--remap", "a:=/b", "--ros-args", "-r", "__node:=player", "-r",
                       "/camera/image_raw:=/cam", "--", "--loop", "--ros-args", "-p",
                       "use_sim_time:=false"])
    assert opts.remaps == (("/a", "/b"),) and opts.loop
    assert opts.ros_args == ("--ros-args", "-r", "__node:=player", "-r",
                             "/camera/image_raw:=/cam", "--", "--ros-args", "-p",
                             "use_sim_time:=false")
    assert parse_args(["b"]).ros_args == ()
    with pytest.raises(SystemExit) as exc:  # malformed ROS arguments: rcl's message, status 2
        parse_args(["b", "--ros-args", "-r", "nonsense"])
    assert exc.value.code == 2
