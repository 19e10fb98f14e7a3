"""write_ply: the file read back by an independent little parser equals the input; written
atomically like write_tum (never through a link, no temporary file left behind)."""
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from lingbot_ros.geometry import VoxelMap, write_ply

HEADER = ["ply", "format binary_little_endian 1.0", "comment lingbot_ros point map",
          "element vertex {n}",
          "property float x", "property float y", "property float z",
          "property uchar red", "property uchar green", "property uchar blue", "end_header"]


def read_ply(path):
    """Header lines, then exactly n packed records of 3 x float32 LE + 3 x uint8."""
    data = Path(path).read_bytes()
    head, sep, body = data.partition(b"end_header\n")
    assert sep, "no end_header"
    lines = (head + sep).decode("ascii").splitlines()
    n = int(lines[3].split()[2])
    assert lines == [line.format(n=n) for line in HEADER]
    record = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"),
                       ("r", "u1"), ("g", "u1"), ("b", "u1")])
    assert record.itemsize == 15 and len(body) == n * 15
    v = np.frombuffer(body, record, count=n)
    return (np.stack([v["x"], v["y"], v["z"]], axis=1),
            np.stack([v["r"], v["g"], v["b"]], axis=1))


def cloud(n, seed=0):
    rng = np.random.default_rng(seed)
    return ((rng.normal(size=(n, 3)) * 100).astype(np.float32),
            rng.integers(0, 256, (n, 3), dtype=np.uint8))


def test_written_file_reads_back_equal(tmp_path):
    xyz, rgb = cloud(1000)
    path = write_ply(tmp_path / "map.ply", xyz, rgb)
    assert path == tmp_path / "map.ply"
    got_xyz, got_rgb = read_ply(path)
    assert np.array_equal(got_xyz, xyz) and np.array_equal(got_rgb, rgb)
    # float64 input is written as float32; an empty cloud is a valid file
    write_ply(path, xyz.astype(np.float64), rgb)
    assert np.array_equal(read_ply(path)[0], xyz)
    write_ply(path, np.zeros((0, 3)), np.zeros((0, 3), np.uint8))
    assert read_ply(path)[0].shape == (0, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["map.ply"]


def test_a_voxel_map_saves_as_ply(tmp_path):
    m = VoxelMap(1.0, 1000)
    m.add(*cloud(500, seed=1))
    xyz, rgb = read_ply(write_ply(tmp_path / "map.ply", *m.arrays()))
    assert np.array_equal(xyz, m.arrays()[0]) and np.array_equal(rgb, m.arrays()[1])


@pytest.mark.parametrize("xyz,rgb,match", [
    (np.zeros(3, np.float32), np.zeros(3, np.uint8), r"xyz must have shape \(N, 3\)"),
    (np.zeros((2, 3), np.float32), np.zeros((3, 3), np.uint8), r"rgb must have shape \(2, 3\)"),
    (np.zeros((2, 3), np.int64), np.zeros((2, 3), np.uint8), "xyz must be a float array"),
    (np.zeros((2, 3), np.float32), np.ones((2, 3), np.float32), "rgb must be uint8"),
    (np.full((2, 3), np.nan, np.float32), np.zeros((2, 3), np.uint8), "non-finite"),
    (np.full((2, 3), 1e39), np.zeros((2, 3), np.uint8), "non-finite"),  # inf as float32
])
def test_invalid_input_is_refused_and_nothing_is_written(tmp_path, xyz, rgb, match):
    with pytest.raises(ValueError, match=match):
        write_ply(tmp_path / "map.ply", xyz, rgb)
    assert not list(tmp_path.iterdir())


def test_write_ply_never_follows_nor_replaces_what_is_not_a_regular_file(tmp_path):
    xyz, rgb = cloud(10)
    pointee = tmp_path / "precious.txt"
    pointee.write_text("keep me\n")
    (tmp_path / "link.ply").symlink_to(pointee)
    os.mkfifo(tmp_path / "fifo.ply")
    (tmp_path / "folder.ply").mkdir()
    for name, kind, is_kind in (("link.ply", "a symlink", stat.S_ISLNK),
                                ("fifo.ply", "a FIFO", stat.S_ISFIFO),
                                ("folder.ply", "a folder", stat.S_ISDIR)):
        with pytest.raises(FileExistsError, match=f"is {kind}, not a regular file"):
            write_ply(tmp_path / name, xyz, rgb)
        assert is_kind(os.lstat(tmp_path / name).st_mode), name
    assert pointee.read_text() == "keep me\n" and not list((tmp_path / "folder.ply").iterdir())
    # A file we wrote is replaced, atomically; one we did not write is not, even another
    # program's PLY. Nothing temporary is left by any of this.
    write_ply(tmp_path / "old.ply", *cloud(3))
    write_ply(tmp_path / "old.ply", xyz, rgb)
    assert np.array_equal(read_ply(tmp_path / "old.ply")[0], xyz)
    theirs = b"ply\nformat binary_little_endian 1.0\nelement vertex 0\nend_header\n"
    (tmp_path / "theirs.ply").write_bytes(theirs)
    with pytest.raises(FileExistsError, match="not written by lingbot_ros"):
        write_ply(tmp_path / "theirs.ply", xyz, rgb)
    assert (tmp_path / "theirs.ply").read_bytes() == theirs
    assert not list(tmp_path.glob("*.tmp"))


def test_a_missing_folder_is_an_error_and_leaves_nothing(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_ply(tmp_path / "no" / "map.ply", *cloud(3))
    assert not list(tmp_path.iterdir())


