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
refused (``MapNotReplaced``, a ``FileExistsError``) with the reason. These rules are
``geometry/marked_folder.py``'s, shared with the stream snapshots
(``session/snapshot_folder.py``, under another marker); this module names the place map's
format and reads its array files. Standard library and lingbot_ros.geometry only.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from ..geometry.atomic_dir import fsync_dir
from ..geometry.marked_folder import FolderNotReplaced, MarkedFolder
from ..geometry.marked_folder import TempFolder as _MarkedTempFolder

__all__ = ["PlaceMapError", "MapNotReplaced", "FORMAT", "FORMAT_VERSION", "MARKER",
           "MANIFEST", "read_marked_manifest", "read_map_file", "check_replaceable",
           "sweep_stale", "TempFolder", "fsync_dir"]

FORMAT = "lingbot_ros.place_map"
FORMAT_VERSION = 1
MARKER = "lingbot_ros_place_map"
MANIFEST = "manifest.json"
MAX_MARKER_BYTES = 4096
MAX_MANIFEST_BYTES = 16 << 20  # the JSON part; the arrays are in their own files


class PlaceMapError(ValueError):
    """A place map that cannot be read, written or used; the message says why."""


class MapNotReplaced(FolderNotReplaced):
    """The target of a save holds something that is not our place map: never replaced."""


MAP_FOLDER = MarkedFolder(
    format=FORMAT, version=FORMAT_VERSION, marker=MARKER, error=PlaceMapError,
    not_replaced=MapNotReplaced, ours="map", noun="place map", adjective="place-map",
    title="lingbot_ros place map",
    no_marker=(f"not a lingbot_ros place map (no {MARKER} marker file: a folder lingbot_ros "
               "did not write)"),
    max_manifest_bytes=MAX_MANIFEST_BYTES, manifest=MANIFEST, max_marker_bytes=MAX_MARKER_BYTES)

# read_marked_manifest(path) -> the manifest's bytes, checked against the marker's SHA-256;
# check_replaceable(path) -> "absent" | "empty" | "map"; sweep_stale(path) -> removed.
read_marked_manifest = MAP_FOLDER.read_marked_manifest
check_replaceable = MAP_FOLDER.check_replaceable
sweep_stale = MAP_FOLDER.sweep_stale


class TempFolder(_MarkedTempFolder):
    """The folder a save writes, beside its target: created with our marker in it first
    (saying ``writing``) and locked while it is written; removed on any failure."""

    def __init__(self, target: Path) -> None:
        super().__init__(MAP_FOLDER, target)


def read_map_file(path: Path, name: str, nbytes: int, sha256: str) -> bytes:
    """The array file ``name`` of the place map ``path``: a regular file (no link
    followed, a FIFO never waited on) of exactly ``nbytes`` bytes (refused before a byte
    is read when larger) whose SHA-256 is ``sha256``, the manifest's figures."""
    try:
        blob = MAP_FOLDER.read(Path(path) / name, nbytes)
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
