"""Compressed image bytes -> numpy, with the image size read from the header *before* decoding.

A few bytes can declare an enormous image (a 38-byte lossless WebP declares 16000x16000 and
decodes to 1 GB), so nothing reaches ``cv2.imdecode`` before :func:`read_header` has read its
width and height from the format's own header and :func:`decode_compressed` has checked them
against the pixel limit. Data whose format is not identified here is refused
(``unknown_format``), never handed to OpenCV to sniff; a truncated or inconsistent header is
``decode_failed``. After decoding, the array's size must equal the header's (a header that lies
about the size is refused too).

Formats (everything this OpenCV build decodes; where the size is read):

======== ============================================================================
jpeg     the first SOFn segment (other segments skipped by length, fill bytes and
         stray bytes between segments skipped as libjpeg does)
png      IHDR (APNG frames must fit inside it: OpenCV checks)
webp     VP8 (lossy key frame), VP8L (lossless) or the VP8X canvas (extended; for a
         still image the VP8/VP8L bitstream inside must declare the canvas size)
bmp      BITMAPINFOHEADER (and later versions) or BITMAPCOREHEADER
pnm      P1-P6 (PBM/PGM/PPM; comments), P7 (PAM), PF/Pf (PFM)
tiff     the first IFD (ImageWidth, ImageLength), both byte orders, classic and BigTIFF
gif      the logical screen (OpenCV checks that every frame fits inside it)
sunras   Sun raster header
hdr      Radiance RGBE resolution line (``-Y H +X W``)
jpeg2000 the codestream's SIZ marker (a raw J2K codestream, or the jp2c box of a JP2)
avif     the ispe property of the primary item (still images; image sequences are refused)
======== ============================================================================

The decoded array is named by :func:`lingbot_ros.image_decode.opencv_encoding` (the one
table: mono8/16, bgr8/16, bgra8/16). Used by the ROS node (``ros/convert.py``) and the offline
sources (``tools/frame.py``). No rclpy, no torch; OpenCV is imported on the first decode.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .image_decode import ImageRejected, opencv_encoding, require_cv2

__all__ = ["FORMATS", "ImageHeader", "byte_view", "decode_compressed", "read_header"]

FORMATS = ("jpeg", "png", "webp", "bmp", "pnm", "pam", "pfm", "tiff", "gif", "sunras", "hdr",
           "jpeg2000", "avif")

TEXT_HEADER_BYTES = 64 * 1024  # PNM/PAM/PFM/HDR headers are looked for in this many bytes
MAX_SEGMENTS = 4096  # JPEG segments, WebP chunks, ISO BMFF boxes or entries walked in a header
_MAX_DIGITS = 20  # a longer number in a text header is refused (int() of it is never tried)


@dataclass(frozen=True, slots=True)
class ImageHeader:
    """What a compressed image declares: its format (one of FORMATS) and size."""

    format: str
    width: int
    height: int

    @property
    def pixels(self) -> int:
        return self.width * self.height


class _Corrupt(Exception):
    """A header that ends early or contradicts itself (becomes decode_failed)."""


def byte_view(data) -> memoryview:
    """``CompressedImage.data`` (bytes, array.array('B'), a numpy uint8 array, a list) as a
    flat memoryview of bytes, without copying where the object exposes a contiguous buffer."""
    try:
        return memoryview(data).cast("B")
    except TypeError:  # a list, or a non-contiguous array
        return memoryview(np.ascontiguousarray(np.asarray(data, dtype=np.uint8)).reshape(-1))


def read_header(data) -> ImageHeader:
    """The format and size an encoded image declares, read from its header only.

    Args:
        data: the encoded bytes (anything :func:`byte_view` takes).
    Returns:
        The header.
    Raises:
        ImageRejected: zero_size (no data, or a declared width or height of 0),
            unknown_format (no format listed in the module docstring starts this way),
            decode_failed (a truncated or corrupt header).
    """
    view = byte_view(data)
    if len(view) == 0:
        raise ImageRejected("zero_size", "no data")
    head = bytes(view[:16])
    fmt = _identify(view, head)
    if fmt is None:
        raise ImageRejected("unknown_format", f"data starting {head[:12]!r} is none of "
                                              f"{', '.join(FORMATS)}: not decoded")
    try:
        width, height = _PARSERS[fmt](view)
    except ImageRejected:
        raise
    except (_Corrupt, struct.error, IndexError, ValueError) as err:
        detail = str(err) or "the header ends early"
        raise ImageRejected("decode_failed", f"corrupt or truncated {fmt} header "
                                             f"({len(view)} bytes): {detail}") from None
    if width == 0 or height == 0:
        raise ImageRejected("zero_size", f"{fmt} header declares {width}x{height}")
    return ImageHeader(fmt, width, height)


def decode_compressed(data, *, max_pixels: int,
                      max_bytes: Optional[int] = None) -> tuple[np.ndarray, str]:
    """Encoded image bytes -> ``(array, encoding)``, the size checked before decoding.

    Args:
        data: the encoded bytes (anything :func:`byte_view` takes).
        max_pixels: refuse a declared ``width * height`` above this, before decoding.
        max_bytes: refuse more encoded bytes than this; None: no bound.
    Returns:
        ``(H, W)`` or ``(H, W, C)`` uint8/uint16 array as OpenCV decodes it (BGR(A) order,
        ``IMREAD_UNCHANGED``: no EXIF rotation) and its encoding (mono8, mono16, bgr8, bgr16,
        bgra8, bgra16).
    Raises:
        ImageRejected: zero_size, too_large (bytes or declared pixels), unknown_format,
            decode_failed (corrupt header, OpenCV failing, or a decoded size that is not the
            header's), unknown_encoding (a decoded type without an encoding, e.g. float32
            from HDR or PFM).
    """
    view = byte_view(data)
    if len(view) == 0:
        raise ImageRejected("zero_size", "no data")
    if max_bytes is not None and len(view) > max_bytes:
        raise ImageRejected("too_large", f"{len(view)} bytes is over max_bytes={max_bytes}")
    header = read_header(view)
    if header.pixels > max_pixels:
        raise ImageRejected("too_large", f"{header.format} header declares "
                                         f"{header.width}x{header.height}, over "
                                         f"max_pixels={max_pixels}; not decoded")
    cv2 = require_cv2("decoding compressed images")
    try:
        array = cv2.imdecode(np.frombuffer(view, np.uint8), cv2.IMREAD_UNCHANGED)
    except cv2.error as err:
        raise ImageRejected("decode_failed", f"OpenCV cannot decode this {header.format} "
                                             f"({len(view)} bytes): "
                                             f"{str(err).strip()[-200:]}") from None
    if array is None:
        raise ImageRejected("decode_failed", f"OpenCV cannot decode this {header.format} "
                                             f"({len(view)} bytes)")
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.shape[:2] != (header.height, header.width):
        raise ImageRejected("decode_failed", f"decoded {array.shape[1]}x{array.shape[0]} is "
                                             f"not the {header.width}x{header.height} its "
                                             f"{header.format} header declares")
    return array, opencv_encoding(array)


# --- identification -------------------------------------------------------------------------

_JP2_SIGNATURE = b"\x00\x00\x00\x0cjP  \r\n\x87\n"


def _identify(view: memoryview, head: bytes) -> Optional[str]:
    if head[:2] == b"\xff\xd8":
        return "jpeg"
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head[:2] == b"BM":
        return "bmp"
    if len(head) >= 3 and head[0:1] == b"P" and head[2:3].isspace():
        if head[1:2] in b"123456":
            return "pnm"
        if head[1:2] == b"7":
            return "pam"
        if head[1:2] in (b"F", b"f"):
            return "pfm"
    if head[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
        return "tiff"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if head[:4] == b"\x59\xa6\x6a\x95":
        return "sunras"
    if head[:6] == b"#?RGBE" or head[:10] == b"#?RADIANCE":
        return "hdr"
    if head[:12] == _JP2_SIGNATURE or head[:4] == b"\xff\x4f\xff\x51":
        return "jpeg2000"
    if head[4:8] == b"ftyp" and _is_avif(view):
        return "avif"
    return None


# --- parsers: view -> (width, height); raise _Corrupt / struct.error on a bad header ----------

def _need(view: memoryview, end: int, what: str) -> None:
    if end > len(view):
        raise _Corrupt(f"{what} needs {end} bytes")


_SOF_MARKERS = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD,
                          0xCE, 0xCF})


_NOT_FF = re.compile(rb"[^\xff]*")
_FF = re.compile(rb"\xff*")


def _jpeg(view: memoryview) -> tuple[int, int]:
    n = len(view)
    pos = 2  # after SOI
    for _ in range(MAX_SEGMENTS):
        # next_marker as libjpeg reads it: skip stray bytes, then 0xFF fill bytes; FF 00 is
        # no marker (keep looking).
        pos = _FF.match(view, _NOT_FF.match(view, pos).end()).end()
        if pos >= n:
            raise _Corrupt("no SOF segment before the end of the data")
        marker = view[pos]
        pos += 1
        if marker == 0x00 or marker == 0x01 or 0xD0 <= marker <= 0xD7:
            continue  # stuffed zero, TEM, RSTn: no length field
        if marker == 0xD8:
            raise _Corrupt("a second SOI marker")
        if marker in (0xD9, 0xDA):
            raise _Corrupt(f"{'EOI' if marker == 0xD9 else 'SOS'} before any SOF segment")
        (length,) = struct.unpack_from(">H", view, pos)
        if length < 2:
            raise _Corrupt(f"segment FF{marker:02X} has length {length}")
        if marker in _SOF_MARKERS:
            if length < 8:
                raise _Corrupt(f"SOF segment of length {length}")
            height, width = struct.unpack_from(">HH", view, pos + 3)
            return width, height
        pos += length
    raise _Corrupt(f"no SOF segment in the first {MAX_SEGMENTS} markers")


def _png(view: memoryview) -> tuple[int, int]:
    _need(view, 24, "IHDR")
    length, kind = struct.unpack_from(">I4s", view, 8)
    if kind != b"IHDR" or length != 13:
        raise _Corrupt(f"the first chunk is {kind!r} of length {length}, not IHDR")
    return struct.unpack_from(">II", view, 16)


def _webp(view: memoryview) -> tuple[int, int]:
    kind, size = struct.unpack_from("<4sI", view, 12)
    if kind == b"VP8X":
        _need(view, 30, "VP8X chunk")
        flags = view[20]
        width = int.from_bytes(view[24:27], "little") + 1
        height = int.from_bytes(view[27:30], "little") + 1
        if not flags & 0x02:  # a still image: its bitstream must declare the canvas size
            inner = _webp_inner_size(view, 20 + size + (size & 1))
            if inner != (width, height):
                raise _Corrupt(f"VP8X canvas {width}x{height} but its bitstream declares "
                               f"{inner[0]}x{inner[1]}")
        return width, height
    if kind in (b"VP8 ", b"VP8L"):
        return _webp_bitstream_size(view, kind, 20)
    raise _Corrupt(f"first chunk {kind!r} is not VP8, VP8L or VP8X")


def _webp_inner_size(view: memoryview, pos: int) -> tuple[int, int]:
    """The size declared by the first VP8/VP8L chunk at or after ``pos`` (VP8X images)."""
    for _ in range(MAX_SEGMENTS):
        kind, size = struct.unpack_from("<4sI", view, pos)
        if kind in (b"VP8 ", b"VP8L"):
            return _webp_bitstream_size(view, kind, pos + 8)
        pos += 8 + size + (size & 1)
    raise _Corrupt(f"no VP8/VP8L chunk in the first {MAX_SEGMENTS} chunks")


def _webp_bitstream_size(view: memoryview, kind: bytes, pos: int) -> tuple[int, int]:
    if kind == b"VP8L":
        _need(view, pos + 5, "VP8L header")
        if view[pos] != 0x2F:
            raise _Corrupt("VP8L signature byte is not 0x2f")
        (bits,) = struct.unpack_from("<I", view, pos + 1)
        if bits >> 29:
            raise _Corrupt(f"VP8L version {bits >> 29}")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    _need(view, pos + 10, "VP8 frame header")
    if view[pos] & 1:
        raise _Corrupt("VP8 data does not start with a key frame")
    if bytes(view[pos + 3:pos + 6]) != b"\x9d\x01\x2a":
        raise _Corrupt("VP8 start code missing")
    width, height = struct.unpack_from("<HH", view, pos + 6)
    return width & 0x3FFF, height & 0x3FFF


def _bmp(view: memoryview) -> tuple[int, int]:
    (dib,) = struct.unpack_from("<I", view, 14)
    if dib == 12:  # BITMAPCOREHEADER
        return struct.unpack_from("<HH", view, 18)
    if dib < 36:  # OpenCV reads no other header
        raise _Corrupt(f"DIB header of {dib} bytes")
    width, height = struct.unpack_from("<ii", view, 18)
    if width < 0:
        raise _Corrupt(f"negative width {width}")
    return width, abs(height)  # a negative height is a top-down bitmap


_SKIP_SPACE_AND_COMMENTS = re.compile(rb"(?:\s+|#[^\r\n]*)*")
_DIGITS = re.compile(rb"\d+")


def _numbers(view: memoryview, pos: int, count: int) -> list[int]:
    """``count`` decimal numbers from ``pos``, separated by whitespace and '#' comments."""
    text = view[:TEXT_HEADER_BYTES]
    values = []
    for _ in range(count):
        pos = _SKIP_SPACE_AND_COMMENTS.match(text, pos).end()
        match = _DIGITS.match(text, pos)
        if match is None:
            raise _Corrupt(f"no number at byte {pos}")
        if match.end() - pos > _MAX_DIGITS or match.end() == len(text):
            raise _Corrupt(f"no plausible number at byte {pos}")
        values.append(int(match.group()))
        pos = match.end()
    return values


def _pnm(view: memoryview) -> tuple[int, int]:
    width, height = _numbers(view, 2, 2)
    return width, height


def _pfm(view: memoryview) -> tuple[int, int]:
    width, height = _numbers(view, 2, 2)
    return width, height


def _pam(view: memoryview) -> tuple[int, int]:
    text = bytes(view[:TEXT_HEADER_BYTES])
    fields = {}
    for line in text[3:].split(b"\n"):
        line = line.strip()
        if not line or line.startswith(b"#"):
            continue
        if line == b"ENDHDR":
            break
        key, _, value = line.partition(b" ")
        fields[key] = value.strip()
    else:
        raise _Corrupt("no ENDHDR line")
    try:
        width, height = fields[b"WIDTH"], fields[b"HEIGHT"]
    except KeyError:
        raise _Corrupt("WIDTH or HEIGHT missing") from None
    if not (width.isdigit() and height.isdigit()) or max(len(width), len(height)) > _MAX_DIGITS:
        raise _Corrupt(f"WIDTH {width[:30]!r} HEIGHT {height[:30]!r}")
    return int(width), int(height)


def _tiff(view: memoryview) -> tuple[int, int]:
    order = "<" if bytes(view[:2]) == b"II" else ">"
    big = view[2 + (order == ">")] == 0x2B  # 43: BigTIFF
    if big:
        offset_size, zero, ifd = struct.unpack_from(order + "HHQ", view, 4)
        if offset_size != 8 or zero:
            raise _Corrupt("BigTIFF header")
        (count,) = struct.unpack_from(order + "Q", view, ifd)
        if count > 65535:
            raise _Corrupt(f"an IFD of {count} entries")
        entries, entry_size = ifd + 8, 20
    else:
        (ifd,) = struct.unpack_from(order + "I", view, 4)
        (count,) = struct.unpack_from(order + "H", view, ifd)
        entries, entry_size = ifd + 2, 12
    _need(view, entries + count * entry_size, f"an IFD of {count} entries")
    size = {}
    for i in range(count):
        at = entries + i * entry_size
        tag, kind = struct.unpack_from(order + "HH", view, at)
        if tag not in (256, 257):  # ImageWidth, ImageLength
            continue
        value_at = at + (12 if big else 8)
        n = struct.unpack_from(order + ("Q" if big else "I"), view, at + 4)[0]
        if n < 1:
            raise _Corrupt(f"tag {tag} has no value")
        if kind == 3:  # SHORT
            size[tag] = struct.unpack_from(order + "H", view, value_at)[0]
        elif kind == 4:  # LONG
            size[tag] = struct.unpack_from(order + "I", view, value_at)[0]
        elif kind == 16 and big:  # LONG8
            size[tag] = struct.unpack_from(order + "Q", view, value_at)[0]
        else:
            raise _Corrupt(f"tag {tag} has type {kind}")
    if 256 not in size or 257 not in size:
        raise _Corrupt("the first IFD has no ImageWidth or ImageLength")
    return size[256], size[257]


def _gif(view: memoryview) -> tuple[int, int]:
    return struct.unpack_from("<HH", view, 6)


def _sunras(view: memoryview) -> tuple[int, int]:
    width, height = struct.unpack_from(">ii", view, 4)
    if width < 0 or height < 0:
        raise _Corrupt(f"negative size {width}x{height}")
    return width, height


_HDR_RESOLUTION = re.compile(rb"\n\n-Y (\d{1,20}) \+X (\d{1,20})\r?\n")


def _hdr(view: memoryview) -> tuple[int, int]:
    text = bytes(view[:TEXT_HEADER_BYTES])
    end = text.find(b"\n\n")
    if end < 0:
        raise _Corrupt("no blank line after the header")
    match = _HDR_RESOLUTION.match(text, end)
    if match is None:
        raise _Corrupt("the resolution line is not '-Y <height> +X <width>'")
    return int(match.group(2)), int(match.group(1))


def _jpeg2000(view: memoryview) -> tuple[int, int]:
    if bytes(view[:4]) == b"\xff\x4f\xff\x51":
        return _j2k_siz(view, 0)
    for kind, start, _ in _boxes(view, 0, len(view)):
        if kind == b"jp2c":
            return _j2k_siz(view, start)
    raise _Corrupt("no jp2c (codestream) box")


def _j2k_siz(view: memoryview, pos: int) -> tuple[int, int]:
    if bytes(view[pos:pos + 4]) != b"\xff\x4f\xff\x51":
        raise _Corrupt("the codestream does not start with SOC, SIZ")
    x1, y1, x0, y0 = struct.unpack_from(">IIII", view, pos + 8)
    if x0 > x1 or y0 > y1:
        raise _Corrupt(f"image offset ({x0}, {y0}) beyond its extent ({x1}, {y1})")
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
            raise _Corrupt(f"box {kind!r} of size {size}")
        yield kind, pos + header, pos + size
        pos += size
    raise _Corrupt(f"more than {MAX_SEGMENTS} boxes")


def _is_avif(view: memoryview) -> bool:
    """An ISO BMFF file whose ftyp box lists the brand avif or avis (libavif's test)."""
    size = int.from_bytes(view[:4], "big")
    brands = bytes(view[8:min(size, len(view), 4096)])
    return any(brands[i:i + 4] in (b"avif", b"avis") for i in range(0, len(brands) - 3, 4))


def _avif(view: memoryview) -> tuple[int, int]:
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
        raise _Corrupt("no complete meta box")
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
        raise _Corrupt("no primary item (pitm)")
    for index in associations.get(primary, ()):
        if 1 <= index <= len(properties) and properties[index - 1][0] == b"ispe":
            _, start, end = properties[index - 1]
            _need(view, start + 12, "ispe property")
            return struct.unpack_from(">II", view, start + 4)
    raise _Corrupt(f"the primary item {primary} has no ispe (size) property")


def _ipma(view: memoryview, pos: int, associations: dict) -> None:
    version, flags = view[pos], int.from_bytes(view[pos + 1:pos + 4], "big")
    (entries,) = struct.unpack_from(">I", view, pos + 4)
    if entries > 65536:
        raise _Corrupt(f"ipma box with {entries} entries")
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


_PARSERS = {"jpeg": _jpeg, "png": _png, "webp": _webp, "bmp": _bmp, "pnm": _pnm, "pam": _pam,
            "pfm": _pfm, "tiff": _tiff, "gif": _gif, "sunras": _sunras, "hdr": _hdr,
            "jpeg2000": _jpeg2000, "avif": _avif}
assert set(_PARSERS) == set(FORMATS)
