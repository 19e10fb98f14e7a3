"""Test data for the node tests: image messages, synthetic bags, stamps read back."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.ros.ros_helpers import BAG_START_NS

IMAGE_TOPIC = "/camera/image_raw"


def stamp_ns(stamp) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def header(t_ns: int, frame_id: str = "camera_optical_frame"):
    from builtin_interfaces.msg import Time
    from std_msgs.msg import Header
    return Header(stamp=Time(sec=t_ns // 1_000_000_000, nanosec=t_ns % 1_000_000_000),
                  frame_id=frame_id)


def good_images(count: int, width: int = 80, height: int = 60, start_ns: int = BAG_START_NS,
                hz: float = 30.0, seed: int = 0) -> list:
    """``count`` rgb8 Images of the synthetic scene, stamps ``start_ns + i / hz``."""
    from lingbot_ros.ros.intake.convert import array_to_image
    from lingbot_ros.tools.synthetic.render import render_sequence
    seq = render_sequence(count, width, height, fps=hz, seed=seed, start_ns=start_ns)
    return [array_to_image(img, "rgb8", header=header(int(t)))
            for img, t in zip(seq.images, seq.stamps_ns)]


def make_bag(path: Path, frames: int, storage: str = "mcap", width: int = 80,
             height: int = 60) -> list[int]:
    """A synthetic rosbag2 (image + camera_info at 30 Hz); returns its image stamps (ns)."""
    from lingbot_ros.tools.synthetic.render import render_sequence
    from lingbot_ros.tools.synthetic.writers import write_bag
    seq = render_sequence(frames, width, height, start_ns=BAG_START_NS)
    write_bag(seq, path, storage=storage)
    return [int(t) for t in seq.stamps_ns]


def image_stamps_in_bag(path: Path, topic: str = IMAGE_TOPIC) -> list[int]:
    """The header stamps of the Images recorded in a bag (read back with rosbags)."""
    from rosbags.rosbag2 import Reader
    from rosbags.typesys import Stores, get_typestore
    store = get_typestore(Stores.ROS2_KILTED)
    with Reader(path) as reader:
        conns = [c for c in reader.connections if c.topic == topic]
        return [stamp_ns(store.deserialize_cdr(raw, c.msgtype).header.stamp)
                for c, _, raw in reader.messages(connections=conns)]


def median(values) -> float:
    return float(np.median(np.asarray(values, dtype=np.float64)))
