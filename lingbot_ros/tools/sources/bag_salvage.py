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

    def __init__(self, path: Path, with_data: bool = True) -> None:
        self.path, self.with_data = path, with_data
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
                yield (topic, msgtype, log_time,
                       bytes(buf[body + 22:body + length]) if self.with_data else None)
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


def _sqlite_copy(path: Path, folder: Path) -> Path:
    """A copy of ``path`` in ``folder`` cut to whole pages, its header counting them (SQLite
    trusts that count and refuses the file otherwise)."""
    with open(path, "rb") as f:
        head = f.read(100)
        if len(head) < 100 or not head.startswith(_SQLITE_MAGIC):
            raise _Cut
        (page,) = struct.unpack_from(">H", head, 16)
        page = 65536 if page == 1 else page
        f.seek(0, 2)
        pages = f.tell() // page
        copy = folder / path.name
        f.seek(0)
        with open(copy, "wb") as out:
            shutil.copyfileobj(f, out)
            out.truncate(pages * page)
            out.seek(28)
            out.write(struct.pack(">I", pages))
    return copy


class _Note:
    """Where one pass over the data found it cut (None: read to its end)."""
    cut: Optional[str] = None


def _sqlite_messages(copy: Path, holder: _Note, with_data: bool) -> Iterator[tuple]:
    try:
        conn = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
    except sqlite3.DatabaseError:
        holder.cut = "the SQLite file is cut before its table of topics"
        return
    try:
        try:
            topics = {tid: (name, mtype) for tid, name, mtype in
                      conn.execute("SELECT id, name, type FROM topics")}
        except sqlite3.DatabaseError:
            holder.cut = "the SQLite file is cut before its table of topics"
            return
        try:  # the data is read even to count: a row may be whole, its data cut
            for tid, stamp, raw in conn.execute(
                    "SELECT topic_id, timestamp, data FROM messages ORDER BY id"):
                name, mtype = topics.get(tid, ("", ""))
                yield name, mtype, int(stamp), raw if with_data else None
        except sqlite3.DatabaseError:
            holder.cut = "the SQLite file ends before its last message"
    finally:
        conn.close()


def _file_order(path: Path) -> tuple:
    """rosbag2's split files in their order: ``rec_2.mcap`` before ``rec_10.mcap``."""
    stem, _, n = path.stem.rpartition("_")
    return (stem, int(n), "") if n.isdigit() else (path.stem, -1, path.name)


class Salvage:
    """The readable part of a truncated bag (a storage file, or a bag folder's files). An
    SQLite file is copied once (see the module docstring), into a temporary folder removed
    with this object. Several passes may run at once (the colour and depth topics)."""

    def __init__(self, files: list[Path]) -> None:
        self.files = sorted(files, key=_file_order)
        self._tmp: Optional[tempfile.TemporaryDirectory] = None
        self._copies: dict[Path, Optional[Path]] = {}
        self._topics: Optional[dict[str, tuple[str, int]]] = None
        self._cut: Optional[str] = None

    def _sqlite(self, file: Path, note: _Note, with_data: bool) -> Iterator[tuple]:
        if file not in self._copies:
            if self._tmp is None:
                self._tmp = tempfile.TemporaryDirectory(prefix="lingbot_ros_salvage.")
            try:
                self._copies[file] = _sqlite_copy(file, Path(self._tmp.name))
            except _Cut:
                self._copies[file] = None
        if self._copies[file] is None:
            note.cut = "not an SQLite file"
            return
        yield from _sqlite_messages(self._copies[file], note, with_data)

    def _pass(self, note: _Note, with_data: bool) -> Iterator[tuple]:
        for file in self.files:
            if file.suffix.lower() == ".mcap":
                scan = _McapScan(file, with_data)
                yield from scan
                note.cut = scan.cut
            else:
                yield from self._sqlite(file, note, with_data)
            if note.cut:
                note.cut = f"{file.name}: {note.cut}"
                return  # a later file cannot follow a cut one

    def messages(self, with_data: bool = True) -> Iterator[tuple[str, str, int, Optional[bytes]]]:
        """``(topic, msgtype, record time ns, raw CDR)`` of every whole message, in record
        order (``None`` in place of the data without ``with_data``). Every pass ends at the
        same place: :attr:`cut`."""
        yield from self._pass(_Note(), with_data)

    def topics(self) -> dict[str, tuple[str, int]]:
        """``{topic: (message type, whole messages)}``: one pass over the records (once)."""
        if self._topics is None:
            out: dict[str, tuple[str, int]] = {}
            note = _Note()
            for topic, msgtype, _, _ in self._pass(note, with_data=False):
                _, n = out.get(topic, (msgtype, 0))
                out[topic] = (msgtype, n + 1)
            self._topics, self._cut = out, note.cut
        return self._topics

    @property
    def cut(self) -> Optional[str]:
        """How the data ends early (e.g. ``rec_0.mcap: the MCAP file ends inside a
        record``); None when it is whole."""
        self.topics()
        return self._cut


# The bags salvaged in this process, by their files' identity: one is opened several times
# (the colour source, the depth stream, the topic list) and is scanned (an SQLite one copied)
# once.
_SALVAGED: dict[tuple, Salvage] = {}


def salvage(path: Path) -> Optional[Salvage]:
    """The :class:`Salvage` of the bag at ``path`` (a .mcap/.db3 file, or a bag folder with
    such files), or None when it has no storage file this reads."""
    path = Path(path)
    if path.is_dir():
        files = [p for p in path.iterdir()
                 if p.suffix.lower() in (".mcap", ".db3") and p.is_file()]
    else:
        files = [path] if path.suffix.lower() in (".mcap", ".db3") else []
    if not files:
        return None
    key = tuple(sorted((str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns)
                       for p in files))
    if key not in _SALVAGED:
        while len(_SALVAGED) >= 4:
            _SALVAGED.pop(next(iter(_SALVAGED)))
        _SALVAGED[key] = Salvage(files)
    return _SALVAGED[key]
