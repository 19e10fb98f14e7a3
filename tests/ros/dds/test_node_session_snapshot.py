"""Resume after a restart, over real DDS: node A streams the first half of a bag and saves
its stream on SIGINT (session.save_on_shutdown); node B resumes it (session.resume_from) and
streams the rest. B's poses are those of one node that streamed the whole bag. A corrupted
snapshot fails B's configure with the reason. A LOCKED metric scale survives ~/save_session
and ~/load_session: the stream continues in metres at once, with the same estimate; a node
of another scale.source refuses the snapshot."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from lingbot_ros.tools.synthetic.render import render_sequence
from lingbot_ros.tools.synthetic.writers import write_bag
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


def test_a_locked_scale_survives_save_session_and_load_session(tmp_path, ros_env):
    """scale.source depth (the sensor depth is K x the model's own, as in test_node_scale):
    lock, ~/save_session, ~/reset (a new, UNKNOWN estimate), ~/load_session: ~/scale is
    LOCKED again at the saved value, segment and samples, and the next frames go out in metres
    at once (nothing withheld), as the uninterrupted stream's. A node with scale.source fixed
    refuses the snapshot, saying why."""
    from lingbot_ros_interfaces.srv import LoadSession, SaveSession
    from tests.ros.dds.test_node_robot_tf import expected_results, send, static_msgs
    from tests.ros.dds.test_node_scale import H, K, SCALE, W, ScaleProbe, metric_base, send_depth
    from tests.ros.node_harness import good_images
    from tests.ros.robot_probe import matrix_of

    images = good_images(10, width=W, height=H)
    stamps = [stamp_ns(m.header.stamp) for m in images]
    expected = expected_results(images)
    snap = tmp_path / "scale.snap"
    with NodeProcess(ros_env, tmp_path, {**SCALE, "scale.source": "depth"}) as node, \
            ScaleProbe(static_msgs()) as probe:
        probe.wait_active(node)
        probe.wait_static_delivered()
        send_depth(probe, images, expected)
        send(probe, images[:6])
        saved = probe.wait_until(lambda: (lambda m: m if m is not None and m.samples == 6
                                          and m.state == m.LOCKED else None)(
            probe.last_scale()), 90, "~/scale LOCKED with 6 samples")
        assert saved.metres_per_unit == pytest.approx(K, rel=1e-3)
        reply = probe.call("save_session", SaveSession.Request(path=str(snap)))
        assert reply.success and reply.frames == 6, reply.message
        manifest = json.loads((snap / "manifest.json").read_text())
        assert manifest["front_end_state"]["scale"]["estimator"]["state"] == "LOCKED"

        assert probe.call("reset").success
        probe.wait_until(lambda: (lambda m: m is not None and m.state == m.UNKNOWN
                                  and m.segment == saved.segment + 1)(probe.last_scale()),
                         30, "a new estimate after ~/reset")
        reply = probe.call("load_session", LoadSession.Request(path=str(snap)))
        assert reply.success and reply.frames == 6, reply.message
        restored = probe.wait_until(lambda: (lambda m: m if m is not None and m.state == m.LOCKED
                                             else None)(probe.last_scale()), 30,
                                    "~/scale LOCKED after ~/load_session")
        assert (restored.metres_per_unit, restored.sigma_log, restored.samples,
                restored.segment, restored.source) == (
            saved.metres_per_unit, saved.sigma_log, 6, saved.segment, "depth")

        before = len(probe.poses)
        send(probe, images[6:])  # in metres at once: the restored estimate is LOCKED
        probe.wait_until(lambda: len(probe.poses) >= before + 4, 90, "the 4 next poses")
        got = {stamp_ns(g.msg.header.stamp): matrix_of(g.msg.pose)
               for g in probe.snapshot("poses")[before:]}
        assert sorted(got) == stamps[6:]
        for s in stamps[6:]:  # the uninterrupted stream's frames, scaled
            np.testing.assert_allclose(got[s], metric_base(expected[s].c2w, K), atol=1e-5)
        last = probe.wait_until(lambda: (lambda m: m if m is not None and m.samples == 10
                                         else None)(probe.last_scale()), 30, "10 samples")
        assert last.segment == saved.segment and last.state == last.LOCKED
    assert node.poll() is not None

    fixed = {**SCALE, "scale.source": "fixed", "scale.factor": 0.4}
    with NodeProcess(ros_env, tmp_path, fixed, name="fixed") as node, \
            ScaleProbe(static_msgs()) as probe:
        probe.wait_active(node)
        reply = probe.call("load_session", LoadSession.Request(path=str(snap)))
        assert not reply.success
        assert "scale.source 'depth', this stream's is 'fixed'" in reply.message, reply.message
        assert "the stream is unchanged" in reply.message
    assert node.poll() is not None


def test_scale_restore_rules_without_a_node():
    """check_scale refuses another source before anything changes; restore_scale continues a
    LOCKED estimate; a snapshot without an estimate (an older build's) restarts a metric one
    with a warning; none/fixed need none."""
    from lingbot_ros.scale import ScaleStream
    from lingbot_ros.ros.lifecycle.snapshot_handlers import (SnapshotError, check_scale,
                                                             restore_scale)
    from lingbot_ros.scale import ScaleConfig, ScaleEstimator, ScaleSample

    config = ScaleConfig(source="depth", min_samples=2)
    est = ScaleEstimator(config, segment=4)
    for i in range(3):
        est.add(ScaleSample(i * 100_000_000, 2.0, "depth"))
    manifest = {"front_end_state": {"scale": est.state_dict()}}
    fixed = ScaleStream(ScaleConfig(source="fixed", factor=0.4))
    with pytest.raises(SnapshotError, match="scale.source 'depth', this stream's is 'fixed'"):
        check_scale(manifest, fixed)
    assert fixed.estimate.metres_per_unit == 0.4 and fixed.estimate.segment == 0
    depth = ScaleStream(config)
    check_scale(manifest, depth)
    estimate, warning = restore_scale({"front_end_state": {}}, depth)
    assert "holds no scale estimate" in warning and estimate.segment == 1
    assert not estimate.locked
    assert restore_scale({}, fixed)[1] is None
    estimate, warning = restore_scale(manifest, depth)
    assert warning is None and estimate == est.estimate and estimate.locked
    assert (estimate.metres_per_unit, estimate.samples, estimate.segment) == (2.0, 3, 4)


def test_a_restarted_node_continues_a_locked_scale(tmp_path, ros_env):
    """Node A (scale.source depth) locks, streams 6 frames and saves on SIGINT; node B resumes
    (session.resume_from): ~/scale is LOCKED at A's value from the start and B's frames go out
    in metres at once (nothing withheld), as the uninterrupted stream's. A node of another
    scale.source fails its configure on that snapshot, saying why."""
    from tests.ros.dds.test_node_robot_tf import expected_results, send, static_msgs
    from tests.ros.dds.test_node_scale import H, K, SCALE, W, ScaleProbe, metric_base, send_depth
    from tests.ros.node_harness import good_images
    from tests.ros.robot_probe import matrix_of

    images = good_images(10, width=W, height=H)
    stamps = [stamp_ns(m.header.stamp) for m in images]
    expected = expected_results(images)
    snap = tmp_path / "scale.snap"
    depth = {**SCALE, "scale.source": "depth"}
    with NodeProcess(ros_env, tmp_path, {**depth, "session.save_on_shutdown": str(snap)},
                     name="a") as node, ScaleProbe(static_msgs()) as probe:
        probe.wait_active(node)
        probe.wait_static_delivered()
        send_depth(probe, images[:6], expected)
        send(probe, images[:6])
        saved = probe.wait_until(lambda: (lambda m: m if m is not None and m.samples == 6
                                          and m.state == m.LOCKED else None)(
            probe.last_scale()), 90, "~/scale LOCKED with 6 samples")
        node.interrupt()
        assert node.wait(60) == 0, node.log()[-3000:]
    assert json.loads((snap / "manifest.json").read_text())[
        "front_end_state"]["scale"]["estimator"]["state"] == "LOCKED"

    with NodeProcess(ros_env, tmp_path, {**depth, "session.resume_from": str(snap)},
                     name="b") as node, ScaleProbe(static_msgs()) as probe:
        probe.wait_active(node)
        probe.wait_static_delivered()
        send_depth(probe, images[6:], expected)
        send(probe, images[6:])
        probe.wait_until(lambda: len(probe.poses) >= 4, 90, "the 4 poses of B")
        assert probe.pose_stamps() == stamps[6:]  # none withheld: LOCKED from the start
        for g in probe.snapshot("poses"):
            np.testing.assert_allclose(matrix_of(g.msg.pose), metric_base(
                expected[stamp_ns(g.msg.header.stamp)].c2w, K), atol=1e-5)
        first = probe.wait_until(lambda: probe.snapshot("scale"), 30, "~/scale")[0].msg
        assert first.state == first.LOCKED and first.segment == saved.segment
        assert first.metres_per_unit == saved.metres_per_unit and first.samples >= 6
    assert node.poll() is not None

    fixed = {**SCALE, "scale.source": "fixed", "scale.factor": 0.4,
             "session.resume_from": str(snap)}
    with NodeProcess(ros_env, tmp_path, fixed, name="c") as node:
        rc = node.wait(90)
        log = node.log()
    assert rc != 0, log[-3000:]
    assert "configure failed" in log and "scale.source 'depth', this stream's is 'fixed'" \
        in log, log[-3000:]


def test_a_released_session_takes_its_pending_map_and_path_along():
    """resume_from at configure keeps the snapshot's map and path for activate; a cleanup
    (or a failed configure) in between releases them with the stream: a later plain
    configure + activate must not load an old stream's map."""
    import logging

    from lingbot_ros.ros.lifecycle.snapshot_handlers import NodeSnapshots

    class Loads:
        def __init__(self):
            self.loaded = []

        def load_node_state(self, state):
            self.loaded.append(state)

    snapshots = NodeSnapshots(logging.getLogger("test_pending"))
    snapshots.resumed({"front_end_state": {"path": [1]}, "frames_processed": 3}, "snap")
    snapshots.discard_pending()
    outputs = Loads()
    snapshots.load_pending(outputs)
    assert outputs.loaded == []
    snapshots.resumed({"front_end_state": {"path": [2]}}, "snap")
    snapshots.load_pending(outputs)
    snapshots.load_pending(outputs)  # once
    assert outputs.loaded == [{"path": [2]}]
