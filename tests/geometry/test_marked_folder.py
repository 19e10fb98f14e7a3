"""Our marked folders (geometry/marked_folder.py), the one set of rules under the stream
snapshots and the stored place maps: two formats side by side, each written, sealed and
installed, read back checked, and never taken for the other (replace, read, sweep)."""
import hashlib
import json
from pathlib import Path

import pytest

from lingbot_ros.geometry.marked_folder import (FolderNotReplaced, MarkedFolder, TempFolder,
                                                parse_marker)


class ToyError(ValueError):
    pass


class ToyNotReplaced(FolderNotReplaced):
    pass


def _format(name: str) -> MarkedFolder:
    return MarkedFolder(format=f"test.{name}", version=3, marker=f"marker_{name}",
                        error=ToyError, not_replaced=ToyNotReplaced, ours=name, noun=name,
                        adjective=name, title=f"test {name}", no_marker=f"no {name} marker",
                        max_manifest_bytes=1 << 16)


A, B = _format("apple"), _format("berry")


def _save(folder: MarkedFolder, target: Path, files: dict) -> None:
    kind = folder.check_replaceable(target)
    with TempFolder(folder, target) as tmp:
        for name, data in files.items():
            (tmp.path / name).write_bytes(data)
        manifest = json.dumps({"files": {n: len(d) for n, d in files.items()}}).encode()
        (tmp.path / folder.manifest).write_bytes(manifest)
        assert parse_marker((tmp.path / folder.marker).read_bytes()) == ("test." + folder.ours,
                                                                        3, None)
        assert tmp.seal(hashlib.sha256(manifest).hexdigest()) == 89 + len(folder.ours)
        old = tmp.install(kind)
    if old is not None:
        assert folder.sweep_stale(target) == [old]


def test_a_folder_round_trips_and_is_replaced_in_one_step(tmp_path):
    target = tmp_path / "t"
    assert A.check_replaceable(target) == "absent"
    _save(A, target, {"x.bin": b"one"})
    assert A.check_replaceable(target) == "apple"
    first = A.read_marked_manifest(target)
    _save(A, target, {"x.bin": b"two!", "y.bin": b""})
    assert json.loads(A.read_marked_manifest(target)) == {"files": {"x.bin": 4, "y.bin": 0}}
    assert first != A.read_marked_manifest(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]  # no temporaries left
    marker = (target / A.marker).read_bytes().decode()
    assert marker.startswith("test.apple 3\nmanifest-sha256 ") and marker.endswith("\n")


def test_one_format_never_takes_the_others_folder(tmp_path):
    target = tmp_path / "t"
    _save(A, target, {"x.bin": b"one"})
    with pytest.raises(ToyNotReplaced, match="no marker_berry marker.*not replaced"):
        B.check_replaceable(target)
    with pytest.raises(ToyError, match="no berry marker"):
        B.read_marked_manifest(target)
    (target / B.marker).write_bytes((target / A.marker).read_bytes())
    with pytest.raises(ToyError, match="not a test berry .*names no berry format"):
        B.read_marked_manifest(target)
    # a killed save of A beside the target: B's sweep leaves it, A's removes it
    stale = tmp_path / ".t.0123456789ab.tmp"
    stale.mkdir()
    (stale / A.marker).write_bytes(A.marker_text(None))
    assert B.sweep_stale(target) == [] and stale.is_dir()
    assert A.sweep_stale(target) == [stale] and not stale.exists()


def test_what_is_refused_and_why(tmp_path):
    target = tmp_path / "t"
    _save(A, target, {"x.bin": b"one"})
    (target / "extra").write_text("mine")
    with pytest.raises(ToyNotReplaced, match=r"files not of the apple \('extra'\)"):
        A.check_replaceable(target)
    (target / "extra").unlink()
    (target / A.manifest).write_bytes(b"{}")
    with pytest.raises(ToyError, match="does not match the checksum.*apple is corrupted"):
        A.read_marked_manifest(target)
    with pytest.raises(ToyNotReplaced, match="not a complete apple"):
        A.check_replaceable(target)
    (target / A.marker).write_bytes(A.marker_text(None))
    with pytest.raises(ToyError, match="an unfinished apple"):
        A.read_marked_manifest(target)
    (tmp_path / "f").write_text("x")
    with pytest.raises(ToyNotReplaced, match="is a regular file, not a apple folder"):
        A.check_replaceable(tmp_path / "f")
    assert str(ToyNotReplaced()) == "not replaced"
    with pytest.raises(RuntimeError):  # a failed save leaves nothing behind
        with TempFolder(A, tmp_path / "u"):
            raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f", "t"]
