"""Header readers of the box-structured formats: JPEG 2000 (a raw codestream or a JP2's jp2c
box) and AVIF (ISO BMFF: the primary item's ispe property).

Each reader takes the data as a memoryview and returns ``(width, height)``; a bad header
raises :class:`~lingbot_ros.image_header.common.Corrupt`, ``struct.error``, ``IndexError`` or
``ValueError`` (read_header turns them into decode_failed). An AVIF image sequence is refused
(``ImageRejected("unknown_format")``).
"""
from __future__ import annotations

import struct

from ..image_decode import ImageRejected
from .common import MAX_SEGMENTS, Corrupt, need


def jpeg2000_size(view: memoryview) -> tuple[int, int]:
    if bytes(view[:4]) == b"\xff\x4f\xff\x51":
        return _j2k_siz(view, 0)
    for kind, start, _ in _boxes(view, 0, len(view)):
        if kind == b"jp2c":
            return _j2k_siz(view, start)
    raise Corrupt("no jp2c (codestream) box")


def _j2k_siz(view: memoryview, pos: int) -> tuple[int, int]:
    if bytes(view[pos:pos + 4]) != b"\xff\x4f\xff\x51":
        raise Corrupt("the codestream does not start with SOC, SIZ")
    x1, y1, x0, y0 = struct.unpack_from(">IIII", view, pos + 8)
    if x0 > x1 or y0 > y1:
        raise Corrupt(f"image offset ({x0}, {y0}) beyond its extent ({x1}, {y1})")
    return x1 - x0, y1 - y0


def _boxes(view: memoryview, start: int, end: int):
    """ISO BMFF boxes in ``view[start:end]``: (type, content start, box end). A box that runs
    past ``end`` is yielded (its header may be all a caller needs) and ends the walk."""
    pos = start
    for _ in range(MAX_SEGMENTS):
        if pos + 8 > end:
            return
        size, kind = struct.unpack_from(">I4s", view, pos)
        header = 8
        if size == 1:
            (size,) = struct.unpack_from(">Q", view, pos + 8)
            header = 16
        elif size == 0:
            size = end - pos
        if size < header:
            raise Corrupt(f"box {kind!r} of size {size}")
        yield kind, pos + header, pos + size
        pos += size
    raise Corrupt(f"more than {MAX_SEGMENTS} boxes")


def is_avif(view: memoryview) -> bool:
    """An ISO BMFF file whose ftyp box lists the brand avif or avis (libavif's test)."""
    size = int.from_bytes(view[:4], "big")
    brands = bytes(view[8:min(size, len(view), 4096)])
    return any(brands[i:i + 4] in (b"avif", b"avis") for i in range(0, len(brands) - 3, 4))


def avif_size(view: memoryview) -> tuple[int, int]:
    meta = None
    for kind, start, end in _boxes(view, 0, len(view)):
        if kind == b"moov":
            raise ImageRejected("unknown_format", "AVIF image sequences are not supported: "
                                                  "not decoded")
        if kind == b"meta":
            meta = (start + 4, end)  # a FullBox: version and flags first
        if end > len(view):
            break
    if meta is None or meta[1] > len(view):
        raise Corrupt("no complete meta box")
    primary, properties, associations = None, [], {}
    for kind, start, end in _boxes(view, *meta):
        if kind == b"pitm":
            primary = struct.unpack_from(">H" if view[start] == 0 else ">I", view, start + 4)[0]
        elif kind == b"iprp":
            for sub, sub_start, sub_end in _boxes(view, start, end):
                if sub == b"ipco":
                    properties = list(_boxes(view, sub_start, sub_end))
                elif sub == b"ipma":
                    _ipma(view, sub_start, associations)
    if primary is None:
        raise Corrupt("no primary item (pitm)")
    for index in associations.get(primary, ()):
        if 1 <= index <= len(properties) and properties[index - 1][0] == b"ispe":
            _, start, end = properties[index - 1]
            need(view, start + 12, "ispe property")
            return struct.unpack_from(">II", view, start + 4)
    raise Corrupt(f"the primary item {primary} has no ispe (size) property")


def _ipma(view: memoryview, pos: int, associations: dict) -> None:
    version, flags = view[pos], int.from_bytes(view[pos + 1:pos + 4], "big")
    (entries,) = struct.unpack_from(">I", view, pos + 4)
    if entries > 65536:
        raise Corrupt(f"ipma box with {entries} entries")
    pos += 8
    for _ in range(entries):
        if version < 1:
            (item,) = struct.unpack_from(">H", view, pos)
            pos += 2
        else:
            (item,) = struct.unpack_from(">I", view, pos)
            pos += 4
        count = view[pos]
        pos += 1
        indices = associations.setdefault(item, [])
        for _ in range(count):
            if flags & 1:
                indices.append(struct.unpack_from(">H", view, pos)[0] & 0x7FFF)
                pos += 2
            else:
                indices.append(view[pos] & 0x7F)
                pos += 1
