"""Header readers of the binary formats: JPEG, PNG, WebP, BMP, TIFF, GIF, Sun raster.

Each reader takes the data as a memoryview and returns ``(width, height)``; a bad header
raises :class:`~lingbot_ros.image_header.common.Corrupt`, ``struct.error``, ``IndexError`` or
``ValueError`` (read_header turns them into decode_failed).
"""
from __future__ import annotations

import re
import struct

from .common import MAX_SEGMENTS, Corrupt, need

_SOF_MARKERS = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD,
                          0xCE, 0xCF})


_NOT_FF = re.compile(rb"[^\xff]*")
_FF = re.compile(rb"\xff*")


def jpeg_size(view: memoryview) -> tuple[int, int]:
    n = len(view)
    pos = 2  # after SOI
    for _ in range(MAX_SEGMENTS):
        # next_marker as libjpeg reads it: skip stray bytes, then 0xFF fill bytes; FF 00 is
        # no marker (keep looking).
        pos = _FF.match(view, _NOT_FF.match(view, pos).end()).end()
        if pos >= n:
            raise Corrupt("no SOF segment before the end of the data")
        marker = view[pos]
        pos += 1
        if marker == 0x00 or marker == 0x01 or 0xD0 <= marker <= 0xD7:
            continue  # stuffed zero, TEM, RSTn: no length field
        if marker == 0xD8:
            raise Corrupt("a second SOI marker")
        if marker in (0xD9, 0xDA):
            raise Corrupt(f"{'EOI' if marker == 0xD9 else 'SOS'} before any SOF segment")
        (length,) = struct.unpack_from(">H", view, pos)
        if length < 2:
            raise Corrupt(f"segment FF{marker:02X} has length {length}")
        if marker in _SOF_MARKERS:
            if length < 8:
                raise Corrupt(f"SOF segment of length {length}")
            height, width = struct.unpack_from(">HH", view, pos + 3)
            return width, height
        pos += length
    raise Corrupt(f"no SOF segment in the first {MAX_SEGMENTS} markers")


def png_size(view: memoryview) -> tuple[int, int]:
    need(view, 24, "IHDR")
    length, kind = struct.unpack_from(">I4s", view, 8)
    if kind != b"IHDR" or length != 13:
        raise Corrupt(f"the first chunk is {kind!r} of length {length}, not IHDR")
    return struct.unpack_from(">II", view, 16)


def webp_size(view: memoryview) -> tuple[int, int]:
    kind, size = struct.unpack_from("<4sI", view, 12)
    if kind == b"VP8X":
        need(view, 30, "VP8X chunk")
        flags = view[20]
        width = int.from_bytes(view[24:27], "little") + 1
        height = int.from_bytes(view[27:30], "little") + 1
        if not flags & 0x02:  # a still image: its bitstream must declare the canvas size
            inner = _webp_inner_size(view, 20 + size + (size & 1))
            if inner != (width, height):
                raise Corrupt(f"VP8X canvas {width}x{height} but its bitstream declares "
                               f"{inner[0]}x{inner[1]}")
        return width, height
    if kind in (b"VP8 ", b"VP8L"):
        return _webp_bitstream_size(view, kind, 20)
    raise Corrupt(f"first chunk {kind!r} is not VP8, VP8L or VP8X")


def _webp_inner_size(view: memoryview, pos: int) -> tuple[int, int]:
    """The size declared by the first VP8/VP8L chunk at or after ``pos`` (VP8X images)."""
    for _ in range(MAX_SEGMENTS):
        kind, size = struct.unpack_from("<4sI", view, pos)
        if kind in (b"VP8 ", b"VP8L"):
            return _webp_bitstream_size(view, kind, pos + 8)
        pos += 8 + size + (size & 1)
    raise Corrupt(f"no VP8/VP8L chunk in the first {MAX_SEGMENTS} chunks")


def _webp_bitstream_size(view: memoryview, kind: bytes, pos: int) -> tuple[int, int]:
    if kind == b"VP8L":
        need(view, pos + 5, "VP8L header")
        if view[pos] != 0x2F:
            raise Corrupt("VP8L signature byte is not 0x2f")
        (bits,) = struct.unpack_from("<I", view, pos + 1)
        if bits >> 29:
            raise Corrupt(f"VP8L version {bits >> 29}")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    need(view, pos + 10, "VP8 frame header")
    if view[pos] & 1:
        raise Corrupt("VP8 data does not start with a key frame")
    if bytes(view[pos + 3:pos + 6]) != b"\x9d\x01\x2a":
        raise Corrupt("VP8 start code missing")
    width, height = struct.unpack_from("<HH", view, pos + 6)
    return width & 0x3FFF, height & 0x3FFF


def bmp_size(view: memoryview) -> tuple[int, int]:
    (dib,) = struct.unpack_from("<I", view, 14)
    if dib == 12:  # BITMAPCOREHEADER
        return struct.unpack_from("<HH", view, 18)
    if dib < 36:  # OpenCV reads no other header
        raise Corrupt(f"DIB header of {dib} bytes")
    width, height = struct.unpack_from("<ii", view, 18)
    if width < 0:
        raise Corrupt(f"negative width {width}")
    return width, abs(height)  # a negative height is a top-down bitmap


def tiff_size(view: memoryview) -> tuple[int, int]:
    order = "<" if bytes(view[:2]) == b"II" else ">"
    big = view[2 + (order == ">")] == 0x2B  # 43: BigTIFF
    if big:
        offset_size, zero, ifd = struct.unpack_from(order + "HHQ", view, 4)
        if offset_size != 8 or zero:
            raise Corrupt("BigTIFF header")
        (count,) = struct.unpack_from(order + "Q", view, ifd)
        if count > 65535:
            raise Corrupt(f"an IFD of {count} entries")
        entries, entry_size = ifd + 8, 20
    else:
        (ifd,) = struct.unpack_from(order + "I", view, 4)
        (count,) = struct.unpack_from(order + "H", view, ifd)
        entries, entry_size = ifd + 2, 12
    need(view, entries + count * entry_size, f"an IFD of {count} entries")
    size = {}
    for i in range(count):
        at = entries + i * entry_size
        tag, kind = struct.unpack_from(order + "HH", view, at)
        if tag not in (256, 257):  # ImageWidth, ImageLength
            continue
        value_at = at + (12 if big else 8)
        n = struct.unpack_from(order + ("Q" if big else "I"), view, at + 4)[0]
        if n < 1:
            raise Corrupt(f"tag {tag} has no value")
        if kind == 3:  # SHORT
            size[tag] = struct.unpack_from(order + "H", view, value_at)[0]
        elif kind == 4:  # LONG
            size[tag] = struct.unpack_from(order + "I", view, value_at)[0]
        elif kind == 16 and big:  # LONG8
            size[tag] = struct.unpack_from(order + "Q", view, value_at)[0]
        else:
            raise Corrupt(f"tag {tag} has type {kind}")
    if 256 not in size or 257 not in size:
        raise Corrupt("the first IFD has no ImageWidth or ImageLength")
    return size[256], size[257]


def gif_size(view: memoryview) -> tuple[int, int]:
    return struct.unpack_from("<HH", view, 6)


def sunras_size(view: memoryview) -> tuple[int, int]:
    width, height = struct.unpack_from(">ii", view, 4)
    if width < 0 or height < 0:
        raise Corrupt(f"negative size {width}x{height}")
    return width, height
