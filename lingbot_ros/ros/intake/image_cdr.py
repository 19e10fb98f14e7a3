"""RawImage: a ``sensor_msgs/Image`` read from its serialized bytes (``topics.image_raw_take``).

Why: for every image, rclpy's take builds a Python message while holding the GIL, and the
worker (the model's host code) waits. A subscription with ``raw=True`` hands over the CDR
bytes instead; this module reads the fields from them, the pixels as a view of those bytes
(no copy). ``scripts/intake_gil.py`` measures what the intake costs the worker's GIL per
640x480 rgb8 image (docs/performance.md).

Layout (XCDR1 or plain XCDR2 -- identical for this type, which has no 8-byte field --, the
byte order from the 4-byte encapsulation header; alignment counts from the first byte after
it)::

    header:  stamp (int32 sec, uint32 nanosec) | frame_id (uint32 length incl. NUL, chars, NUL)
    uint32 height | uint32 width | encoding (string) | uint8 is_bigendian | uint32 step |
    data (uint32 count, count bytes)

Bytes that do not parse (truncated, a length past the end, a string without its NUL or not
UTF-8, another encapsulation) are refused as ``decode_failed``, never half-read.
``tests/ros/unit/test_image_cdr.py`` checks every field against rclpy's own serializer.
"""
from __future__ import annotations

import struct

from builtin_interfaces.msg import Time
from std_msgs.msg import Header

from ...image_decode import ImageRejected

__all__ = ["RawImage", "parse_image"]

# Encapsulation identifiers (first two bytes, big endian) of the plain (final) encodings:
# CDR_BE, CDR_LE, PLAIN_CDR2_BE, PLAIN_CDR2_LE -> struct byte order.
_BYTE_ORDER = {0x0000: ">", 0x0001: "<", 0x0006: ">", 0x0007: "<"}
_ENCAPSULATION = 4


class RawImage:
    """The fields of a ``sensor_msgs/Image`` (what the node reads of one); ``header`` is a
    real ``std_msgs/Header`` (it goes into the node's outputs), ``data`` a read-only
    memoryview of the serialized bytes."""

    __slots__ = ("header", "height", "width", "encoding", "is_bigendian", "step", "data")

    def __init__(self, header: Header, height: int, width: int, encoding: str,
                 is_bigendian: int, step: int, data: memoryview) -> None:
        self.header, self.height, self.width = header, height, width
        self.encoding, self.is_bigendian, self.step, self.data = (encoding, is_bigendian,
                                                                  step, data)


class _Reader:
    def __init__(self, view: memoryview, order: str) -> None:
        self._view, self._order, self._at = view, order, _ENCAPSULATION

    def _take(self, size: int, what: str) -> int:
        start = self._at
        if size < 0 or start + size > len(self._view):
            raise _malformed(f"{what} at byte {start} needs {size} bytes; the message has "
                             f"{len(self._view)}")
        self._at = start + size
        return start

    def number(self, code: str, what: str) -> int:
        size = struct.calcsize("<" + code)  # the standard sizes CDR uses
        self._at = _ENCAPSULATION + -(-(self._at - _ENCAPSULATION) // size) * size  # align
        return struct.unpack_from(self._order + code, self._view, self._take(size, what))[0]

    def string(self, what: str) -> str:
        length = self.number("I", what)
        if length == 0:  # an empty string is serialized as its NUL alone (length 1)
            raise _malformed(f"{what} has length 0 (no terminating NUL)")
        start = self._take(length, what)
        raw = self._view[start:start + length]
        if raw[-1] != 0:
            raise _malformed(f"{what} does not end with NUL")
        try:
            return bytes(raw[:-1]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _malformed(f"{what} is not UTF-8: {exc}") from None

    def block(self, length: int, what: str) -> memoryview:
        start = self._take(length, what)
        return self._view[start:start + length]


def _malformed(detail: str) -> ImageRejected:
    return ImageRejected("decode_failed", f"serialized Image: {detail}")


def parse_image(serialized) -> RawImage:
    """The Image in ``serialized`` (bytes from a raw subscription); ImageRejected
    (decode_failed) when the bytes are not one."""
    view = memoryview(serialized).cast("B").toreadonly()
    if len(view) < _ENCAPSULATION:
        raise _malformed(f"{len(view)} bytes: shorter than the encapsulation header")
    kind = int.from_bytes(view[:2], "big")
    order = _BYTE_ORDER.get(kind)
    if order is None:
        raise _malformed(f"encapsulation {kind:#06x} is not plain CDR")
    r = _Reader(view, order)
    sec, nanosec = r.number("i", "header.stamp.sec"), r.number("I", "header.stamp.nanosec")
    frame_id = r.string("header.frame_id")
    height, width = r.number("I", "height"), r.number("I", "width")
    encoding = r.string("encoding")
    is_bigendian = r.number("B", "is_bigendian")
    step = r.number("I", "step")
    data = r.block(r.number("I", "data length"), "data")
    header = Header(stamp=Time(sec=sec, nanosec=nanosec), frame_id=frame_id)
    return RawImage(header, height, width, encoding, is_bigendian, step, data)
