"""Stamps and TUM trajectory files: ``timestamp tx ty tz qx qy qz qw`` lines, the stamp in
seconds written from integer nanoseconds without rounding (``1700000000.033333333``), readable
by ``evo``. Quaternions are (x, y, z, w), scalar last, as in ROS and TUM."""
from __future__ import annotations

from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Sequence

import numpy as np

from .atomic_file import PathLike, write_atomic
from .poses import as_transforms, matrix_to_tq, tq_to_matrix

__all__ = ["TUM_HEADER", "format_stamp", "parse_stamp", "write_tum", "read_tum",
           "read_tum_header"]

# The first line of every TUM file we write: how a file is recognised as ours (write_tum
# replaces no other file). A ``#`` comment: TUM readers, evo included, skip it.
TUM_HEADER = "# lingbot_ros trajectory (TUM)"


def format_stamp(stamp_ns: int) -> str:
    """Integer nanoseconds -> seconds with 9 decimals, exactly (``'12.000000001'``)."""
    ns = int(stamp_ns)
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"


def parse_stamp(text: str) -> int:
    """Seconds as decimal text (any precision, exponent allowed) -> integer nanoseconds,
    rounded half-even at the nanosecond."""
    try:
        d = Decimal(text.strip())
    except InvalidOperation:
        raise ValueError(f"not a timestamp: {text!r}") from None
    if not d.is_finite():
        raise ValueError(f"not a finite timestamp: {text!r}")
    return int((d * 1_000_000_000).to_integral_value())


def write_tum(path: PathLike, stamps_ns: Sequence[int], poses, frame: str = "",
              header: Sequence[str] = ()) -> Path:
    """Write poses (N, 4, 4) with integer-ns stamps as a TUM file; atomic (temp + rename).

    ``frame``: which frame's poses in which world (e.g. ``camera_optical in world = the first
    frame's camera_optical``), written as a ``# frame: ...`` comment line (TUM readers, evo
    included, skip ``#`` lines). ``header``: more comment lines, each written as ``# line``
    after it (e.g. ``units: m``, ``scale: depth, 0.0123 m per model unit``); a line may not
    hold a line break (ValueError).

    The file starts with ``TUM_HEADER``. An existing ``path`` is replaced only if it is a
    regular file that starts with it too (one we wrote): another file, a symlink, FIFO,
    device or folder there is neither followed nor replaced (FileExistsError). On any
    failure (writing, renaming) no temporary file is left behind.

    Values are written with ``repr`` precision, so a float64 pose reads back bit-exact
    (quaternions are canonicalised with w >= 0)."""
    path = Path(path)
    stamps = [int(s) for s in stamps_ns]
    m = as_transforms(poses, "poses").reshape(-1, 4, 4)
    if len(stamps) != len(m):
        raise ValueError(f"{len(stamps)} stamps for {len(m)} poses")
    if not np.isfinite(m).all():
        raise ValueError("poses contain non-finite values")
    comments = [("frame: " + frame) if frame else None, *header]
    for c in comments:
        if c is not None and ("\n" in str(c) or "\r" in str(c)):
            raise ValueError(f"a TUM header line may not hold a line break: {c!r}")
    t, q = matrix_to_tq(m)
    lines = [TUM_HEADER + "\n"] + [f"# {c}\n" for c in comments if c is not None]
    lines.append("# timestamp tx ty tz qx qy qz qw\n")
    for s, ti, qi in zip(stamps, t, q):
        lines.append(" ".join([format_stamp(s)] + [repr(float(v)) for v in (*ti, *qi)]) + "\n")
    return write_atomic(path, "".join(lines).encode("utf-8"),
                        replaces=(TUM_HEADER + "\n").encode("utf-8"))


def read_tum_header(path: PathLike) -> list[str]:
    """The ``#`` comment lines of a TUM file, without the ``#`` and the space after it
    (e.g. ``['frame: ...', 'units: m', ...]``; ``TUM_HEADER`` is not one of them)."""
    out = []
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if line.startswith("#") and line != TUM_HEADER:
            out.append(line[1:].strip())
    return out


def read_tum(path: PathLike) -> tuple[np.ndarray, np.ndarray]:
    """TUM file -> (stamps_ns int64 (N,), poses float64 (N, 4, 4)).

    Blank lines and ``#`` comments are skipped; fields may be separated by spaces, tabs or
    commas. A line without 8 numbers raises ValueError naming the line."""
    stamps, rows = [], []
    for no, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.replace(",", " ").split()
        if len(fields) != 8:
            raise ValueError(f"{path}:{no}: expected 8 fields (t tx ty tz qx qy qz qw), "
                             f"got {len(fields)}")
        try:
            stamps.append(parse_stamp(fields[0]))
            rows.append([float(f) for f in fields[1:]])
        except ValueError as err:
            raise ValueError(f"{path}:{no}: {err}") from None
    if not rows:
        return np.zeros(0, np.int64), np.zeros((0, 4, 4))
    arr = np.asarray(rows)
    return np.asarray(stamps, np.int64), tq_to_matrix(arr[:, :3], arr[:, 3:])
