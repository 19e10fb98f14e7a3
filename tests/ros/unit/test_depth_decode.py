"""Depth images go through the one raw-image decoder (``image_decode.decode_depth``) in the
node (``aligned_depth``) and in the bag sources (a depth topic), so both treat an encoding
name's case and a bad row length one way (issue 33: the node lowercased the name and read a
short last row, the bags took 32FC1 in any case, each with its own decoder)."""
from __future__ import annotations

import numpy as np
import pytest
from sensor_msgs.msg import Image

from lingbot_ros.image_decode import ImageRejected, decode_depth
from lingbot_ros.ros.intake.scale_msgs import depth_msg_input
from lingbot_ros.tools.sources.bag import depth_from_msg
from lingbot_ros.tools.sources.frame import SkippedFrame


def image(array: np.ndarray, encoding: str, step_pad: int = 0, cut: int = 0) -> Image:
    h, w = array.shape
    rows = np.ascontiguousarray(array.astype(array.dtype.newbyteorder("<"))).view(
        np.uint8).reshape(h, -1)
    rows = np.concatenate([rows, np.zeros((h, max(step_pad, 0)), np.uint8)], axis=1)
    data = rows.tobytes()
    return Image(height=h, width=w, encoding=encoding, is_bigendian=0,
                 step=rows.shape[1] + min(step_pad, 0), data=data[:len(data) - cut])


def reasons(msg) -> tuple[str, str]:
    """(the node's reason, the bags' reason) for one message."""
    node = bag = "read"
    try:
        depth_msg_input(msg)
    except ImageRejected as exc:
        node = exc.reason
    try:
        depth_from_msg(msg)
    except SkippedFrame as exc:
        bag = exc.reason
    return node, bag


MM = (np.arange(12).reshape(3, 4) * 100 + 7).astype(np.uint16)
M = MM.astype(np.float32) / 1000


@pytest.mark.parametrize("encoding,array", [("16UC1", MM), ("mono16", MM), ("32FC1", M)])
def test_the_node_and_the_bags_read_a_depth_image_alike(encoding, array):
    msg = image(array, encoding, step_pad=8)
    node, bag = depth_msg_input(msg)[1], depth_from_msg(msg)[0]
    np.testing.assert_array_equal(node, array)
    np.testing.assert_array_equal(bag, array)
    assert node.dtype == bag.dtype == array.dtype


@pytest.mark.parametrize("encoding", ["16uc1", "32fc1", "MONO16", "Mono16"])
def test_the_encoding_name_is_exact_in_both(encoding):
    """As for colour images (ROS names are exact): another case is no depth encoding."""
    array = M if "32" in encoding else MM
    assert reasons(image(array, encoding)) == ("unknown_encoding", "unknown_encoding")


@pytest.mark.parametrize("encoding,array", [("16UC1", MM), ("32FC1", M)])
def test_a_bad_row_length_is_refused_alike(encoding, array):
    """A step shorter than a row: bad_step; data short of step x height (also a last row
    without its padding, which the node read before): truncated."""
    assert reasons(image(array, encoding, step_pad=-2)) == ("bad_step", "bad_step")
    assert reasons(image(array, encoding, step_pad=4, cut=4)) == ("truncated", "truncated")
    assert reasons(image(array, encoding, cut=1)) == ("truncated", "truncated")
    empty = Image(height=0, width=4, encoding=encoding, step=8, data=b"")
    assert reasons(empty) == ("zero_size", "zero_size")


def test_decode_depth_copies_into_native_order():
    msg = image(MM, "16UC1", step_pad=2)
    out, enc = decode_depth(msg)
    assert enc == "16UC1" and out.flags.c_contiguous and out.dtype == np.uint16
    assert not np.shares_memory(out, np.frombuffer(bytes(msg.data), np.uint8))
