"""The messages a truncated rosbag2 still holds (a recorder killed mid-write, a copy cut short).

``rosbags`` refuses such a bag whole: an MCAP file without its footer ("File end magic is
invalid"), an SQLite file whose header counts pages the file no longer has ("database disk
image is malformed"). :func:`salvage` reads what is there instead, in record order, and
stops at the cut:

- MCAP: the records are scanned from the start (schemas, channels, messages, chunks); a
  chunk cut short is read up to its last whole message when it is uncompressed (a
  compressed one is dropped whole: its data cannot be checked).
- SQLite: the whole pages are copied to a temporary file whose header is made to count
  them, then the ``messages`` rows are read in the order they were written until the first
  one the cut took.

No rclpy: the bag writer's format is read with the standard library (``mmap``, ``sqlite3``)
and compressed MCAP chunks with ``rosbags``' own decompression.
"""
from __future__ import annotations

import mmap
import shutil
import sqlite3
import struct
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

__all__ = ["Salvage", "salvage"]

_MCAP_MAGIC = b"\x89MCAP0\r\n"
_SQLITE_MAGIC = b"SQLite format 3\x00"
# MCAP opcodes read here
_SCHEMA, _CHANNEL, _MESSAGE, _CHUNK, _FOOTER, _DATA_END = 0x03, 0x04, 0x05, 0x06, 0x02, 0x0F


class _Cut(Exception):
    """The data ends inside a record."""


def _string(buf, pos: int) -> tuple[str, int]:
    if pos + 4 > len(buf):
        raise _Cut
    (n,) = struct.unpack_from("<I", buf, pos)
    if pos + 4 + n > len(buf):
        raise _Cut
    return bytes(buf[pos + 4:pos + 4 + n]).decode("utf-8", "replace"), pos + 4 + n


class _McapScan:
    """One pass over an MCAP file's records: ``(topic, msgtype, log_time, raw)`` for each
    whole message; ``cut`` says afterwards where the file ended early (None: it did not)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.schemas: dict[int, str] = {}
        self.channels: dict[int, tuple[str, str]] = {}
        self.cut: Optional[str] = None

    def _records(self, buf, pos: int, end: int, top: bool) -> Iterator[tuple]:
        while pos < end:
            if pos + 9 > end:
                raise _Cut
            op = buf[pos]
            (length,) = struct.unpack_from("<Q", buf, pos + 1)
            body = pos + 9
            if op in (_FOOTER, _DATA_END) and top:
                return
            if op == _CHUNK:
                yield from self._chunk(buf, body, min(body + length, end), body + length > end)
            elif body + length > end:
                raise _Cut
            elif op == _SCHEMA:
                (sid,) = struct.unpack_from("<H", buf, body)
                self.schemas[sid], _ = _string(buf, body + 2)
            elif op == _CHANNEL:
                cid, sid = struct.unpack_from("<HH", buf, body)
                topic, _ = _string(buf, body + 4)
                self.channels[cid] = (topic, self.schemas.get(sid, ""))
            elif op == _MESSAGE:
                cid, _, log_time = struct.unpack_from("<HIQ", buf, body)
                topic, msgtype = self.channels.get(cid, ("", ""))
                yield topic, msgtype, log_time, bytes(buf[body + 22:body + length])
            pos = body + length

    def _chunk(self, buf, body: int, end: int, cut: bool) -> Iterator[tuple]:
        if body + 28 > end:
            raise _Cut
        _, _, size, crc = struct.unpack_from("<QQQI", buf, body)
        compression, pos = _string(buf, body + 28)
        if pos + 8 > end:
            raise _Cut
        (n,) = struct.unpack_from("<Q", buf, pos)
        start = pos + 8
        if not compression:  # the records as written: those wholly present are read
            yield from self._records(buf, start, min(start + n, end), top=False)
            if cut or start + n > end:
                raise _Cut
            return
        if cut or start + n > end:
            raise _Cut  # a compressed chunk cut short cannot be checked: dropped
        from rosbags.rosbag2.storage_mcap import decompress
        inner = decompress(bytes(buf[start:start + n]), compression, size, crc)
        yield from self._records(memoryview(inner), 0, len(inner), top=False)

    def __iter__(self) -> Iterator[tuple]:
        with open(self.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            buf = memoryview(m)
            try:
                if bytes(buf[:8]) != _MCAP_MAGIC:
                    self.cut = "not an MCAP file"
                    return
                try:
                    yield from self._records(buf, 8, len(buf), top=True)
                    if len(buf) < 8 + 9 + 8 or bytes(buf[-8:]) != _MCAP_MAGIC:
                        self.cut = "the MCAP file ends without its footer"
                except (_Cut, struct.error):
                    self.cut = "the MCAP file ends inside a record"
            finally:
                buf.release()


@contextmanager
def _sqlite_copy(path: Path):
    """A read-only connection to a copy of ``path`` cut to whole pages, its header counting
    them (SQLite trusts that count and refuses the file otherwise)."""
    with open(path, "rb") as f:
        head = f.read(100)
        if len(head) < 100 or not head.startswith(_SQLITE_MAGIC):
            raise _Cut
        (page,) = struct.unpack_from(">H", head, 16)
        page = 65536 if page == 1 else page
        f.seek(0, 2)
        pages = f.tell() // page
        with tempfile.TemporaryDirectory(prefix="lingbot_ros_salvage.") as tmp:
            copy = Path(tmp) / path.name
            f.seek(0)
            with open(copy, "wb") as out:
                shutil.copyfileobj(f, out)
                out.truncate(pages * page)
                out.seek(28)
                out.write(struct.pack(">I", pages))
            conn = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
            try:
                yield conn
            finally:
                conn.close()


def _sqlite_messages(path: Path, holder: "Salvage") -> Iterator[tuple]:
    try:
        with _sqlite_copy(path) as conn:
            topics = {tid: (name, mtype) for tid, name, mtype in
                      conn.execute("SELECT id, name, type FROM topics")}
            try:
                for tid, stamp, data in conn.execute(
                        "SELECT topic_id, timestamp, data FROM messages ORDER BY id"):
                    name, mtype = topics.get(tid, ("", ""))
                    yield name, mtype, int(stamp), data
            except sqlite3.DatabaseError:
                holder.cut = "the SQLite file ends before its last message"
                return
    except (_Cut, sqlite3.DatabaseError):
        holder.cut = "the SQLite file is cut before its table of topics"


class Salvage:
    """The readable part of a truncated bag (a storage file, or a bag folder's files)."""

    def __init__(self, files: list[Path]) -> None:
        self.files = files
        self.cut: Optional[str] = None  # after an iteration: where the data ended

    def messages(self) -> Iterator[tuple[str, str, int, bytes]]:
        """``(topic, msgtype, record time ns, raw CDR)`` of every whole message, in record
        order; ``cut`` says afterwards how the data ended."""
        self.cut = None
        for file in self.files:
            if file.suffix.lower() == ".mcap":
                scan = _McapScan(file)
                yield from scan
                self.cut = scan.cut and f"{file.name}: {scan.cut}"
            else:
                yield from _sqlite_messages(file, self)
                self.cut = self.cut and f"{file.name}: {self.cut}"
            if self.cut:
                return  # a later file cannot follow a cut one

    def topics(self) -> dict[str, tuple[str, int]]:
        """``{topic: (message type, whole messages)}``: one pass over the data."""
        out: dict[str, tuple[str, int]] = {}
        for topic, msgtype, _, _ in self.messages():
            _, n = out.get(topic, (msgtype, 0))
            out[topic] = (msgtype, n + 1)
        return out


def salvage(path: Path) -> Optional[Salvage]:
    """The :class:`Salvage` of the bag at ``path`` (a .mcap/.db3 file, or a bag folder with
    such files), or None when it has no storage file this reads."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir()
                       if p.suffix.lower() in (".mcap", ".db3") and p.is_file())
    else:
        files = [path] if path.suffix.lower() in (".mcap", ".db3") else []
    return Salvage(files) if files else None
