"""A snapshot folder on disk: recognised by our own marker and digest (never by a file name),
replaced in one step, read without following a link, blocking on a FIFO or reading a file
before its size is checked.

    sweep_stale(target)                  # our temporaries a killed save left beside it
    kind = check_replaceable(target)     # "absent" | "empty" | "snapshot", else NotReplaced
    with TempFolder(target) as tmp:      # .NAME.<12 hex>.tmp, its marker written first
        ...write the files into tmp.path...
        tmp.seal(manifest_sha256)        # the marker now holds the manifest's digest
        old = tmp.install(kind)          # one rename, or one exchange (renameat2)
    manifest_bytes = read_marked_manifest(target)   # SnapshotError says why not

The marker (``lingbot_ros_snapshot``) is a text file: the format and version on its first
line, ``manifest-sha256 <hex>`` on its second once the save is complete. A folder is a
snapshot we may replace only when its marker names our format, the SHA-256 of its
``manifest.json`` is the marker's, and it holds nothing but the marker, the manifest and the
files the manifest lists; an empty folder (or nothing) may be written too; anything else is
refused (``NotReplaced``, a ``FileExistsError``) with the reason.

The replace is atomic: the new folder is written beside the target and swapped in by one
``renameat2(RENAME_EXCHANGE)`` (``geometry/atomic_dir.py``: Linux >= 3.15, glibc >= 2.28), or
renamed there in one ``rename`` when nothing (or an empty folder) is at the target. Where
the exchange is unavailable (another system, a file system without it) the old snapshot is
renamed aside (``.NAME.<hex>.old``) and the new one in: two renames, so a kill between them
leaves the old snapshot only under that name (the next save removes it). A temporary folder
of a killed save is ours when its name is ``.NAME.<12 hex>.tmp`` (or ``.old``) AND it holds
our marker; no other save holds its lock (``flock`` on the folder while it is written); the
next save to that target removes it.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import re
import secrets
import shutil
import stat
from pathlib import Path
from typing import Optional

from ..geometry.atomic_dir import exchange_supported, fsync_dir, replace_dir
from ..geometry.atomic_file import write_new_file
from ..geometry.file_rules import FileRefused, kind_of, read_regular

__all__ = ["SnapshotError", "NotReplaced", "MARKER", "MANIFEST", "FORMAT", "FORMAT_VERSION",
           "check_replaceable", "sweep_stale", "fsync_dir", "TempFolder", "read_marked_manifest",
           "read_snapshot_file", "exchange_supported"]

FORMAT = "lingbot_ros.stream_snapshot"
FORMAT_VERSION = 2  # 2: the marker file and the manifest's checksum
MANIFEST = "manifest.json"
MARKER = "lingbot_ros_snapshot"
MAX_MARKER_BYTES = 4096
MAX_MANIFEST_BYTES = 64 << 20  # the state's JSON part; the tensors are in their own files
_DIGEST_KEY = "manifest-sha256"
_WRITING = "writing"



class SnapshotError(ValueError):
    """A snapshot that cannot be written or restored; the message says why."""


class NotReplaced(FileExistsError):
    """The target of a save holds something that is not our snapshot: never replaced."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "not replaced"


# -- the marker -------------------------------------------------------------------------------
def _marker_text(digest: Optional[str]) -> bytes:
    second = f"{_DIGEST_KEY} {digest}" if digest else _WRITING
    return f"{FORMAT} {FORMAT_VERSION}\n{second}\n".encode()


def _parse_marker(blob: bytes) -> tuple[Optional[str], Optional[int], Optional[str]]:
    """(format, version, manifest digest or None) of a marker's text; (None, None, None)
    when it is not one."""
    try:
        lines = blob.decode("ascii").splitlines()
    except UnicodeDecodeError:
        return None, None, None
    head = lines[0].split() if lines else []
    if len(head) != 2 or not head[1].isdigit():
        return None, None, None
    digest = None
    if len(lines) > 1:
        parts = lines[1].split()
        if len(parts) == 2 and parts[0] == _DIGEST_KEY and re.fullmatch(r"[0-9a-f]{64}",
                                                                          parts[1]):
            digest = parts[1]
    return head[0], int(head[1]), digest


def _read(path: Path, max_bytes: int, what: str) -> bytes:
    """``read_regular``, every refusal and I/O error a ``SnapshotError`` with the reason
    (``FileNotFoundError`` passes)."""
    try:
        return read_regular(path, max_bytes)
    except FileNotFoundError:
        raise
    except FileRefused as exc:
        raise SnapshotError(f"{what}: {exc}") from None
    except OSError as exc:
        raise SnapshotError(f"cannot read {path}: {exc.strerror or exc}") from None


# -- reading ----------------------------------------------------------------------------------
def read_marked_manifest(path: Path) -> bytes:
    """The bytes of the manifest of the snapshot folder ``path``, checked against its
    marker's SHA-256 (``SnapshotError`` otherwise: not a folder, no marker, another format or
    version, an unfinished save, a manifest edited or corrupted, anything that is not a
    regular file where a file should be)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise SnapshotError(f"{path}: no snapshot there (nothing at that path)") from None
    except OSError as exc:
        raise SnapshotError(f"{path}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise SnapshotError(f"{path}: no snapshot there ({kind_of(st.st_mode)}, not a "
                            "directory)")
    try:
        marker = _read(path / MARKER, MAX_MARKER_BYTES, f"{path}/{MARKER}")
    except FileNotFoundError:
        raise SnapshotError(f"{path}: not a lingbot_ros stream snapshot of format version "
                            f"{FORMAT_VERSION} (no {MARKER} marker file; a snapshot saved "
                            "before version 2 has none and cannot be read by this build)"
                            ) from None
    fmt, version, digest = _parse_marker(marker)
    if fmt != FORMAT:
        raise SnapshotError(f"{path}: not a lingbot_ros stream snapshot (its {MARKER} names "
                            f"no snapshot format of ours)")
    if version != FORMAT_VERSION:
        raise SnapshotError(f"{path}: snapshot format version {version} is unknown; this "
                            f"build reads version {FORMAT_VERSION}")
    if digest is None:
        raise SnapshotError(f"{path}: an unfinished snapshot (its marker holds no checksum: "
                            "the save did not complete)")
    try:
        blob = _read(path / MANIFEST, MAX_MANIFEST_BYTES, f"{path}/{MANIFEST}")
    except FileNotFoundError:
        raise SnapshotError(f"{path}: {MANIFEST} is missing") from None
    if hashlib.sha256(blob).hexdigest() != digest:
        raise SnapshotError(f"{path}/{MANIFEST} does not match the checksum in its {MARKER}: "
                            "the snapshot is corrupted (or was edited)")
    return blob


def read_snapshot_file(path: Path, name: str, nbytes: int) -> bytes:
    """The tensor file ``name`` of the snapshot ``path``: a regular file (no link followed,
    a FIFO never waited on) of exactly ``nbytes`` bytes, the manifest's figure, refused
    before a byte is read when it is larger."""
    try:
        blob = _read(path / name, nbytes, f"{path}/{name}")
    except FileNotFoundError:
        raise SnapshotError(f"{path}: tensor file {name} is missing") from None
    if len(blob) != nbytes:
        raise SnapshotError(f"{path}/{name} has {len(blob)} bytes, the manifest says "
                            f"{nbytes}: truncated or replaced")
    return blob


# -- what a save may replace ------------------------------------------------------------------
def check_replaceable(path: Path) -> str:
    """``"absent"`` (nothing at ``path``), ``"empty"`` (an empty folder) or ``"snapshot"``
    (a complete snapshot of ours, its marker and digest checked, nothing else in it);
    ``NotReplaced`` with the reason for anything else."""
    import json
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "absent"
    if not stat.S_ISDIR(st.st_mode):
        raise NotReplaced(f"{path} exists and is {kind_of(st.st_mode)}, not a snapshot "
                          "folder: not replaced")
    entries = set(os.listdir(path))
    if not entries:
        return "empty"
    if MARKER not in entries:
        raise NotReplaced(f"{path} exists and is not a snapshot folder (no {MARKER} marker: "
                          "a folder lingbot_ros did not write): not replaced")
    try:
        manifest = json.loads(read_marked_manifest(path))
        listed = set(manifest.get("files") or {})
    except (SnapshotError, ValueError, AttributeError) as exc:
        raise NotReplaced(f"{path} exists and is not a complete snapshot ({exc}): not "
                          "replaced") from None
    foreign = sorted(entries - listed - {MARKER, MANIFEST})
    if foreign:
        shown = ", ".join(repr(n) for n in foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise NotReplaced(f"{path} is a snapshot folder that also holds files not of the "
                          f"snapshot ({shown}): not replaced")
    return "snapshot"


# -- temporary folders ------------------------------------------------------------------------
def _temp_pattern(name: str) -> re.Pattern:
    return re.compile(r"\." + re.escape(name) + r"\.[0-9a-f]{12}\.(tmp|old)")


def _lock(folder: Path, blocking: bool) -> Optional[int]:
    """An fd holding an exclusive ``flock`` on ``folder``; None when another holds it."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_NOFOLLOW
                 | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def sweep_stale(path: Path) -> list[Path]:
    """Remove the temporary folders a killed save to ``path`` left beside it: named
    ``.NAME.<12 hex>.tmp`` / ``.old``, holding our marker, and locked by no save in
    progress. Anything else is left alone. Returns what was removed."""
    path = Path(path)
    pattern, removed = _temp_pattern(path.name), []
    try:
        names = os.listdir(path.parent)
    except OSError:
        return removed
    for name in names:
        if not pattern.fullmatch(name):
            continue
        folder = path.parent / name
        try:
            if not stat.S_ISDIR(os.lstat(folder).st_mode):
                continue
            marker = read_regular(folder / MARKER, MAX_MARKER_BYTES)
            if _parse_marker(marker)[0] != FORMAT:
                continue
            fd = _lock(folder, blocking=False)
        except OSError:  # no marker, not ours, gone meanwhile
            continue
        if fd is None:  # a save is writing it now
            continue
        try:
            shutil.rmtree(folder, ignore_errors=True)
        finally:
            os.close(fd)
        removed.append(folder)
    return removed


class TempFolder:
    """The folder a save writes, beside its target: created with our marker in it first
    (saying ``writing``) and locked while it is written; removed on any failure."""

    def __init__(self, target: Path) -> None:
        self.target = Path(target)
        self.token = secrets.token_hex(6)
        self.path = self.target.parent / f".{self.target.name}.{self.token}.tmp"
        self._fd: Optional[int] = None

    def __enter__(self) -> "TempFolder":
        self.path.mkdir()
        try:
            self._fd = _lock(self.path, blocking=True)
            write_new_file(self.path / MARKER, _marker_text(None))
        except BaseException:
            self._release()
            shutil.rmtree(self.path, ignore_errors=True)
            raise
        return self

    def seal(self, manifest_sha256: str) -> int:
        """The save is complete: the marker holds the manifest's digest (replaced by a rename
        inside the folder), the folder is fsynced. Returns the marker's bytes."""
        new, text = self.path / f"{MARKER}.new", _marker_text(manifest_sha256)
        write_new_file(new, text)
        os.replace(new, self.path / MARKER)
        fsync_dir(self.path)
        return len(text)

    def install(self, kind: str) -> Optional[Path]:
        """Put the folder at the target (``kind``: ``check_replaceable``'s answer) in one
        step (``geometry/atomic_dir.replace_dir``); returns the old snapshot's folder (now
        under a temporary name) to remove, or None."""
        aside = self.target.parent / f".{self.target.name}.{self.token}.old"
        return replace_dir(self.path, self.target, aside, replaces=kind == "snapshot")

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __exit__(self, exc_type, exc, tb) -> None:
        self._release()
        if exc_type is not None:
            shutil.rmtree(self.path, ignore_errors=True)
