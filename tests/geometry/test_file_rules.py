"""geometry/file_rules.py: a caller's path confined to the root; only regular files read, and
their size checked before a byte is read."""
from __future__ import annotations

import os

import pytest

from lingbot_ros.geometry.file_rules import (MAX_PATH_BYTES, FileRefused, FileRoot,
                                             check_regular, read_regular)


@pytest.fixture
def root(tmp_path):
    (tmp_path / "root").mkdir()
    return FileRoot(tmp_path / "root")


def test_relative_paths_resolve_under_the_root(root):
    assert root.resolve("a/b.tum") == root.root / "a" / "b.tum"
    assert root.resolve("x/../b.tum") == root.root / "b.tum"


@pytest.mark.parametrize("given", ["..", "../x", "a/../../x", "/etc/passwd", "/"])
def test_paths_outside_the_root_are_refused(root, given):
    with pytest.raises(FileRefused, match="outside files.root"):
        root.resolve(given)


def test_a_symlink_out_of_the_root_is_refused_and_one_inside_is_followed(root, tmp_path):
    (root.root / "out").symlink_to(tmp_path)
    with pytest.raises(FileRefused, match="outside files.root"):
        root.resolve("out/x.tum")
    (root.root / "sub").mkdir()
    (root.root / "in").symlink_to(root.root / "sub")
    assert root.resolve("in/x.tum") == root.root / "sub" / "x.tum"


def test_an_absolute_path_inside_the_root_is_taken(root):
    assert root.resolve(str(root.root / "x.ply")) == root.root / "x.ply"


@pytest.mark.parametrize("given, reason", [
    ("", "no path given"), ("a\x00b", "NUL"), ("a\udcffb", "UTF-8"),
    ("x" * (MAX_PATH_BYTES + 1), "bytes long"), ("d/" + "n" * 300, "over 255 bytes")])
def test_names_that_are_not_text_are_refused(root, given, reason):
    with pytest.raises(FileRefused, match=reason):
        root.resolve(given)


def test_an_unconfined_root_takes_any_path_but_checks_names(tmp_path):
    free = FileRoot("/")
    assert not free.confined
    assert free.resolve("/etc/hostname") == FileRoot(None).resolve("/etc/hostname")
    with pytest.raises(FileRefused):
        free.resolve("")


def test_read_regular_reads_a_file_within_the_limit(tmp_path):
    (tmp_path / "f").write_bytes(b"12345")
    assert read_regular(tmp_path / "f", 5) == b"12345"


def test_a_file_over_the_limit_is_refused_without_telling_its_size(tmp_path):
    (tmp_path / "f").write_bytes(b"x" * 1000)
    with pytest.raises(FileRefused) as info:
        read_regular(tmp_path / "f", 999)
    assert "1000" not in str(info.value) and "larger than the 999 bytes" in str(info.value)


def test_a_symlink_folder_and_fifo_are_refused_and_the_fifo_never_blocks(tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    for name, kind in (("link", "symlink"), ("dir", "folder"), ("fifo", "FIFO")):
        with pytest.raises(FileRefused, match=kind):
            read_regular(tmp_path / name, 10)
        if name != "link":
            with pytest.raises(FileRefused, match=kind):
                check_regular(tmp_path / name)
    with pytest.raises(FileRefused, match="symlink"):
        check_regular(tmp_path / "link")


def test_a_fifo_with_a_writer_is_refused_too(tmp_path):
    """A FIFO that has a writer (and data waiting) is refused all the same, without reading."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # so the writer's open succeeds
    writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(writer, b"data")
        with pytest.raises(FileRefused, match="FIFO"):
            read_regular(fifo, 10)
        assert os.read(reader, 10) == b"data"  # nothing was read from it
    finally:
        os.close(writer)
        os.close(reader)


def test_a_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "nope", 10)
    with pytest.raises(FileNotFoundError):
        check_regular(tmp_path / "nope")


def test_a_refusal_is_an_oserror_whose_text_is_the_reason():
    exc = FileRefused("because", "/x")
    assert isinstance(exc, OSError) and str(exc) == "because" and exc.path == "/x"
