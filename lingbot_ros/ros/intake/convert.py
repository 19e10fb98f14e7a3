"""sensor_msgs Image / CompressedImage <-> numpy arrays, with validation that names the reason.

Decoding returns the pixels in the message's own layout -- ``(H, W)`` for one channel,
``(H, W, C)`` otherwise, native byte order -- and leaves channel order, alpha and bit depth to
``lingbot_ros.preprocess`` (pass it the array and the encoding). A malformed message raises
:class:`ImageRejected`, whose ``reason`` is one of :data:`REJECT_REASONS`, short enough to key a
drop counter; the node counts it and moves on.

``image_to_array`` is zero-copy for 8-bit and little-endian messages: the array views the
message's buffer (row padding skipped through strides), so copy it to keep it beyond the message.
Encoding builds ``bytes`` for ``Image.data``: assigning a numpy array there costs ~60 ms a frame
in rclpy, bytes ~0.1 ms. OpenCV (``cv2``) is needed only for CompressedImage.

The encodings table (:data:`ENCODINGS`), the reject reasons and the raw decoder live in
:mod:`lingbot_ros.image_decode`, the compressed decoder (header checked before decoding) in
:mod:`lingbot_ros.image_header`; both are shared with the offline tools. This module adds the
size limits, the cv_bridge backend, encoding, and the CompressedImage adapter.
"""
from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

import numpy as np
from sensor_msgs.msg import CompressedImage, Image

from ...image_decode import (ENCODINGS, REJECT_REASONS, ImageRejected, PixelFormat, check_image,
                           image_pixels, require_cv2)
from ...image_header import decode_compressed

__all__ = ["ENCODINGS", "REJECT_REASONS", "ImageLimits", "ImageRejected", "PixelFormat",
           "array_to_compressed", "array_to_image", "compressed_to_array",
           "cv_bridge_in_ros_install", "image_to_array", "validate_image"]

Backend = Literal["numpy", "cv_bridge", "auto"]


@dataclass(frozen=True, slots=True)
class ImageLimits:
    """Bounds on what a message may make us allocate or decode."""

    max_pixels: int = 4096 * 4096  # width * height, raw or decoded
    max_compressed_bytes: int = 64 * 1024 * 1024  # CompressedImage.data length

    def __post_init__(self) -> None:
        for name in ("max_pixels", "max_compressed_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")


def validate_image(msg: Image, limits: ImageLimits = ImageLimits()) -> PixelFormat:
    """Check an Image's geometry against its data, without touching the pixels.

    Args:
        msg: the message.
        limits: size bounds.
    Returns:
        The PixelFormat of ``msg.encoding``.
    Raises:
        ImageRejected: unknown_encoding, zero_size, too_large, bad_step (step shorter than a
            row) or truncated (fewer than step * height bytes; extra trailing bytes are ignored).
    """
    return check_image(msg, max_pixels=limits.max_pixels)


def image_to_array(msg: Image, limits: ImageLimits = ImageLimits(), *,
                   backend: Backend = "numpy") -> np.ndarray:
    """Image -> array in the message's layout, native byte order.

    Args:
        msg: the message; its ``encoding`` names the layout (see ENCODINGS).
        limits: size bounds.
        backend: 'numpy' (zero-copy views); 'cv_bridge' (``CvBridge.imgmsg_to_cv2``, for
            parity checks -- validation and the result's layout stay ours); 'auto': cv_bridge
            when a ROS install provides it (see cv_bridge_in_ros_install), else numpy.
    Returns:
        ``(H, W)`` or ``(H, W, C)`` uint8/uint16 array. For 8-bit or little-endian messages on
        numpy it is a view of ``msg.data``: do not mutate it, and copy it to keep it.
    Raises:
        ImageRejected: see validate_image; decode_failed when cv_bridge fails or disagrees
            with the validated layout.
    """
    fmt = validate_image(msg, limits)
    if backend == "auto":
        backend = "cv_bridge" if cv_bridge_in_ros_install() else "numpy"
    if backend == "cv_bridge":
        return _decode_with_cv_bridge(msg, fmt)
    if backend != "numpy":
        raise ValueError(f"backend must be 'numpy', 'cv_bridge' or 'auto', got {backend!r}")
    return image_pixels(msg, fmt)


def array_to_image(array: np.ndarray, encoding: str, *, header=None,
                   step: Optional[int] = None) -> Image:
    """Array -> Image (native byte order, data as bytes).

    Args:
        array: ``(H, W)`` or ``(H, W, C)`` with the channels and dtype of ``encoding``.
        encoding: a key of ENCODINGS.
        header: std_msgs/Header to copy (stamp, frame_id); default empty.
        step: row length in bytes, >= W * bytes per pixel; longer rows are zero-padded.
    Returns:
        The message.
    Raises:
        ValueError: unknown encoding, or an array that does not match it.
    """
    fmt = ENCODINGS.get(encoding)
    if fmt is None:
        raise ValueError(f"unknown encoding {encoding!r}; expected one of {', '.join(ENCODINGS)}")
    expect_ndim = 2 if fmt.channels == 1 else 3
    if (array.ndim != expect_ndim or (expect_ndim == 3 and array.shape[2] != fmt.channels)
            or array.dtype != np.dtype(fmt.dtype)):
        raise ValueError(f"{encoding} needs a {fmt.dtype} array of shape (H, W"
                         f"{'' if fmt.channels == 1 else f', {fmt.channels}'}), "
                         f"got {array.dtype} {array.shape}")
    height, width = array.shape[:2]
    row = width * fmt.bytes_per_pixel
    step = row if step is None else step
    if step < row:
        raise ValueError(f"step {step} < row length {row}")
    rows = np.ascontiguousarray(array).reshape(height, row // array.itemsize)
    if step > row:
        padded = np.zeros((height, step), dtype=np.uint8)
        padded[:, :row] = rows.view(np.uint8)
        data = padded.tobytes()
    else:
        data = rows.tobytes()
    msg = Image(height=height, width=width, encoding=encoding,
                is_bigendian=int(sys.byteorder == "big"), step=step)
    msg.data = data
    if header is not None:
        msg.header = header
    return msg


def compressed_to_array(msg: CompressedImage,
                        limits: ImageLimits = ImageLimits()) -> tuple[np.ndarray, str]:
    """CompressedImage -> (array, encoding): :func:`lingbot_ros.image_header.decode_compressed`.

    The image size is read from the format's header (JPEG, PNG, WebP, BMP, PNM, TIFF, GIF,
    Sun raster, HDR, JPEG 2000, AVIF) and checked against ``limits.max_pixels`` before
    anything is decoded, so a small message cannot make us allocate a huge image; data in any
    other format is refused undecoded, and the decoded size must be the header's.

    Args:
        msg: the message; ``format`` is informational (the data's header says what it is).
        limits: size bounds.
    Returns:
        ``(array, encoding)`` with encoding mono8, mono16, bgr8, bgr16, bgra8 or bgra16
        (OpenCV decodes colour as BGR).
    Raises:
        ImageRejected: zero_size (no data), too_large (bytes, or the declared size),
            unknown_format, decode_failed, unknown_encoding (e.g. a float image).
    """
    try:
        return decode_compressed(msg.data, max_pixels=limits.max_pixels,
                                 max_bytes=limits.max_compressed_bytes)
    except ImageRejected as err:
        if err.reason not in ("decode_failed", "unknown_format"):
            raise
        raise ImageRejected(err.reason, f"{err.detail} (format field "
                                        f"{str(msg.format)[:60]!r})") from None


def array_to_compressed(array: np.ndarray, encoding: str, fmt: str = "png", *, header=None,
                        jpeg_quality: int = 95) -> CompressedImage:
    """Array -> CompressedImage, ``format`` following image_transport ('rgb8; png compressed bgr8').

    Args:
        array: as for array_to_image. Colour is stored as BGR(A) (OpenCV's order).
        encoding: rgb8, bgr8, rgba8, bgra8, mono8, or mono16 (PNG only).
        fmt: 'png' (lossless) or 'jpeg'.
        header: std_msgs/Header to copy.
        jpeg_quality: 0..100.
    Returns:
        The message.
    Raises:
        ValueError: unsupported encoding/format combination, or the array does not match.
    """
    to_bgr = {"rgb8": ("bgr8", "COLOR_RGB2BGR"), "rgba8": ("bgra8", "COLOR_RGBA2BGRA"),
              "bgr8": ("bgr8", None), "bgra8": ("bgra8", None), "mono8": ("mono8", None),
              "mono16": ("mono16", None)}
    if encoding not in to_bgr or fmt not in ("png", "jpeg") or (fmt, encoding) == ("jpeg",
                                                                                   "mono16"):
        raise ValueError(f"cannot store {encoding!r} as {fmt!r}")
    array_to_image(array, encoding)  # the same shape/dtype checks
    cv2 = require_cv2("CompressedImage")
    stored, code = to_bgr[encoding]
    pixels = array if code is None else cv2.cvtColor(array, getattr(cv2, code))
    params = [cv2.IMWRITE_JPEG_QUALITY, int(jpeg_quality)] if fmt == "jpeg" else []
    ok, buf = cv2.imencode(".png" if fmt == "png" else ".jpg", pixels, params)
    if not ok:
        raise ValueError(f"OpenCV could not encode {encoding} as {fmt}")
    msg = CompressedImage(format=f"{encoding}; {fmt} compressed {stored}")
    msg.data = buf.tobytes()
    if header is not None:
        msg.header = header
    return msg


def cv_bridge_in_ros_install() -> bool:
    """True when cv_bridge is importable and registered in the ament index of a ROS install.

    The PyPI ``cv-bridge`` package (a port of the ROS 1 bridge) registers nothing there, so
    'auto' never picks it: it ignores ``step`` and decodes 16UC1 as 8-bit.
    """
    return _cv_bridge_registered(os.environ.get("AMENT_PREFIX_PATH", ""))


@functools.lru_cache(maxsize=4)  # once per AMENT_PREFIX_PATH value, not once per frame
def _cv_bridge_registered(ament_prefix_path: str) -> bool:
    marker = Path("share", "ament_index", "resource_index", "packages", "cv_bridge")
    if not any((Path(p) / marker).is_file() for p in ament_prefix_path.split(os.pathsep) if p):
        return False
    try:
        _cv_bridge()
    except ImportError:
        return False
    return True


@functools.cache
def _cv_bridge():
    from cv_bridge import CvBridge  # noqa: PLC0415 -- optional, only on request
    return CvBridge()


def _decode_with_cv_bridge(msg: Image, fmt: PixelFormat) -> np.ndarray:
    expected = (msg.height, msg.width) + (() if fmt.channels == 1 else (fmt.channels,))
    try:
        array = np.asarray(_cv_bridge().imgmsg_to_cv2(msg, desired_encoding="passthrough"))
    except ImportError:
        raise
    except Exception as err:  # noqa: BLE001 -- any bridge failure is this message's failure
        raise ImageRejected("decode_failed", f"cv_bridge: {type(err).__name__}: {err}") from err
    if array.shape != expected or array.dtype.kind != "u" or array.dtype.itemsize != \
            np.dtype(fmt.dtype).itemsize:
        raise ImageRejected("decode_failed", f"cv_bridge returned {array.dtype} {array.shape} "
                                             f"for {msg.encoding} {expected}")
    return array.astype(fmt.dtype, copy=False)  # native byte order


