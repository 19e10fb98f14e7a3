"""The one atomic folder replace (geometry/atomic_dir.py), as the snapshots and the fleet's
output folder use it: a complete folder swapped in by one exchange, or renamed in where
nothing (or an empty folder) is; never over a file, a link or a full folder it was not told
to replace."""
import os
from pathlib import Path

import pytest

from lingbot_ros.geometry.atomic_dir import exchange_supported, fsync_dir, replace_dir
from lingbot_ros.geometry.atomic_file import write_new_file


def _folder(path: Path, files: dict) -> Path:
    path.mkdir()
    for name, text in files.items():
        (path / name).write_text(text)
    return path


def _read(path: Path) -> dict:
    return {p.name: p.read_text() for p in sorted(path.iterdir())}


def test_exchange_swaps_the_old_folder_out_in_one_step(tmp_path):
    assert exchange_supported(tmp_path)  # this machine: the one-step path below
    target = _folder(tmp_path / "out", {"a": "old", "old_only": "x"})
    new = _folder(tmp_path / ".out.tmp", {"a": "new"})
    inode = os.lstat(new).st_ino
    old = replace_dir(new, target, tmp_path / ".out.old", replaces=True)
    assert _read(target) == {"a": "new"} and os.lstat(target).st_ino == inode
    assert old == new and _read(old) == {"a": "old", "old_only": "x"}  # the caller removes it
    assert not (tmp_path / ".out.old").exists()


@pytest.mark.parametrize("empty", [False, True])
def test_nothing_or_an_empty_folder_is_renamed_over(tmp_path, empty):
    target = tmp_path / "out"
    if empty:
        target.mkdir()
    new = _folder(tmp_path / ".out.tmp", {"a": "new"})
    assert replace_dir(new, target, tmp_path / ".out.old", replaces=False) is None
    assert _read(target) == {"a": "new"} and not new.exists()
    fsync_dir(tmp_path)


@pytest.mark.parametrize("what", ["full folder", "file", "symlink"])
def test_what_it_was_not_told_to_replace_stays(tmp_path, what):
    """``replaces=False`` (the caller found nothing there) and something appeared meanwhile:
    an OSError, the target as it was, the new folder still under its temporary name."""
    target = tmp_path / "out"
    if what == "full folder":
        _folder(target, {"theirs": "keep"})
    elif what == "file":
        target.write_text("keep")
    else:
        _folder(tmp_path / "elsewhere", {"theirs": "keep"})
        target.symlink_to(tmp_path / "elsewhere")
    new = _folder(tmp_path / ".out.tmp", {"a": "new"})
    with pytest.raises(OSError):
        replace_dir(new, target, tmp_path / ".out.old", replaces=False)
    assert _read(new) == {"a": "new"}
    if what == "file":
        assert target.read_text() == "keep"
    else:
        assert _read(target) == {"theirs": "keep"}
        assert target.is_symlink() == (what == "symlink")


def test_write_new_file_never_touches_an_existing_file(tmp_path):
    path = tmp_path / "f"
    write_new_file(path, b"one")
    assert path.read_bytes() == b"one"
    with pytest.raises(FileExistsError):
        write_new_file(path, b"two")
    assert path.read_bytes() == b"one"  # the refused write removed nothing of it
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "absent")
    with pytest.raises(FileExistsError):
        write_new_file(link, b"x")
    assert not (tmp_path / "absent").exists()
