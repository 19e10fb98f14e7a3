"""parse_image against rclpy's own serializer: every field and the pixels, over frame ids and
encodings of every length modulo 4 (each alignment path), padded rows and both byte-order
flags; a byte order other than the host's (the big-endian encapsulation); and malformed
bytes (every truncation, lengths past the end, strings without NUL or not UTF-8, another
encapsulation) refused as decode_failed, never another exception."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from rclpy.serialization import serialize_message
from sensor_msgs.msg import Image

from lingbot_ros.image_decode import ImageRejected
from lingbot_ros.ros.intake.convert import image_to_array
from lingbot_ros.ros.intake.image_cdr import parse_image


def image(frame_id="camera", encoding="rgb8", height=5, width=7, pad=0, bigendian=0, seed=0):
    channels = {"rgb8": 3, "mono8": 1, "bgra8": 4, "mono16": 2, "16UC1": 2}[encoding]
    step = width * channels + pad
    rng = np.random.default_rng(seed)
    msg = Image(height=height, width=width, encoding=encoding, is_bigendian=bigendian,
                step=step)
    msg.header.stamp.sec, msg.header.stamp.nanosec = 1_700_000_000 + seed, 123_456_789
    msg.header.frame_id = frame_id
    msg.data = rng.integers(0, 256, step * height, dtype=np.uint8).tobytes()
    return msg


def assert_same(raw, msg):
    assert raw.header.stamp.sec == msg.header.stamp.sec
    assert raw.header.stamp.nanosec == msg.header.stamp.nanosec
    assert raw.header.frame_id == msg.header.frame_id
    assert (raw.height, raw.width, raw.encoding, raw.is_bigendian, raw.step) == \
        (msg.height, msg.width, msg.encoding, msg.is_bigendian, msg.step)
    assert bytes(raw.data) == bytes(msg.data)


@pytest.mark.parametrize("frame_id", ["", "c", "ca", "cam", "cam0", "camera_optical_frame",
                                      "kamera_é"])
@pytest.mark.parametrize("encoding", ["rgb8", "mono8", "bgra8", "16UC1"])
def test_every_field_as_rclpy_serializes_it(frame_id, encoding):
    msg = image(frame_id, encoding, pad=3, seed=len(frame_id))
    raw = parse_image(serialize_message(msg))
    assert_same(raw, msg)
    np.testing.assert_array_equal(image_to_array(raw), image_to_array(msg))


def test_the_pixels_are_a_view_of_the_serialized_bytes():
    blob = bytearray(serialize_message(image(height=48, width=64)))
    raw = parse_image(blob)
    pixels = image_to_array(raw)
    blob[-1] ^= 0xFF  # the last pixel's last channel, through the buffer
    assert pixels[-1, -1, -1] == bytes(raw.data)[-1]
    with pytest.raises(TypeError):  # read-only: the node can never write into DDS's bytes
        raw.data[0] = 1


def test_a_big_endian_serialization():
    msg = image("cam", "16UC1", bigendian=1)
    little = serialize_message(msg)
    big = bytearray(b"\x00\x00\x00\x00")  # CDR_BE
    big += _be(little)
    assert_same(parse_image(bytes(big)), msg)


def _be(little: bytes) -> bytes:
    """The same message re-serialized big endian (the fields' byte order swapped)."""
    out, at = bytearray(), 4

    def num(code):
        nonlocal at
        size = struct.calcsize(code)
        at = 4 + -(-(at - 4) // size) * size
        while len(out) < at - 4:
            out.append(0)
        value = struct.unpack_from("<" + code, little, at)[0]
        out.extend(struct.pack(">" + code, value))
        at += size
        return value

    def string():
        nonlocal at
        n = num("I")
        out.extend(little[at:at + n])
        at += n

    num("i"), num("I"), string(), num("I"), num("I"), string(), num("B"), num("I")
    n = num("I")
    out.extend(little[at:at + n])
    return bytes(out)


def test_every_truncation_is_refused_as_decode_failed():
    blob = serialize_message(image("cam", "rgb8", height=2, width=2))
    for cut in range(len(blob)):
        with pytest.raises(ImageRejected) as err:
            parse_image(blob[:cut])
        assert err.value.reason == "decode_failed", (cut, err.value)


@pytest.mark.parametrize("what,edit", [
    ("encapsulation", lambda b: b"\x00\x03" + b[2:]),
    ("frame_id length past the end", lambda b: b[:12] + struct.pack("<I", 10**9) + b[16:]),
    ("frame_id length 0", lambda b: b[:12] + struct.pack("<I", 0) + b[16:]),
    ("frame_id without NUL", lambda b: b[:16 + 3] + b"x" + b[20:]),
    ("frame_id not UTF-8", lambda b: b[:16] + b"\xff" + b[17:]),
])
def test_malformed_bytes_are_refused_with_the_reason(what, edit):
    blob = serialize_message(image("cam", "rgb8"))  # frame_id length at 12, chars at 16
    with pytest.raises(ImageRejected) as err:
        parse_image(edit(blob))
    assert err.value.reason == "decode_failed" and "serialized Image" in str(err.value), what
