"""What the header readers share: the corrupt-header error, the length check, the walk bound
and :func:`byte_view`. numpy only."""
from __future__ import annotations

import numpy as np

MAX_SEGMENTS = 4096  # JPEG segments, WebP chunks, ISO BMFF boxes or entries walked in a header


class Corrupt(Exception):
    """A header that ends early or contradicts itself (becomes decode_failed)."""


def byte_view(data) -> memoryview:
    """``CompressedImage.data`` (bytes, array.array('B'), a numpy uint8 array, a list) as a
    flat memoryview of bytes, without copying where the object exposes a contiguous buffer."""
    try:
        return memoryview(data).cast("B")
    except TypeError:  # a list, or a non-contiguous array
        return memoryview(np.ascontiguousarray(np.asarray(data, dtype=np.uint8)).reshape(-1))


def need(view: memoryview, end: int, what: str) -> None:
    if end > len(view):
        raise Corrupt(f"{what} needs {end} bytes")
