"""Test helpers that edit a snapshot on disk the way a person with an editor would, then
reseal it (its marker's checksum made to match), so the checks after the checksum's run."""
import hashlib
from pathlib import Path

from lingbot_ros.session.snapshot_folder import FORMAT, FORMAT_VERSION, MANIFEST, MARKER


def reseal(path: Path, manifest: bytes) -> None:
    """Write ``manifest`` as the snapshot's manifest, with a marker that matches it."""
    path = Path(path)
    (path / MANIFEST).write_bytes(manifest)
    (path / MARKER).write_text(f"{FORMAT} {FORMAT_VERSION}\n"
                               f"manifest-sha256 {hashlib.sha256(manifest).hexdigest()}\n")
