"""Image / CompressedImage <-> numpy: every encoding both ways, padding, byte order, and every
reject reason. Messages are real rclpy messages; some go through real CDR serialization."""
from __future__ import annotations

import struct
import sys

import cv2
import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header

from lingbot_ros.ros.intake.convert import (ENCODINGS, REJECT_REASONS, ImageLimits, ImageRejected,
                                     array_to_compressed, array_to_image, compressed_to_array,
                                     cv_bridge_in_ros_install, image_to_array, validate_image)

H, W = 5, 7  # odd sizes: no accidental alignment


def pixels(encoding: str, seed: int = 0) -> np.ndarray:
    fmt = ENCODINGS[encoding]
    shape = (H, W) if fmt.channels == 1 else (H, W, fmt.channels)
    info = np.iinfo(fmt.dtype)
    return np.random.default_rng(seed).integers(info.min, info.max, shape, dtype=fmt.dtype,
                                                endpoint=True)


def rejected(msg, reason, limits=ImageLimits(), convert=image_to_array):
    with pytest.raises(ImageRejected) as exc:
        convert(msg, limits)
    assert exc.value.reason == reason, str(exc.value)
    return str(exc.value)


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
@pytest.mark.parametrize("pad", [0, 1, 16])
def test_round_trip_every_encoding(encoding, pad):
    array = pixels(encoding)
    fmt = ENCODINGS[encoding]
    step = W * fmt.bytes_per_pixel + pad
    header = Header(frame_id="cam")
    header.stamp.sec = 12
    msg = array_to_image(array, encoding, header=header, step=step)
    assert (msg.height, msg.width, msg.step, msg.encoding) == (H, W, step, encoding)
    assert len(msg.data) == step * H and msg.is_bigendian == (sys.byteorder == "big")
    assert (msg.header.frame_id, msg.header.stamp.sec) == ("cam", 12)
    # Row r starts at r * step and holds the row's native bytes; padding is zeros.
    data = bytes(msg.data)
    for r in range(H):
        row = data[r * step:(r + 1) * step]
        assert row[:step - pad] == array[r].tobytes() and row[step - pad:] == bytes(pad)
    back = image_to_array(msg)
    assert back.dtype == array.dtype and back.shape == array.shape
    np.testing.assert_array_equal(back, array)
    # Through real CDR and back, as a subscriber gets it.
    received = deserialize_message(serialize_message(msg), Image)
    np.testing.assert_array_equal(image_to_array(received), array)


@pytest.mark.parametrize("encoding", ["mono16", "16UC1", "rgb16", "bgra16"])
@pytest.mark.parametrize("pad", [0, 2, 3])
def test_big_endian_16_bit(encoding, pad):
    array = pixels(encoding, seed=1)
    fmt = ENCODINGS[encoding]
    step = W * fmt.bytes_per_pixel + pad
    rows = array.astype(array.dtype.newbyteorder(">")).reshape(H, -1).view(np.uint8)
    buf = np.zeros((H, step), np.uint8)
    buf[:, :rows.shape[1]] = rows
    msg = Image(height=H, width=W, encoding=encoding, is_bigendian=1, step=step)
    msg.data = buf.tobytes()
    back = image_to_array(msg)
    assert back.dtype == np.dtype(fmt.dtype)  # native again
    np.testing.assert_array_equal(back, array)


@pytest.mark.parametrize("encoding", ["rgb8", "mono16", "bgra8"])
def test_decoding_is_zero_copy(encoding):
    step = W * ENCODINGS[encoding].bytes_per_pixel + 4
    msg = array_to_image(pixels(encoding), encoding, step=step)
    back = image_to_array(msg)
    assert np.shares_memory(back, np.frombuffer(msg.data, np.uint8))


def test_big_endian_flag_is_ignored_for_8_bit():
    array = pixels("rgb8")
    msg = array_to_image(array, "rgb8")
    msg.is_bigendian = 1
    np.testing.assert_array_equal(image_to_array(msg), array)


def test_reject_reasons():
    good = array_to_image(pixels("rgb8"), "rgb8")

    def variant(**fields):
        msg = deserialize_message(serialize_message(good), Image)
        for name, value in fields.items():
            setattr(msg, name, value)
        return msg

    seen = set()
    for msg, reason, limits in [
        (variant(encoding="yuv422"), "unknown_encoding", ImageLimits()),
        (variant(encoding="RGB8"), "unknown_encoding", ImageLimits()),  # names are exact
        (variant(width=0), "zero_size", ImageLimits()),
        (variant(height=0, data=b""), "zero_size", ImageLimits()),
        (variant(step=W * 3 - 1), "bad_step", ImageLimits()),
        (variant(step=0), "bad_step", ImageLimits()),
        (variant(data=bytes(good.data)[:-1]), "truncated", ImageLimits()),
        (variant(height=H + 1), "truncated", ImageLimits()),
        (variant(data=b""), "truncated", ImageLimits()),
        (good, "too_large", ImageLimits(max_pixels=H * W - 1)),
        (variant(width=100_000, height=100_000, step=300_000), "too_large", ImageLimits()),
    ]:
        text = rejected(msg, reason, limits)
        assert text.startswith(reason + ": ") and len(text) > len(reason) + 10
        seen.add(reason)
    assert image_to_array(good, ImageLimits(max_pixels=H * W)).shape == (H, W, 3)
    # Extra trailing bytes are tolerated (step * height is what counts).
    assert image_to_array(variant(data=bytes(good.data) + b"xyz")).shape == (H, W, 3)
    assert validate_image(good) == ENCODINGS["rgb8"]
    rejected(CompressedImage(format="png"), "zero_size", convert=compressed_to_array)
    garbage = CompressedImage(format="jpeg", data=b"\xff\xd8 this is no jpeg")
    rejected(garbage, "decode_failed", convert=compressed_to_array)
    seen.add("decode_failed")
    unknown = CompressedImage(format="jpeg", data=b"no known image format starts like this")
    text = rejected(unknown, "unknown_format", convert=compressed_to_array)
    assert "not decoded" in text and "'jpeg'" in text  # the format field is quoted
    seen.add("unknown_format")
    assert seen == set(REJECT_REASONS)


def test_limits_and_arguments_are_validated():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_pixels"):
            ImageLimits(max_pixels=bad)
    with pytest.raises(ValueError, match="max_compressed_bytes"):
        ImageLimits(max_compressed_bytes=0)
    with pytest.raises(ValueError, match="unknown encoding"):
        array_to_image(pixels("rgb8"), "yuv422")
    with pytest.raises(ValueError, match="rgb8 needs a uint8 array"):
        array_to_image(pixels("mono8"), "rgb8")
    with pytest.raises(ValueError, match="mono16 needs a uint16"):
        array_to_image(pixels("mono8"), "mono16")
    with pytest.raises(ValueError, match="step"):
        array_to_image(pixels("rgb8"), "rgb8", step=W * 3 - 1)
    with pytest.raises(ValueError, match="backend"):
        image_to_array(array_to_image(pixels("rgb8"), "rgb8"), backend="pillow")
    with pytest.raises(ValueError, match="cannot store"):
        array_to_compressed(pixels("mono16"), "mono16", "jpeg")


@pytest.mark.parametrize("encoding", ["rgb8", "bgr8", "rgba8", "bgra8", "mono8", "mono16"])
def test_png_is_lossless_and_decodes_as_opencv_order(encoding):
    array = pixels(encoding)
    msg = array_to_compressed(array, encoding, "png")
    stored = {"rgb8": "bgr8", "rgba8": "bgra8"}.get(encoding, encoding)
    assert msg.format == f"{encoding}; png compressed {stored}"
    back, back_encoding = compressed_to_array(deserialize_message(serialize_message(msg),
                                                                  CompressedImage))
    assert back_encoding == stored
    order = {"rgb8": [2, 1, 0], "rgba8": [2, 1, 0, 3]}.get(encoding)
    expect = array if order is None else array[..., order]
    np.testing.assert_array_equal(back, expect)


def test_jpeg_round_trip_is_close():
    gradient = np.linspace(0, 255, 64 * 48 * 3).reshape(48, 64, 3).astype(np.uint8)
    msg = array_to_compressed(gradient, "rgb8", "jpeg", jpeg_quality=95)
    back, encoding = compressed_to_array(msg)
    assert encoding == "bgr8" and back.shape == gradient.shape
    assert np.abs(back[..., ::-1].astype(int) - gradient).mean() < 3


def test_compressed_size_is_checked_before_decoding():
    array = pixels("rgb8")
    limits = ImageLimits(max_pixels=H * W - 1)
    for fmt in ("png", "jpeg"):
        text = rejected(array_to_compressed(array, "rgb8", fmt), "too_large", limits,
                        compressed_to_array)
        assert f"{W}x{H}" in text
    # A header claiming 100000 x 100000 is refused before OpenCV sees (or allocates) anything:
    # the rest of this "PNG" is missing, so decoding would fail instead.
    bomb = b"\x89PNG\r\n\x1a\n" + struct.pack(">I4sII", 13, b"IHDR", 100_000, 100_000) + bytes(5)
    rejected(CompressedImage(format="png", data=bomb), "too_large", convert=compressed_to_array)
    big = CompressedImage(format="png", data=bytes(array_to_compressed(array, "rgb8").data))
    rejected(big, "too_large", ImageLimits(max_compressed_bytes=10), compressed_to_array)


@pytest.mark.parametrize("name", ["vp8l", "vp8x", "vp8", "png", "jpeg"])
def test_compressed_bombs_are_refused_without_decoding(name, monkeypatch):
    """16000 x 16000 declared in a few KB (the VP8L one is a complete, decodable image of
    that size) is too_large for the default limits, and OpenCV never sees it."""
    from tests.test_image_header import (BOMB, encode, patch_jpeg_size, png_header,
                                         vp8_header, vp8l_constant, vp8x_wrap)
    data = {"vp8l": lambda: vp8l_constant(BOMB, BOMB),
            "vp8x": lambda: vp8x_wrap(vp8l_constant(BOMB, BOMB), BOMB, BOMB, b" " * 9000),
            "vp8": lambda: vp8_header(BOMB, BOMB),
            "png": lambda: png_header(BOMB, BOMB),
            "jpeg": lambda: patch_jpeg_size(encode(".jpg", pixels("bgr8")), BOMB, BOMB)}[name]()
    msg = deserialize_message(serialize_message(CompressedImage(format=name, data=data)),
                              CompressedImage)

    def imdecode(*args, **kwargs):
        raise AssertionError("cv2.imdecode was called")
    monkeypatch.setattr(cv2, "imdecode", imdecode)
    text = rejected(msg, "too_large", convert=compressed_to_array)
    assert f"declares {BOMB}x{BOMB}, over max_pixels={ImageLimits().max_pixels}" in text


@pytest.mark.parametrize("channels, encoding", [(3, "bgr16"), (4, "bgra16")])
def test_16_bit_colour_is_bgr16_in_the_node_and_the_offline_sources(channels, encoding):
    """One table names what OpenCV decodes: a 16-bit colour PNG is bgr16/bgra16 (it used to
    be refused by the node and accepted offline)."""
    from lingbot_ros.preprocess import preprocess
    from lingbot_ros.tools.sources.frame import decode_bytes
    array = np.random.default_rng(3).integers(0, 65535, (H, W, channels), dtype=np.uint16,
                                              endpoint=True)
    ok, buf = cv2.imencode(".png", array)
    msg = CompressedImage(format=f"{encoding}; png compressed {encoding}")
    msg.data = buf.tobytes()
    back, back_encoding = compressed_to_array(deserialize_message(serialize_message(msg),
                                                                  CompressedImage))
    assert back_encoding == encoding and back.dtype == np.uint16
    np.testing.assert_array_equal(back, array)
    offline, offline_encoding = decode_bytes(buf.reshape(-1), "test.png")
    assert offline_encoding == encoding
    np.testing.assert_array_equal(offline, array)
    assert preprocess(back, back_encoding)[0].shape[0] == 3


def test_auto_backend_is_numpy_without_a_ros_cv_bridge(monkeypatch, tmp_path):
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(tmp_path))
    assert not cv_bridge_in_ros_install()
    msg = array_to_image(pixels("rgb8"), "rgb8")
    assert np.shares_memory(image_to_array(msg, backend="auto"),
                            np.frombuffer(msg.data, np.uint8))
