"""A place map's folder on disk (``place_map.py`` holds the format): recognised by our own
marker and digest (never by a file name), replaced in one step, read without following a
link, blocking on a FIFO or reading a file before its size is checked.

    sweep_stale(target)                  # our temporaries a killed save left beside it
    kind = check_replaceable(target)     # "absent" | "empty" | "map", else MapNotReplaced
    with TempFolder(target) as tmp:      # .NAME.<12 hex>.tmp, its marker written first
        ...write the files into tmp.path...
        tmp.seal(manifest_sha256)        # the marker now holds the manifest's digest
        old = tmp.install(kind)          # one rename, or one exchange (renameat2)
    blob = read_marked_manifest(target)  # PlaceMapError says why not

The marker (``lingbot_ros_place_map``) is a text file: the format and its version on its
first line, ``manifest-sha256 <hex>`` on its second once the save is complete. A folder is a
place map we may replace only when its marker names our format, the SHA-256 of its
``manifest.json`` is the marker's, and it holds nothing but the marker, the manifest and the
files the manifest lists; an empty folder (or nothing) may be written too; anything else is
refused (``MapNotReplaced``, a ``FileExistsError``) with the reason. The atomic replace is
``geometry/atomic_dir.py``'s, as the stream snapshots' (``session/snapshot_folder.py``, the
same rules under another marker: loop/ does not import the session). Standard library and
lingbot_ros.geometry only.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
from pathlib import Path
from typing import Optional

from ..geometry.atomic_dir import fsync_dir, replace_dir
from ..geometry.atomic_file import write_new_file
from ..geometry.file_rules import FileRefused, kind_of, read_regular

__all__ = ["PlaceMapError", "MapNotReplaced", "FORMAT", "FORMAT_VERSION", "MARKER",
           "MANIFEST", "read_marked_manifest", "read_map_file", "check_replaceable",
           "sweep_stale", "TempFolder", "fsync_dir"]

FORMAT = "lingbot_ros.place_map"
FORMAT_VERSION = 1
MARKER = "lingbot_ros_place_map"
MANIFEST = "manifest.json"
MAX_MARKER_BYTES = 4096
MAX_MANIFEST_BYTES = 16 << 20  # the JSON part; the arrays are in their own files
_DIGEST_KEY = "manifest-sha256"


class PlaceMapError(ValueError):
    """A place map that cannot be read, written or used; the message says why."""


class MapNotReplaced(FileExistsError):
    """The target of a save holds something that is not our place map: never replaced."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "not replaced"


# -- the marker -------------------------------------------------------------------------------
def _marker_text(digest: Optional[str]) -> bytes:
    second = f"{_DIGEST_KEY} {digest}" if digest else "writing"
    return f"{FORMAT} {FORMAT_VERSION}\n{second}\n".encode()


def _parse_marker(blob: bytes) -> tuple[Optional[str], Optional[int], Optional[str]]:
    """(format, version, manifest digest or None); (None, None, None) when not a marker."""
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


def _read(path: Path, max_bytes: int) -> bytes:
    """``read_regular``; every refusal and I/O error a PlaceMapError (missing: passes)."""
    try:
        return read_regular(path, max_bytes)
    except FileNotFoundError:
        raise
    except FileRefused as exc:
        raise PlaceMapError(f"{exc}") from None
    except OSError as exc:
        raise PlaceMapError(f"cannot read {path}: {exc.strerror or exc}") from None


# -- reading ----------------------------------------------------------------------------------
def read_marked_manifest(path: Path) -> bytes:
    """The bytes of the manifest of the place-map folder ``path``, checked against its
    marker's SHA-256 (PlaceMapError otherwise: not a folder, no marker, another format or
    version, an unfinished save, a manifest edited or corrupted, a link or anything not a
    regular file where a file should be)."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise PlaceMapError(f"{path}: no place map there (nothing at that path)") from None
    except OSError as exc:
        raise PlaceMapError(f"{path}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise PlaceMapError(f"{path}: no place map there ({kind_of(st.st_mode)}, not a "
                            "folder)")
    try:
        marker = _read(path / MARKER, MAX_MARKER_BYTES)
    except FileNotFoundError:
        raise PlaceMapError(f"{path}: not a lingbot_ros place map (no {MARKER} marker file: "
                            "a folder lingbot_ros did not write)") from None
    fmt, version, digest = _parse_marker(marker)
    if fmt != FORMAT:
        raise PlaceMapError(f"{path}: not a lingbot_ros place map (its {MARKER} names no "
                            "place-map format of ours)")
    if version != FORMAT_VERSION:
        raise PlaceMapError(f"{path}: place-map format version {version} is unknown; this "
                            f"build reads version {FORMAT_VERSION}")
    if digest is None:
        raise PlaceMapError(f"{path}: an unfinished place map (its marker holds no "
                            "checksum: the save did not complete)")
    try:
        blob = _read(path / MANIFEST, MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        raise PlaceMapError(f"{path}: {MANIFEST} is missing") from None
    if hashlib.sha256(blob).hexdigest() != digest:
        raise PlaceMapError(f"{path}/{MANIFEST} does not match the checksum in its {MARKER}: "
                            "the place map is corrupted (or was edited)")
    return blob


def read_map_file(path: Path, name: str, nbytes: int, sha256: str) -> bytes:
    """The array file ``name`` of the place map ``path``: a regular file (no link
    followed, a FIFO never waited on) of exactly ``nbytes`` bytes (refused before a byte
    is read when larger) whose SHA-256 is ``sha256``, the manifest's figures."""
    try:
        blob = _read(Path(path) / name, nbytes)
    except FileNotFoundError:
        raise PlaceMapError(f"{path}: the file {name} is missing") from None
    except PlaceMapError as exc:
        raise PlaceMapError(f"{path}: the file {name}: {exc}") from None
    if len(blob) != nbytes:
        raise PlaceMapError(f"{path}/{name} has {len(blob)} bytes, the manifest says "
                            f"{nbytes}: truncated or replaced")
    if hashlib.sha256(blob).hexdigest() != sha256:
        raise PlaceMapError(f"{path}/{name} does not match its SHA-256 in the manifest: "
                            "the place map is corrupted (or was edited)")
    return blob


# -- what a save may replace ------------------------------------------------------------------
def check_replaceable(path: Path) -> str:
    """``"absent"`` (nothing at ``path``), ``"empty"`` (an empty folder) or ``"map"`` (a
    complete place map of ours, marker and digest checked, nothing else in it);
    ``MapNotReplaced`` with the reason for anything else."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "absent"
    if not stat.S_ISDIR(st.st_mode):
        raise MapNotReplaced(f"{path} exists and is {kind_of(st.st_mode)}, not a place-map "
                             "folder: not replaced")
    entries = set(os.listdir(path))
    if not entries:
        return "empty"
    if MARKER not in entries:
        raise MapNotReplaced(f"{path} exists and is not a place-map folder (no {MARKER} "
                             "marker: a folder lingbot_ros did not write): not replaced")
    try:
        listed = set(json.loads(read_marked_manifest(path)).get("files") or {})
    except (PlaceMapError, ValueError, AttributeError) as exc:
        raise MapNotReplaced(f"{path} exists and is not a complete place map ({exc}): not "
                             "replaced") from None
    foreign = sorted(entries - listed - {MARKER, MANIFEST})
    if foreign:
        shown = ", ".join(repr(n) for n in foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise MapNotReplaced(f"{path} is a place-map folder that also holds files not of the "
                             f"map ({shown}): not replaced")
    return "map"


# -- temporary folders ------------------------------------------------------------------------
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
    ``.NAME.<12 hex>.tmp`` / ``.old``, holding our marker, locked by no save in progress.
    Anything else is left alone. Returns what was removed."""
    path = Path(path)
    pattern = re.compile(r"\." + re.escape(path.name) + r"\.[0-9a-f]{12}\.(tmp|old)")
    removed: list[Path] = []
    try:
        names = os.listdir(path.parent)
    except OSError:
        return removed
    for name in filter(pattern.fullmatch, names):
        folder = path.parent / name
        try:
            if not stat.S_ISDIR(os.lstat(folder).st_mode) or _parse_marker(
                    read_regular(folder / MARKER, MAX_MARKER_BYTES))[0] != FORMAT:
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

    def seal(self, manifest_sha256: str) -> None:
        """The save is complete: the marker holds the manifest's digest (replaced by a rename
        inside the folder), the folder is fsynced."""
        new = self.path / f"{MARKER}.new"
        write_new_file(new, _marker_text(manifest_sha256))
        os.replace(new, self.path / MARKER)
        fsync_dir(self.path)

    def install(self, kind: str) -> Optional[Path]:
        """Put the folder at the target (``kind``: ``check_replaceable``'s answer) in one
        step; returns the old map's folder (under a temporary name) to remove, or None."""
        aside = self.target.parent / f".{self.target.name}.{self.token}.old"
        return replace_dir(self.path, self.target, aside, replaces=kind == "map")

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __exit__(self, exc_type, exc, tb) -> None:
        self._release()
        if exc_type is not None:
            shutil.rmtree(self.path, ignore_errors=True)
