"""Resume after a restart, over real DDS: node A streams the first half of a bag and saves
its stream on SIGINT (session.save_on_shutdown); node B resumes it (session.resume_from) and
streams the rest. B's poses are those of one node that streamed the whole bag. A corrupted
snapshot fails B's configure with the reason."""
from __future__ import annotations

import dataclasses
import json

import numpy as np

from lingbot_ros.tools.synthetic import render_sequence
from lingbot_ros.tools.synthetic_writers import write_bag
from tests.ros.node_harness import IMAGE_TOPIC, NodeProcess, Probe, stamp_ns
from tests.ros.ros_helpers import BAG_START_NS, finish, start_replay
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture

FRAMES, HALF = 16, 8
NO_DROP = {"qos.image": "reliable", "qos.image_depth": 100, "queue_size": 100,
           "session.rollover_keyframes": 6}  # a rollover in each half


def bags(tmp_path):
    seq = render_sequence(FRAMES, 80, 60, start_ns=BAG_START_NS)

    def part(name, a, b):
        sub = dataclasses.replace(seq, images=seq.images[a:b], depths=seq.depths[a:b],
                                  c2w=seq.c2w[a:b], stamps_ns=seq.stamps_ns[a:b])
        return write_bag(sub, tmp_path / name, storage="mcap").path

    return part("whole", 0, FRAMES), part("first", 0, HALF), part("second", HALF, FRAMES)


def replay(bag, env):
    rc, _, err = finish(start_replay([str(bag), "--topics", IMAGE_TOPIC,
                                      "--wait-for-subscribers", "1", "--wait-timeout", "30",
                                      "--wait-for-all-acked", "15"], env), timeout=90)
    assert rc == 0, err


def poses(probe, count):
    probe.wait_until(lambda: len(probe.poses) >= count, 90, f"{count} poses")
    got = probe.snapshot("poses")
    return {stamp_ns(g.msg.header.stamp): np.array(
        [g.msg.pose.position.x, g.msg.pose.position.y, g.msg.pose.position.z,
         g.msg.pose.orientation.x, g.msg.pose.orientation.y, g.msg.pose.orientation.z,
         g.msg.pose.orientation.w]) for g in got}


def stream(tmp_path, env, name, params, bag, count, probe_name):
    with NodeProcess(env, tmp_path, {**NO_DROP, **params}, name=name) as node, \
            Probe() as probe:
        probe.wait_active(node)
        replay(bag, env)
        got = poses(probe, count)
        node.interrupt()
        assert node.wait(60) == 0, node.log()[-3000:]
        return got, node.log()


def test_a_restarted_node_continues_the_stream_in_the_same_map_frame(tmp_path, ros_env):
    whole, first, second = bags(tmp_path)
    snap = tmp_path / "stream.snap"
    reference, _ = stream(tmp_path, ros_env, "whole", {}, whole, FRAMES, "whole")
    a, log_a = stream(tmp_path, ros_env, "a", {"session.save_on_shutdown": str(snap)}, first,
                      HALF, "a")
    assert "session.save_on_shutdown: wrote the stream" in log_a, log_a[-3000:]
    manifest = json.loads((snap / "manifest.json").read_text())
    assert manifest["frames_processed"] == HALF
    b, log_b = stream(tmp_path, ros_env, "b", {"session.resume_from": str(snap)}, second,
                      FRAMES - HALF, "b")
    assert "resumed the stream" in log_b
    stamps = sorted(reference)
    assert sorted(a) == stamps[:HALF] and sorted(b) == stamps[HALF:]
    for s in stamps[:HALF]:
        np.testing.assert_allclose(a[s], reference[s], atol=1e-6)
    for s in stamps[HALF:]:  # the same map frame: B's poses are the whole stream's
        np.testing.assert_allclose(b[s], reference[s], atol=1e-6)


def test_a_corrupted_snapshot_fails_the_configure_with_the_reason(tmp_path, ros_env):
    _, first, _ = bags(tmp_path)
    snap = tmp_path / "stream.snap"
    stream(tmp_path, ros_env, "a", {"session.save_on_shutdown": str(snap)}, first, HALF, "a")
    blob = bytearray((snap / "kv_cache.safetensors").read_bytes())
    blob[-3] ^= 0xFF
    (snap / "kv_cache.safetensors").write_bytes(bytes(blob))
    with NodeProcess(ros_env, tmp_path, {**NO_DROP, "session.resume_from": str(snap)},
                     name="bad") as node:
        rc = node.wait(90)
        log = node.log()
    assert rc != 0, log[-3000:]
    assert "configure failed" in log and "SHA-256 digest mismatch" in log, log[-3000:]
