"""files.root and the configure checks of session.resume_from / session.save_on_shutdown
(ros/lifecycle/file_policy.py): the rules as plain functions, then over DDS: a first boot with
resume_from equal to save_on_shutdown (session.resume_if_present), a save_on_shutdown folder
that does not exist or is outside the root failing the configure before any frame, the
default root created under $ROS_HOME, and files.root '/' warned about."""
from __future__ import annotations

import dataclasses
import os

import pytest

from lingbot_ros.geometry import FileRefused, FileRoot
from lingbot_ros.ros.lifecycle.file_policy import (check_snapshot_paths, default_files_root,
                                        open_files_root, unconfined_warning, write_target)
from lingbot_ros.ros.params.declare import build_settings
from tests.ros.node_harness import NodeProcess, Probe, good_images
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture


@pytest.fixture
def root(tmp_path) -> FileRoot:
    return open_files_root(str(tmp_path / "root"))  # created


def settings(**values):
    return build_settings({name.replace("__", "."): v for name, v in values.items()})


def test_the_default_root_is_under_ros_home_and_created(tmp_path):
    assert default_files_root({"ROS_HOME": str(tmp_path / "rh")}) == tmp_path / "rh" / "lingbot_ros"
    assert default_files_root({}) == default_files_root({"ROS_HOME": ""}) == \
        default_files_root({"HOME": "x"}).parent.parent / ".ros" / "lingbot_ros"
    root = open_files_root(str(tmp_path / "a" / "b"))
    assert root.confined and (tmp_path / "a" / "b").is_dir()
    assert unconfined_warning(root) is None
    (tmp_path / "file").write_text("")
    with pytest.raises(FileRefused, match="cannot be created"):
        open_files_root(str(tmp_path / "file" / "root"))
    anywhere = open_files_root("/")
    assert not anywhere.confined and "files.root is '/'" in unconfined_warning(anywhere)


@pytest.mark.parametrize("given, says", [
    ("", "no path given"), ("/", "outside files.root"), ("..", "outside files.root"),
    ("../../etc/passwd", "outside files.root"), ("/etc/passwd", "outside files.root"),
    (".", "names a folder"), ("sub/", "names a folder"), ("a\x00b", "NUL"),
    ("x" * 10_000, "bytes long"), ("\udcff.tum", "not valid UTF-8")])
def test_write_targets_that_are_refused(root, given, says):
    (root.root / "sub").mkdir()
    with pytest.raises(FileRefused, match=says):
        write_target(root, given)


def test_a_write_target_keeps_its_last_name_unfollowed(root, tmp_path):
    (root.root / "sub").mkdir()
    assert write_target(root, "sub/t.tum") == root.root / "sub" / "t.tum"
    assert write_target(root, str(root.root / "t.tum")) == root.root / "t.tum"
    (root.root / "link.tum").symlink_to(root.root / "sub" / "t.tum")  # inside: not followed
    assert write_target(root, "link.tum") == root.root / "link.tum"
    (root.root / "out.tum").symlink_to(tmp_path / "elsewhere.tum")
    with pytest.raises(FileRefused, match="outside files.root"):
        write_target(root, "out.tum")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        write_target(root, "missing/t.tum")


def test_resume_from_and_save_on_shutdown_resolve_under_the_root(root):
    snap = root.root / "s.snap"
    snap.mkdir()
    s, notes = check_snapshot_paths(settings(session__resume_from="s.snap",
                                             session__save_on_shutdown="s.snap"), root)
    assert s.resume_from == s.save_on_shutdown == str(snap) and notes == []


def test_a_first_boot_resumes_only_if_present(root):
    both = dict(session__resume_from="s.snap", session__save_on_shutdown="s.snap")
    with pytest.raises(ValueError, match="'session.resume_from': nothing at .*resume_if_present"):
        check_snapshot_paths(settings(**both), root)
    s, notes = check_snapshot_paths(settings(**both, session__resume_if_present=True), root)
    assert s.resume_from == "" and s.save_on_shutdown == str(root.root / "s.snap")
    assert "a new stream" in notes[0]
    (root.root / "s.snap").write_text("not a folder")  # something there: never a new stream
    with pytest.raises(ValueError, match="a regular file at .*not a snapshot folder"):
        check_snapshot_paths(settings(**both, session__resume_if_present=True), root)


def test_configure_removes_what_a_killed_save_to_save_on_shutdown_left(root):
    """A save killed midway leaves its temporary folder (our name, our marker, no lock):
    configure removes it and says so; a folder of our name without our marker stays."""
    left = root.root / ".s.snap.0123456789ab.tmp"
    left.mkdir()
    (left / "lingbot_ros_snapshot").write_text("lingbot_ros.stream_snapshot 2\nwriting\n")
    (left / "kv_cache.safetensors").write_bytes(b"partial")
    foreign = root.root / ".s.snap.ba9876543210.tmp"
    foreign.mkdir()
    (foreign / "keep").write_text("x")
    s, notes = check_snapshot_paths(settings(session__save_on_shutdown="s.snap"), root)
    assert not left.exists() and (foreign / "keep").exists()
    assert len(notes) == 1 and f"removed {left}" in notes[0]
    assert check_snapshot_paths(settings(session__save_on_shutdown="s.snap"), root)[1] == []


@pytest.mark.parametrize("save, says", [
    ("missing/s.snap", "its folder .*missing does not exist"),
    ("../s.snap", "outside files.root"), ("/tmp/s.snap", "outside files.root"),
    ("file", "is a regular file, not a snapshot folder"), ("ro/s.snap", "not writable")])
def test_a_bad_save_on_shutdown_is_refused_at_configure(root, save, says):
    (root.root / "file").write_text("")
    (root.root / "ro").mkdir(mode=0o500)
    if os.geteuid() == 0 and save.startswith("ro/"):
        pytest.skip("root writes into a read-only folder")
    with pytest.raises(ValueError, match=f"'session.save_on_shutdown': .*{says}"):
        check_snapshot_paths(settings(session__save_on_shutdown=save), root)


def test_paths_are_taken_as_given_when_unconfined(tmp_path):
    anywhere = open_files_root("/")
    s, _ = check_snapshot_paths(settings(session__save_on_shutdown=str(tmp_path / "s.snap")),
                                anywhere)
    assert s.save_on_shutdown == str(tmp_path / "s.snap")
    assert dataclasses.replace(s, save_on_shutdown="") == settings()


# -- over DDS ------------------------------------------------------------------------------------
def test_a_first_boot_with_resume_from_equal_to_save_on_shutdown(tmp_path, ros_env):
    """Without session.resume_if_present the first start fails (nothing to resume, the
    reason said); with it the first start is a new stream saved on SIGINT, and the second
    start resumes it."""
    both = {"session.resume_from": "stream.snap", "session.save_on_shutdown": "stream.snap"}
    with NodeProcess(ros_env, tmp_path, both, name="strict") as node:
        assert node.wait(90) != 0
        log = node.log()
    assert "configure failed" in log and "session.resume_if_present" in log, log[-3000:]
    params = {**both, "session.resume_if_present": True, "qos.image": "reliable",
              "qos.image_depth": 100, "queue_size": 100}
    for name, frames in (("first", 3), ("second", 2)):
        with NodeProcess(ros_env, tmp_path, params, name=name) as node, Probe() as probe:
            probe.wait_active(node)
            probe.wait_for_image_subscriber()
            for msg in good_images(frames):
                probe.publish_image(msg)
            probe.wait_until(lambda: len(probe.poses) >= frames, 60, f"{frames} poses")
            node.interrupt()
            assert node.wait(60) == 0, node.log()[-3000:]
            log = node.log()
        assert "session.save_on_shutdown: wrote the stream" in log, log[-3000:]
        if name == "first":
            assert "no snapshot at" in log and "a new stream" in log, log[-3000:]
        else:
            assert "resumed the stream" in log, log[-3000:]


@pytest.mark.parametrize("params, says", [
    ({"session.save_on_shutdown": "no_such_dir/s.snap"}, "no_such_dir does not exist"),
    ({"session.save_on_shutdown": "/etc/s.snap"}, "outside files.root"),
    ({"files.root": "", "session.resume_from": "s.snap"}, "lingbot_ros/s.snap")])
def test_a_bad_snapshot_path_fails_the_configure_before_any_frame(tmp_path, ros_env, params,
                                                                   says):
    """The last case: files.root's default, $ROS_HOME/lingbot_ros, is created at configure
    (the harness sets ROS_HOME under tmp_path) and resume_from resolves under it."""
    with NodeProcess(ros_env, tmp_path, params) as node:
        assert node.wait(90) != 0
        log = node.log()
    assert "configure failed: parameter 'session." in log and says in log, log[-3000:]
    if params.get("files.root") == "":
        assert (tmp_path / "ros_home" / "lingbot_ros").is_dir()


def test_files_root_slash_is_warned_about(tmp_path, ros_env):
    with NodeProcess(ros_env, tmp_path, {"files.root": "/"}) as node, Probe() as probe:
        probe.wait_active(node)
        log = node.log()
    assert "files.root is '/'" in log and "WARN" in log, log[-3000:]
