"""Compressed image bytes -> numpy: the format identified from its first bytes, the size read
by that format's header reader (binary.py, text.py, isobmff.py) and checked against the pixel
limit before ``cv2.imdecode``, then the decoded size checked against the header's."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..image_decode import ImageRejected, opencv_encoding, require_cv2
from .binary import bmp_size, gif_size, jpeg_size, png_size, sunras_size, tiff_size, webp_size
from .common import Corrupt, byte_view
from .isobmff import avif_size, is_avif, jpeg2000_size
from .text import hdr_size, pam_size, pfm_size, pnm_size

FORMATS = ("jpeg", "png", "webp", "bmp", "pnm", "pam", "pfm", "tiff", "gif", "sunras", "hdr",
           "jpeg2000", "avif")


@dataclass(frozen=True, slots=True)
class ImageHeader:
    """What a compressed image declares: its format (one of FORMATS) and size."""

    format: str
    width: int
    height: int

    @property
    def pixels(self) -> int:
        return self.width * self.height


def read_header(data) -> ImageHeader:
    """The format and size an encoded image declares, read from its header only.

    Args:
        data: the encoded bytes (anything :func:`byte_view` takes).
    Returns:
        The header.
    Raises:
        ImageRejected: zero_size (no data, or a declared width or height of 0),
            unknown_format (no format listed in the package docstring starts this way),
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
    except (Corrupt, struct.error, IndexError, ValueError) as err:
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
    if head[4:8] == b"ftyp" and is_avif(view):
        return "avif"
    return None


_PARSERS = {"jpeg": jpeg_size, "png": png_size, "webp": webp_size, "bmp": bmp_size,
            "pnm": pnm_size, "pam": pam_size, "pfm": pfm_size, "tiff": tiff_size,
            "gif": gif_size, "sunras": sunras_size, "hdr": hdr_size,
            "jpeg2000": jpeg2000_size, "avif": avif_size}
assert set(_PARSERS) == set(FORMATS)
