"""PathCdr: the ~/path history kept as serialized records, published as CDR bytes.

rclpy turns a ``nav_msgs/Path`` into CDR in C, but it reads every field of every
``PoseStamped`` from Python objects while holding the GIL: 8.5 ms for 3,000 poses and 28 ms
for 10,000 (``publish.path_max_poses``' default) on the CI machine, every time the Path goes
out. The node's worker needs the GIL to hand the next frame to the GPU, so a long path
stalled the camera pipeline once per Path. Here each pose is packed once, when it arrives,
into a fixed-size record of a numpy array; a Path is the header, the count and those records
as one ``bytes`` (a copy of ~72 bytes per pose), published with ``Publisher.publish(bytes)``.

Layout (CDR little endian, XCDR1 as rmw serializes ROS 2 messages; alignment counts from the
first byte after the 4-byte encapsulation header)::

    Path:         stamp (int32 sec, uint32 nanosec) | frame_id (uint32 length incl. NUL,
                  chars, NUL) | uint32 pose count | poses
    PoseStamped:  stamp | frame_id | pad to 8 | position (3 float64) | orientation (4 float64)

Every pose has the path's frame id, so every record but the first starts 8-aligned and has
the same size; the first starts where the count ends and is packed on its own.
``tests/ros/unit/test_path_cdr.py`` checks the bytes against rclpy's own deserializer.
"""
from __future__ import annotations

import struct

import numpy as np

ENCAPSULATION = b"\x00\x01\x00\x00"  # CDR, little endian


def _align(offset: int, to: int) -> int:
    return (offset + to - 1) // to * to


def _cdr_string(text: str) -> bytes:
    raw = text.encode("utf-8") + b"\x00"
    return struct.pack("<I", len(raw)) + raw


class PathCdr:
    """The poses of one Path (oldest first), at most ``max_poses`` (0 = all) of them."""

    def __init__(self, frame_id: str, max_poses: int = 0) -> None:
        self.frame_id = frame_id
        self.max_poses = max_poses
        self._frame = _cdr_string(frame_id)  # the same for the Path and every pose
        self._fixed = 8 + len(self._frame)  # a pose's stamp + frame_id
        self._floats_at = _align(self._fixed, 8)  # its position and orientation
        self.record_size = self._floats_at + 7 * 8
        # grown by doubling up to max_poses (a ring from then on): memory follows the path
        self._records = self._blank(min(max_poses or 1024, 1024))
        self._start = 0  # ring: the oldest record's row
        self._count = 0

    def __len__(self) -> int:
        return self._count

    @property
    def capacity(self) -> int:
        """Poses the buffer holds now (it grows up to ``max_poses``, then rings)."""
        return self._records.shape[0]

    @property
    def nbytes(self) -> int:
        """Bytes the buffer takes now."""
        return self._records.nbytes

    def append(self, sec: int, nanosec: int, position, orientation) -> None:
        """One pose: stamp, position (x, y, z) and orientation (x, y, z, w) quaternion."""
        if self.max_poses and self._count == self.max_poses:  # full: drop the oldest (a ring)
            self._start = (self._start + 1) % self.max_poses
            self._count -= 1
        elif self._count == len(self._records):  # grow (amortised O(1) per pose)
            rows = 2 * len(self._records)
            grown = self._blank(min(rows, self.max_poses) if self.max_poses else rows)
            grown[:self._count] = self._ordered()
            self._records, self._start = grown, 0
        row = self._records[(self._start + self._count) % len(self._records)]
        row[0:8] = np.frombuffer(struct.pack("<iI", sec, nanosec), np.uint8)
        row[self._floats_at:] = np.frombuffer(struct.pack("<7d", *position, *orientation),
                                              np.uint8)
        self._count += 1

    def clear(self) -> None:
        self._start = self._count = 0

    def records(self) -> np.ndarray:
        """A copy of the poses' records (count, record_size), oldest first (a snapshot)."""
        return self._ordered().copy()

    def load_records(self, records: np.ndarray) -> None:
        """Hold ``records`` (from ``records()`` of a path with the same frame id); the newest
        ``max_poses`` are kept. ValueError for records of another size."""
        records = np.asarray(records, np.uint8)
        if records.ndim != 2 or records.shape[1] != self.record_size:
            raise ValueError(f"path records of shape {records.shape}, this path's are "
                             f"(n, {self.record_size})")
        if self.max_poses:
            records = records[-self.max_poses:]
        rows = max(1024 if not self.max_poses else min(self.max_poses, 1024), len(records))
        self._records = self._blank(rows)
        self._records[:len(records)] = records
        self._start, self._count = 0, len(records)

    def last_stamp(self) -> tuple[int, int] | None:
        """(sec, nanosec) of the newest pose, None when empty."""
        if not self._count:
            return None
        row = self._records[(self._start + self._count - 1) % len(self._records)]
        return struct.unpack("<iI", row[0:8].tobytes())

    def serialize(self, sec: int, nanosec: int) -> bytes:
        """The whole ``nav_msgs/Path`` (header stamp ``sec``/``nanosec``) as CDR bytes."""
        head = ENCAPSULATION + struct.pack("<iI", sec, nanosec) + self._frame
        count_at = _align(len(head) - 4, 4)  # offsets count from after the encapsulation
        head += b"\x00" * (count_at - (len(head) - 4)) + struct.pack("<I", self._count)
        if not self._count:
            return head
        records = self._ordered()
        first_at = len(head) - 4
        if first_at % 8 == 0:  # every record is in place as stored
            return head + records.tobytes()
        # The first pose starts 4 bytes off an 8-byte boundary: its floats shift by 4 (its
        # padding shrinks by 4 or grows to 4); it then ends 8-aligned, so the rest fit.
        first = records[0]
        pad = _align(first_at + self._fixed, 8) - (first_at + self._fixed)
        return (head + first[:self._fixed].tobytes() + b"\x00" * pad
                + first[self._floats_at:].tobytes() + records[1:].tobytes())

    def _blank(self, rows: int) -> np.ndarray:
        """(rows, record_size) zeroed records with the frame id in place."""
        records = np.zeros((rows, self.record_size), np.uint8)
        records[:, 8:self._fixed] = np.frombuffer(self._frame, np.uint8)
        return records

    def _ordered(self) -> np.ndarray:
        """(count, record_size) records, oldest first (one copy when the ring wraps)."""
        end = self._start + self._count
        if end <= len(self._records):
            return self._records[self._start:end]
        return np.concatenate([self._records[self._start:],
                               self._records[:end - len(self._records)]])
