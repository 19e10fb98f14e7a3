"""The fingerprint of a stream's input: one SHA-256 per frame of its first ``FRAMES`` frames
(pixels, shape, dtype, encoding and stamp), so a snapshot says which recording it came from.

    fp = InputFingerprint()
    fp.update(image, stamp_ns, "rgb8")     # each frame handed in (only the first few count)
    fp.digests                             # ['<hex>', ...], at most FRAMES
    same_input(fp.digests, other.digests)  # whether one is a prefix of the other
    fingerprint_key(fp.digests)            # a short name for it (a folder's key)

``StreamingSession`` owns the stream's one (every frame ``submit`` is given, rejected ones
too, until a reset); it is saved in the snapshot (``manifest["input"]["fingerprint"]``;
``state_dict`` / ``load_state_dict``, a snapshot part: ``snapshot_parts.py``).
A front end that wants to check a recording before (or instead of) running it computes the
digests of its first frames with ``frame_digest``.
"""
from __future__ import annotations

import hashlib
from typing import Iterable, Optional

import numpy as np

__all__ = ["FRAMES", "InputFingerprint", "frame_digest", "same_input", "fingerprint_key",
           "check_digests"]

FRAMES = 4  # frames of the input that make its fingerprint


def frame_digest(image, stamp_ns: int, encoding: str = "rgb8") -> str:
    """SHA-256 of one input frame: its stamp, encoding, shape, dtype and pixels."""
    h = hashlib.sha256()
    try:
        array = np.ascontiguousarray(image)
        h.update(f"{int(stamp_ns)}|{encoding}|{array.shape}|{array.dtype.str}|".encode())
        if array.dtype != object:
            h.update(memoryview(array).cast("B"))
    except (TypeError, ValueError, OverflowError):  # not an image: rejected downstream
        h.update(f"{type(image).__name__}|{stamp_ns!r}|{encoding!r}".encode())
    return h.hexdigest()


def check_digests(value) -> list[str]:
    """A saved fingerprint (a list of SHA-256 hex strings), checked; ValueError otherwise."""
    if not isinstance(value, list) or len(value) > FRAMES or not all(
            isinstance(d, str) and len(d) == 64 and all(c in "0123456789abcdef" for c in d)
            for d in value):
        raise ValueError(f"an input fingerprint is a list of at most {FRAMES} SHA-256 digests")
    return list(value)


def same_input(a: Iterable[str], b: Iterable[str]) -> bool:
    """Whether two fingerprints may be of one input: the shorter is a prefix of the other
    (an empty one matches nothing)."""
    a, b = list(a), list(b)
    n = min(len(a), len(b))
    return n > 0 and a[:n] == b[:n]


def fingerprint_key(digests: Iterable[str]) -> str:
    """A short name for a fingerprint (16 hex digits)."""
    return hashlib.sha256("".join(digests).encode()).hexdigest()[:16]


class InputFingerprint:
    """The digests of the first ``FRAMES`` frames handed in since the last ``clear``."""

    def __init__(self, digests: Optional[list[str]] = None) -> None:
        self.digests: list[str] = list(digests or [])

    def update(self, image, stamp_ns: int, encoding: str = "rgb8") -> None:
        if len(self.digests) < FRAMES:
            self.digests.append(frame_digest(image, stamp_ns, encoding))

    def clear(self) -> None:
        self.digests = []

    def state_dict(self) -> list[str]:
        return list(self.digests)

    def load_state_dict(self, state: list[str]) -> None:
        """Take back ``state_dict``'s output; ``ValueError`` for anything but a list of at
        most ``FRAMES`` SHA-256 hex digests (``check_digests``)."""
        self.digests = check_digests(state)
