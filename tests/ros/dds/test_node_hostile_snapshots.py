"""The node against hostile snapshot folders, over real DDS (the fault probe's cases): a
~/load_session of a snapshot whose manifest.json is a folder (IsADirectoryError killed the
node), a FIFO (froze it: no diagnostics, SIGTERM ignored), a symlink loop, a tensor file that
is a symlink to a 2 GiB file (read whole: +2 GB and 13.6 s), a manifest with one digit
edited (the scale's metres per unit: the node LOCKED at another scale), and a ~/save_session
onto a folder that only holds a file named manifest.json (deleted whole). Each is answered
within 5 s with the reason and without the foreign file's size; nothing is deleted; the node
stays up, loads a good snapshot after all that and keeps tracking."""
from __future__ import annotations

import os
import re
import shutil
import time

from tests.ros.node_harness import NodeProcess, Probe, good_images
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture

BIG = 2 << 30  # bytes: a sparse 2 GiB file


def _hostile(tmp_path, good):
    """name -> (snapshot folder, what the refusal must say)."""
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.truncate(BIG)
    cases = {}

    def case(name, edit, reason):
        path = tmp_path / name
        shutil.copytree(good, path, symlinks=True)
        edit(path)
        cases[name] = (path, reason)

    def swap(path, name, make):
        (path / name).unlink()
        make(path / name)

    def edit_digit(path):
        text = (path / "manifest.json").read_text()
        m = re.search(r'"metres_per_unit": (\d)', text) or re.search(r'"created_unix": (\d)',
                                                                      text)
        i = m.start(1)
        (path / "manifest.json").write_text(
            text[:i] + str((int(text[i]) + 1) % 10) + text[i + 1:])

    case("manifest_folder", lambda p: swap(p, "manifest.json", lambda q: q.mkdir()),
         "manifest.json is a folder, not a regular file")
    case("manifest_fifo", lambda p: swap(p, "manifest.json", os.mkfifo),
         "manifest.json is a FIFO, not a regular file")
    case("manifest_loop", lambda p: swap(p, "manifest.json", lambda q: q.symlink_to(q)),
         "manifest.json is a symlink, not a regular file")
    case("tensor_to_2gib", lambda p: swap(p, "stream.safetensors",
                                          lambda q: q.symlink_to(big)),
         "stream.safetensors is a symlink, not a regular file")
    case("edited_digit", edit_digit, "does not match the checksum .* corrupted")
    return cases


def test_hostile_snapshots_are_refused_and_the_node_goes_on(tmp_path, ros_env):
    from lingbot_ros_interfaces.srv import LoadSession, SaveSession
    images = good_images(8)
    with NodeProcess(ros_env, tmp_path, {"qos.image": "reliable", "queue_size": 20}) as node, \
            Probe() as probe:
        probe.wait_active(node)
        for msg in images[:4]:
            probe.wait_for_image_subscriber()
            probe.publish_image(msg)
        probe.wait_until(lambda: len(probe.poses) >= 4, 90, "4 poses")
        good = tmp_path / "good.snap"
        reply = probe.call("save_session", SaveSession.Request(path=str(good)), timeout=60)
        assert reply.success and reply.frames == 4, reply.message

        for name, (path, reason) in _hostile(tmp_path, good).items():
            t0 = time.monotonic()
            reply = probe.call("load_session", LoadSession.Request(path=str(path)), timeout=30)
            took = time.monotonic() - t0
            assert not reply.success and re.search(reason, reply.message), (name, reply.message)
            assert "the stream is unchanged" in reply.message, reply.message
            assert str(BIG) not in reply.message, reply.message
            assert took < 5, (name, took)
            assert node.poll() is None, node.log()[-3000:]

        foreign = tmp_path / "foreign"
        foreign.mkdir()
        (foreign / "manifest.json").write_text("{}")
        (foreign / "thesis.tex").write_text("years of work")
        reply = probe.call("save_session", SaveSession.Request(path=str(foreign)), timeout=30)
        assert not reply.success and "not a snapshot folder" in reply.message, reply.message
        assert sorted(p.name for p in foreign.iterdir()) == ["manifest.json", "thesis.tex"]

        reply = probe.call("load_session", LoadSession.Request(path=str(good)), timeout=60)
        assert reply.success and reply.frames == 4, reply.message
        for msg in images[4:]:
            probe.publish_image(msg)
        probe.wait_until(lambda: len(probe.poses) >= 8, 90, "the 4 next poses")
        assert node.poll() is None
    assert node.poll() is not None
