"""Raw ``sensor_msgs/Image`` data -> numpy arrays: the encodings table and the one decoder.

:data:`ENCODINGS` names every raw layout the package understands (ROS names from
``sensor_msgs/image_encodings.hpp`` and OpenCV's ``8UCn``/``16UCn``) with its
:class:`PixelFormat`. :func:`check_image` validates a message's geometry against its data,
:func:`image_pixels` turns a checked message into an array, :func:`decode_image` does both.
Depth images (:data:`DEPTH_ENCODINGS`: 16UC1, mono16, 32FC1) go through the same checks and
pixels in :func:`decode_depth` (the node's ``aligned_depth`` and the bags' depth topics). A
malformed message raises :class:`ImageRejected`, whose ``reason`` (one of
:data:`REJECT_REASONS`) is short enough to key a drop counter.

A "message" is anything with the fields of ``sensor_msgs/Image`` (``height``, ``width``,
``encoding``, ``step``, ``is_bigendian``, ``data``): an rclpy message (``ros/intake/convert.py``) or
a deserialized rosbags one (``tools/sources/bag.py``). The array is in the message's own layout --
``(H, W)`` for one channel, ``(H, W, C)`` otherwise, native byte order -- and views the message's
buffer where it can (8-bit and native-order 16-bit data; row padding is skipped through strides): do
not mutate it, and copy it to keep it beyond the message. Channel order, alpha and bit depth are
left to ``lingbot_ros.preprocess``, which reads the same table.

It also holds the one table that names what OpenCV decodes (:data:`OPENCV_ENCODINGS`,
:func:`opencv_encoding`); the compressed decoder that uses it, with its header checks, is
:mod:`lingbot_ros.image_header`.

numpy only: no rclpy, ROS message packages, torch or OpenCV.
"""
from __future__ import annotations

import functools

import sys
from dataclasses import dataclass
from typing import Optional

import numpy as np

__all__ = ["OpenCVMissing", "require_cv2", "ENCODINGS", "DEPTH_ENCODINGS", "OPENCV_ENCODINGS",
           "REJECT_REASONS", "ImageRejected", "PixelFormat", "check_image", "decode_image",
           "decode_depth", "image_pixels", "opencv_encoding"]

# Every reason an image can be refused for. check_image: unknown_encoding, bad_step,
# zero_size, truncated, too_large. Compressed data (lingbot_ros.image_header): zero_size,
# too_large (bytes, or the size its header declares), unknown_format (data whose format is not
# identified from its header: never decoded), decode_failed (a corrupt or truncated header,
# OpenCV failing, or a decoded size that differs from the header's), unknown_encoding (a
# decoded type no encoding names, e.g. float). cv_bridge failures are decode_failed too.
REJECT_REASONS = ("unknown_encoding", "bad_step", "zero_size", "truncated", "too_large",
                  "decode_failed", "unknown_format")


@dataclass(frozen=True, slots=True)
class PixelFormat:
    """Memory layout of one encoding: channels per pixel, the numpy dtype of a channel, and
    the channel order ('rgb', 'bgr', 'rgba', 'bgra' or 'mono')."""

    channels: int
    dtype: str  # 'uint8' | 'uint16' | 'float32' (depth)
    order: str

    @property
    def bytes_per_pixel(self) -> int:
        return self.channels * np.dtype(self.dtype).itemsize


# Names are exact (case matters, as in ROS). The OpenCV type names (8UC3, ...) carry no channel
# order; they are read in cv2 order (BGR/BGRA).
ENCODINGS: dict[str, PixelFormat] = {
    "rgb8": PixelFormat(3, "uint8", "rgb"), "bgr8": PixelFormat(3, "uint8", "bgr"),
    "rgba8": PixelFormat(4, "uint8", "rgba"), "bgra8": PixelFormat(4, "uint8", "bgra"),
    "mono8": PixelFormat(1, "uint8", "mono"), "mono16": PixelFormat(1, "uint16", "mono"),
    "rgb16": PixelFormat(3, "uint16", "rgb"), "bgr16": PixelFormat(3, "uint16", "bgr"),
    "rgba16": PixelFormat(4, "uint16", "rgba"), "bgra16": PixelFormat(4, "uint16", "bgra"),
    "8UC1": PixelFormat(1, "uint8", "mono"), "8UC3": PixelFormat(3, "uint8", "bgr"),
    "8UC4": PixelFormat(4, "uint8", "bgra"), "16UC1": PixelFormat(1, "uint16", "mono"),
    "16UC3": PixelFormat(3, "uint16", "bgr"), "16UC4": PixelFormat(4, "uint16", "bgra"),
}

# Depth images (REP-118): one channel, millimetres in uint16 or metres in float32 (the units
# are the scale's: lingbot_ros/scale/depth.py). Names exact, as above.
DEPTH_ENCODINGS: dict[str, PixelFormat] = {
    "16UC1": PixelFormat(1, "uint16", "mono"), "mono16": PixelFormat(1, "uint16", "mono"),
    "32FC1": PixelFormat(1, "float32", "mono"),
}


# What OpenCV decodes -> its encoding: (channels, dtype) -> name, BGR(A) order (OpenCV's),
# derived from ENCODINGS (mono8/mono16, bgr8/bgr16, bgra8/bgra16).
OPENCV_ENCODINGS: dict[tuple[int, str], str] = {
    (fmt.channels, fmt.dtype): name for name, fmt in ENCODINGS.items()
    if fmt.order in ("mono", "bgr", "bgra") and not name[0].isdigit()}


def opencv_encoding(array: np.ndarray) -> str:
    """The encoding of an array OpenCV decoded (``cv2.imdecode``, ``VideoCapture.read``):
    mono8, mono16, bgr8, bgr16, bgra8 or bgra16. ``(H, W, 1)`` counts as one channel.

    Raises:
        ImageRejected: unknown_encoding for any other dtype or channel count (float32 from
            HDR/PFM/float TIFF, 2 channels, ...).
    """
    channels = 1 if array.ndim == 2 else (array.shape[2] if array.ndim == 3 else 0)
    name = OPENCV_ENCODINGS.get((channels, array.dtype.name))
    if name is None:
        raise ImageRejected("unknown_encoding", f"decoded image has dtype {array.dtype} and "
                                                f"{channels} channel(s); expected uint8 or "
                                                f"uint16 with 1, 3 or 4 channels")
    return name


class ImageRejected(ValueError):
    """An image that cannot become an array. ``reason`` is one of REJECT_REASONS."""

    def __init__(self, reason: str, detail: str) -> None:
        assert reason in REJECT_REASONS, reason
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def check_image(msg, *, max_pixels: Optional[int] = None,
                aligned_step: bool = False) -> PixelFormat:
    """Check an Image's geometry against its data, without touching the pixels.

    Args:
        msg: the message (see the module docstring).
        max_pixels: refuse ``width * height`` above this; None: no bound.
        aligned_step: also refuse a ``step`` that is not a multiple of the channel size
            (an odd step for 16-bit data).
    Returns:
        The PixelFormat of ``msg.encoding``.
    Raises:
        ImageRejected: unknown_encoding, zero_size, too_large, bad_step (step shorter than a
            row, or unaligned when asked) or truncated (fewer than step * height bytes; extra
            trailing bytes are ignored).
    """
    encoding = str(msg.encoding)
    fmt = ENCODINGS.get(encoding)
    if fmt is None:
        raise ImageRejected("unknown_encoding",
                            f"encoding {encoding[:40]!r} is not one of {', '.join(ENCODINGS)}")
    return _checked(msg, fmt, encoding, max_pixels, aligned_step)


def _checked(msg, fmt: PixelFormat, encoding: str, max_pixels: Optional[int],
             aligned_step: bool) -> PixelFormat:
    """``msg``'s geometry against its data for the format ``fmt`` (check_image's rules)."""
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    if height == 0 or width == 0:
        raise ImageRejected("zero_size", f"{width}x{height} image")
    if max_pixels is not None and height * width > max_pixels:
        raise ImageRejected("too_large", f"{width}x{height} is over max_pixels={max_pixels}")
    itemsize = np.dtype(fmt.dtype).itemsize
    row = width * fmt.bytes_per_pixel
    if step < row:
        raise ImageRejected("bad_step", f"step {step} < width {width} x {fmt.channels} "
                                        f"channel(s) x {itemsize} byte(s) = {row} "
                                        f"({encoding})")
    if aligned_step and step % itemsize:
        raise ImageRejected("bad_step", f"step {step} is not a multiple of {itemsize} "
                                        f"({encoding})")
    if len(msg.data) < step * height:
        raise ImageRejected("truncated", f"data has {len(msg.data)} bytes, {height} rows of "
                                         f"step {step} need {step * height}")
    return fmt


def image_pixels(msg, fmt: PixelFormat) -> np.ndarray:
    """A message that passed :func:`check_image` -> ``(H, W)`` or ``(H, W, C)`` array, native
    byte order: a view of ``msg.data`` for 8-bit and native-order data, a copy otherwise."""
    dtype = np.dtype(fmt.dtype)
    swapped = dtype.itemsize > 1 and bool(msg.is_bigendian) != (sys.byteorder == "big")
    if swapped:
        dtype = dtype.newbyteorder()
    # Strides skip the row padding; the view shares the message buffer.
    array = np.ndarray(shape=(int(msg.height), int(msg.width), fmt.channels), dtype=dtype,
                       buffer=_byte_buffer(msg.data),
                       strides=(int(msg.step), fmt.bytes_per_pixel, dtype.itemsize))
    if swapped:
        array = array.astype(dtype.newbyteorder())  # a native copy
    return array[:, :, 0] if fmt.channels == 1 else array


def decode_image(msg, *, max_pixels: Optional[int] = None,
                 aligned_step: bool = False) -> np.ndarray:
    """:func:`check_image` then :func:`image_pixels`."""
    return image_pixels(msg, check_image(msg, max_pixels=max_pixels, aligned_step=aligned_step))


def decode_depth(msg, *, max_pixels: Optional[int] = None,
                 aligned_step: bool = False) -> tuple[np.ndarray, str]:
    """A depth Image -> (its (H, W) array, contiguous, native byte order, a copy; its
    encoding): one of :data:`DEPTH_ENCODINGS`, the name exact as for colour images. The
    values are not checked (the depth source masks and counts bad readings).

    Raises:
        ImageRejected: unknown_encoding for another encoding, else :func:`check_image`'s
            reasons (zero_size, too_large, bad_step, truncated).
    """
    encoding = str(msg.encoding)
    fmt = DEPTH_ENCODINGS.get(encoding)
    if fmt is None:
        raise ImageRejected("unknown_encoding", f"depth encoding {encoding[:40]!r} is not one "
                                                f"of {', '.join(DEPTH_ENCODINGS)}")
    _checked(msg, fmt, encoding, max_pixels, aligned_step)
    return np.ascontiguousarray(image_pixels(msg, fmt)), encoding


def _byte_buffer(data):
    """``Image.data`` (bytes, array.array('B'), a numpy uint8 array or a list) as flat bytes,
    without copying where the object exposes a contiguous buffer."""
    try:
        return memoryview(data).cast("B")
    except TypeError:  # a list, or a non-contiguous array
        return np.asarray(data, dtype=np.uint8).reshape(-1)


class OpenCVMissing(ImportError, RuntimeError):
    """OpenCV is needed for this and not installed (an ImportError that the tools' RuntimeError
    handlers also catch)."""


@functools.cache
def require_cv2(purpose: str = "this"):
    """The ``cv2`` module, imported on first use (only decoding and encoding files need
    OpenCV), or ``OpenCVMissing`` saying what needs it and how to install it. The one OpenCV
    loader of the package."""
    try:
        import cv2  # noqa: PLC0415 -- optional: only file and compressed-image work needs it
    except ImportError as err:
        raise OpenCVMissing(f"{purpose} needs OpenCV: pip install opencv-python-headless") \
            from err
    return cv2

