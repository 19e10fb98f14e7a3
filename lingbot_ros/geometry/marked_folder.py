"""A folder format of ours on disk, recognised by our own marker and digest (never by a file
name), replaced in one step, read without following a link, blocking on a FIFO or reading a
file before its size is checked. The one set of rules under the stream snapshots
(``session/snapshot_folder.py``) and the stored place maps (``loop/map_folder.py``), each a
``MarkedFolder`` (its format, version, marker file, words and error types):

    folder.sweep_stale(target)              # our temporaries a killed save left beside it
    kind = folder.check_replaceable(target) # "absent" | "empty" | folder.ours, else refused
    with TempFolder(folder, target) as tmp: # .NAME.<12 hex>.tmp, its marker written first
        ...write the files into tmp.path...
        tmp.seal(manifest_sha256)           # the marker now holds the manifest's digest
        old = tmp.install(kind)             # one rename, or one exchange (renameat2)
    blob = folder.read_marked_manifest(target)   # folder.error says why not

The marker is a text file: ``<format> <version>`` on its first line, ``manifest-sha256
<hex>`` on its second once the save is complete (``writing`` until then). A folder is one of
ours we may replace only when its marker names our format, the SHA-256 of its manifest is
the marker's, and it holds nothing but the marker, the manifest and the files the manifest
lists (its ``files`` key); an empty folder (or nothing) may be written too; anything else is
refused (``folder.not_replaced``, a ``FileExistsError``) with the reason. The atomic replace
is ``atomic_dir.py``'s. A temporary folder of a killed save is ours when its name is
``.NAME.<12 hex>.tmp`` (or ``.old``) AND it holds our marker, and no save holds its lock
(``flock`` on the folder while it is written). Standard library only.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .atomic_dir import fsync_dir, replace_dir
from .atomic_file import write_new_file
from .file_rules import FileRefused, kind_of, read_regular

__all__ = ["MarkedFolder", "FolderNotReplaced", "TempFolder", "parse_marker"]

DIGEST_KEY = "manifest-sha256"
WRITING = "writing"


class FolderNotReplaced(FileExistsError):
    """The target of a save holds something that is not ours: never replaced (the base of
    each format's own type)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "not replaced"


def parse_marker(blob: bytes) -> tuple[Optional[str], Optional[int], Optional[str]]:
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
        if len(parts) == 2 and parts[0] == DIGEST_KEY and re.fullmatch(r"[0-9a-f]{64}",
                                                                         parts[1]):
            digest = parts[1]
    return head[0], int(head[1]), digest


@dataclass(frozen=True)
class MarkedFolder:
    """One folder format: what its marker says, how big its files may be, the words of its
    messages and the error types its callers catch."""

    format: str  # the marker's first word, e.g. "lingbot_ros.place_map"
    version: int
    marker: str  # the marker's file name
    error: type  # a ValueError subclass: unreadable, unfinished, corrupted
    not_replaced: type  # a FolderNotReplaced subclass: a save's target is not ours
    ours: str  # check_replaceable's answer for a complete folder of ours ("map")
    noun: str  # "place map": "no place map there", "an unfinished place map"
    adjective: str  # "place-map": "not a place-map folder", "place-map format version"
    title: str  # "lingbot_ros place map": "not a lingbot_ros place map (...)"
    no_marker: str  # the reason after "{path}: " when the marker file is missing
    max_manifest_bytes: int
    manifest: str = "manifest.json"
    max_marker_bytes: int = 4096

    def marker_text(self, digest: Optional[str]) -> bytes:
        second = f"{DIGEST_KEY} {digest}" if digest else WRITING
        return f"{self.format} {self.version}\n{second}\n".encode()

    def read(self, path: Path, max_bytes: int) -> bytes:
        """``read_regular``, every refusal and I/O error an ``error`` with the reason
        (``FileNotFoundError`` passes)."""
        try:
            return read_regular(path, max_bytes)
        except FileNotFoundError:
            raise
        except FileRefused as exc:
            raise self.error(f"{exc}") from None
        except OSError as exc:
            raise self.error(f"cannot read {path}: {exc.strerror or exc}") from None

    def read_marked_manifest(self, path: Path) -> bytes:
        """The bytes of the manifest of the folder ``path``, checked against its marker's
        SHA-256 (``error`` otherwise: not a folder, no marker, another format or version,
        an unfinished save, a manifest edited or corrupted, a link or anything not a
        regular file where a file should be)."""
        path, error = Path(path), self.error
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise error(f"{path}: no {self.noun} there (nothing at that path)") from None
        except OSError as exc:
            raise error(f"{path}: {exc.strerror or exc}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise error(f"{path}: no {self.noun} there ({kind_of(st.st_mode)}, not a folder)")
        try:
            marker = self.read(path / self.marker, self.max_marker_bytes)
        except FileNotFoundError:
            raise error(f"{path}: {self.no_marker}") from None
        fmt, version, digest = parse_marker(marker)
        if fmt != self.format:
            raise error(f"{path}: not a {self.title} (its {self.marker} names no "
                        f"{self.adjective} format of ours)")
        if version != self.version:
            raise error(f"{path}: {self.adjective} format version {version} is unknown; this "
                        f"build reads version {self.version}")
        if digest is None:
            raise error(f"{path}: an unfinished {self.noun} (its marker holds no checksum: "
                        "the save did not complete)")
        try:
            blob = self.read(path / self.manifest, self.max_manifest_bytes)
        except FileNotFoundError:
            raise error(f"{path}: {self.manifest} is missing") from None
        if hashlib.sha256(blob).hexdigest() != digest:
            raise error(f"{path}/{self.manifest} does not match the checksum in its "
                        f"{self.marker}: the {self.noun} is corrupted (or was edited)")
        return blob

    def check_replaceable(self, path: Path) -> str:
        """``"absent"`` (nothing at ``path``), ``"empty"`` (an empty folder) or ``ours`` (a
        complete folder of ours, marker and digest checked, nothing else in it);
        ``not_replaced`` with the reason for anything else."""
        path, refused, adjective = Path(path), self.not_replaced, self.adjective
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return "absent"
        if not stat.S_ISDIR(st.st_mode):
            raise refused(f"{path} exists and is {kind_of(st.st_mode)}, not a {adjective} "
                          "folder: not replaced")
        entries = set(os.listdir(path))
        if not entries:
            return "empty"
        if self.marker not in entries:
            raise refused(f"{path} exists and is not a {adjective} folder (no {self.marker} "
                          "marker: a folder lingbot_ros did not write): not replaced")
        try:
            listed = set(json.loads(self.read_marked_manifest(path)).get("files") or {})
        except (self.error, ValueError, AttributeError) as exc:
            raise refused(f"{path} exists and is not a complete {self.noun} ({exc}): not "
                          "replaced") from None
        foreign = sorted(entries - listed - {self.marker, self.manifest})
        if foreign:
            shown = ", ".join(repr(n) for n in foreign[:5]) + (", ..." if len(foreign) > 5
                                                               else "")
            raise refused(f"{path} is a {adjective} folder that also holds files not of the "
                          f"{self.ours} ({shown}): not replaced")
        return self.ours

    def sweep_stale(self, path: Path) -> list[Path]:
        """Remove the temporary folders a killed save to ``path`` left beside it: named
        ``.NAME.<12 hex>.tmp`` / ``.old``, holding our marker, and locked by no save in
        progress. Anything else is left alone. Returns what was removed."""
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
                if not stat.S_ISDIR(os.lstat(folder).st_mode) or parse_marker(read_regular(
                        folder / self.marker, self.max_marker_bytes))[0] != self.format:
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


class TempFolder:
    """The folder a save of ``folder``'s format writes, beside its target: created with the
    marker in it first (saying ``writing``) and locked while it is written; removed on any
    failure."""

    def __init__(self, folder: MarkedFolder, target: Path) -> None:
        self.folder = folder
        self.target = Path(target)
        self.token = secrets.token_hex(6)
        self.path = self.target.parent / f".{self.target.name}.{self.token}.tmp"
        self._fd: Optional[int] = None

    def __enter__(self) -> "TempFolder":
        self.path.mkdir()
        try:
            self._fd = _lock(self.path, blocking=True)
            write_new_file(self.path / self.folder.marker, self.folder.marker_text(None))
        except BaseException:
            self._release()
            shutil.rmtree(self.path, ignore_errors=True)
            raise
        return self

    def seal(self, manifest_sha256: str) -> int:
        """The save is complete: the marker holds the manifest's digest (replaced by a rename
        inside the folder), the folder is fsynced. Returns the marker's bytes."""
        marker = self.folder.marker
        new, text = self.path / f"{marker}.new", self.folder.marker_text(manifest_sha256)
        write_new_file(new, text)
        os.replace(new, self.path / marker)
        fsync_dir(self.path)
        return len(text)

    def install(self, kind: str) -> Optional[Path]:
        """Put the folder at the target (``kind``: ``check_replaceable``'s answer) in one
        step (``atomic_dir.replace_dir``); returns the old folder (now under a temporary
        name) to remove, or None."""
        aside = self.target.parent / f".{self.target.name}.{self.token}.old"
        return replace_dir(self.path, self.target, aside, replaces=kind == self.folder.ours)

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __exit__(self, exc_type, exc, tb) -> None:
        self._release()
        if exc_type is not None:
            shutil.rmtree(self.path, ignore_errors=True)
