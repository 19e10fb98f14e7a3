"""Header readers of the text-headed formats: PNM (P1-P6), PAM (P7), PFM (PF/Pf), Radiance HDR.

Each reader takes the data as a memoryview and returns ``(width, height)``; a bad header
raises :class:`~lingbot_ros.image_header.common.Corrupt`, ``struct.error``, ``IndexError`` or
``ValueError`` (read_header turns them into decode_failed).
"""
from __future__ import annotations

import re

from .common import Corrupt

TEXT_HEADER_BYTES = 64 * 1024  # PNM/PAM/PFM/HDR headers are looked for in this many bytes
_MAX_DIGITS = 20  # a longer number in a text header is refused (int() of it is never tried)

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
            raise Corrupt(f"no number at byte {pos}")
        if match.end() - pos > _MAX_DIGITS or match.end() == len(text):
            raise Corrupt(f"no plausible number at byte {pos}")
        values.append(int(match.group()))
        pos = match.end()
    return values


def pnm_size(view: memoryview) -> tuple[int, int]:
    width, height = _numbers(view, 2, 2)
    return width, height


def pfm_size(view: memoryview) -> tuple[int, int]:
    width, height = _numbers(view, 2, 2)
    return width, height


def pam_size(view: memoryview) -> tuple[int, int]:
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
        raise Corrupt("no ENDHDR line")
    try:
        width, height = fields[b"WIDTH"], fields[b"HEIGHT"]
    except KeyError:
        raise Corrupt("WIDTH or HEIGHT missing") from None
    if not (width.isdigit() and height.isdigit()) or max(len(width), len(height)) > _MAX_DIGITS:
        raise Corrupt(f"WIDTH {width[:30]!r} HEIGHT {height[:30]!r}")
    return int(width), int(height)


_HDR_RESOLUTION = re.compile(rb"\n\n-Y (\d{1,20}) \+X (\d{1,20})\r?\n")


def hdr_size(view: memoryview) -> tuple[int, int]:
    text = bytes(view[:TEXT_HEADER_BYTES])
    end = text.find(b"\n\n")
    if end < 0:
        raise Corrupt("no blank line after the header")
    match = _HDR_RESOLUTION.match(text, end)
    if match is None:
        raise Corrupt("the resolution line is not '-Y <height> +X <width>'")
    return int(match.group(2)), int(match.group(1))
