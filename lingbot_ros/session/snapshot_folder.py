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
refused (``NotReplaced``, a ``FileExistsError``) with the reason. These rules are
``geometry/marked_folder.py``'s, shared with the stored place maps (``loop/map_folder.py``,
under another marker); this module names the snapshot's format and reads its tensor files.

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

from pathlib import Path

from ..geometry.atomic_dir import exchange_supported, fsync_dir
from ..geometry.marked_folder import FolderNotReplaced, MarkedFolder
from ..geometry.marked_folder import TempFolder as _MarkedTempFolder

__all__ = ["SnapshotError", "NotReplaced", "MARKER", "MANIFEST", "FORMAT", "FORMAT_VERSION",
           "check_replaceable", "sweep_stale", "fsync_dir", "TempFolder", "read_marked_manifest",
           "read_snapshot_file", "exchange_supported"]

FORMAT = "lingbot_ros.stream_snapshot"
FORMAT_VERSION = 2  # 2: the marker file and the manifest's checksum
MANIFEST = "manifest.json"
MARKER = "lingbot_ros_snapshot"
MAX_MARKER_BYTES = 4096
MAX_MANIFEST_BYTES = 64 << 20  # the state's JSON part; the tensors are in their own files


class SnapshotError(ValueError):
    """A snapshot that cannot be written or restored; the message says why."""


class NotReplaced(FolderNotReplaced):
    """The target of a save holds something that is not our snapshot: never replaced."""


SNAPSHOT_FOLDER = MarkedFolder(
    format=FORMAT, version=FORMAT_VERSION, marker=MARKER, error=SnapshotError,
    not_replaced=NotReplaced, ours="snapshot", noun="snapshot", adjective="snapshot",
    title="lingbot_ros stream snapshot",
    no_marker=(f"not a lingbot_ros stream snapshot of format version {FORMAT_VERSION} (no "
               f"{MARKER} marker file; a snapshot saved before version 2 has none and cannot "
               "be read by this build)"),
    max_manifest_bytes=MAX_MANIFEST_BYTES, manifest=MANIFEST, max_marker_bytes=MAX_MARKER_BYTES)

# read_marked_manifest(path) -> the manifest's bytes, checked against the marker's SHA-256;
# check_replaceable(path) -> "absent" | "empty" | "snapshot"; sweep_stale(path) -> removed.
read_marked_manifest = SNAPSHOT_FOLDER.read_marked_manifest
check_replaceable = SNAPSHOT_FOLDER.check_replaceable
sweep_stale = SNAPSHOT_FOLDER.sweep_stale


class TempFolder(_MarkedTempFolder):
    """The folder a save writes, beside its target: created with our marker in it first
    (saying ``writing``) and locked while it is written; removed on any failure."""

    def __init__(self, target: Path) -> None:
        super().__init__(SNAPSHOT_FOLDER, target)


def read_snapshot_file(path: Path, name: str, nbytes: int) -> bytes:
    """The tensor file ``name`` of the snapshot ``path``: a regular file (no link followed,
    a FIFO never waited on) of exactly ``nbytes`` bytes, the manifest's figure, refused
    before a byte is read when it is larger."""
    try:
        blob = SNAPSHOT_FOLDER.read(Path(path) / name, nbytes)
    except FileNotFoundError:
        raise SnapshotError(f"{path}: tensor file {name} is missing") from None
    if len(blob) != nbytes:
        raise SnapshotError(f"{path}/{name} has {len(blob)} bytes, the manifest says "
                            f"{nbytes}: truncated or replaced")
    return blob
