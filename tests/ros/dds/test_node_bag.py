"""Bag -> node -> poses, end to end: a synthetic rosbag2 played by our replay tool in one child
process, the node in another, everything received over real DDS (loopback) by a probe here."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.ros.node_harness import (IMAGE_TOPIC, NodeProcess, Probe, diag_values,
                                    image_stamps_in_bag, make_bag, stamp_ns)
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture
from tests.ros.ros_helpers import finish, start_replay

FRAMES = 30
SCALE, WINDOW = 2, 4  # TINY_PARAMS' session.num_scale_frames and cache.window
# Nothing is dropped: a deep subscription and a queue that holds the whole bag, so every
# image of the bag must come out as a pose (the slow-consumer test covers the drops).
NO_DROP = {"qos.image": "reliable", "qos.image_depth": 100, "queue_size": 100,
           "publish.cache_info_rate_hz": 5.0, "publish.diagnostics_rate_hz": 5.0}
DIAG_KEYS = ("input_rate_hz", "processed_rate_hz", "latency_p50_ms", "latency_p99_ms",
             "received", "processed", "cache_frames_cached", "cache_special_frames",
             "cache_tokens_visible", "cache_bytes_used", "cache_bytes_reserved",
             "cache_occupancy", "attention", "fast_path", "fused_kernels",
             "graph_captures")


def replay(bag, env, *extra):
    """Play ``bag`` once the node subscribes; wait until every image is acknowledged."""
    rc, out, err = finish(start_replay([str(bag), "--topics", IMAGE_TOPIC,
                                        "--wait-for-subscribers", "1", "--wait-timeout", "30",
                                        "--wait-for-all-acked", "15", *extra], env), timeout=90)
    assert rc == 0, err
    assert "acknowledged" not in err, err
    return out


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_bag_to_poses(tmp_path, ros_env, storage):
    bag = tmp_path / "bag"
    make_bag(bag, FRAMES, storage)
    image_stamps = image_stamps_in_bag(bag)
    assert len(image_stamps) == FRAMES
    with NodeProcess(ros_env, tmp_path, NO_DROP) as node, Probe() as probe:
        probe.wait_active(node)
        before = probe.call("get_cache_info")
        assert before.success and before.info.frames_committed == 0, before.message
        replay(bag, ros_env)
        # One pose per image, each with its image's stamp, in order, and no more: the bag's
        # last image is the sentinel (a pose of anything before it comes before its pose).
        assert probe.wait_for_pose_of(image_stamps[-1]) == image_stamps
        assert all(g.msg.header.frame_id == "map" for g in probe.snapshot("poses"))

        # The last TrackingStatus: every image received and processed, none dropped.
        status = probe.wait_until(
            lambda: [g.msg for g in probe.snapshot("status")][FRAMES - 1:], 30,
            f"{FRAMES} TrackingStatus messages")[-1]
        assert (status.frames_received, status.frames_processed, status.frames_dropped,
                status.frames_rejected) == (FRAMES, FRAMES, 0, 0)
        assert status.frame_index == FRAMES - 1 and stamp_ns(status.header.stamp) == \
            image_stamps[-1]
        # One INITIALIZING status when the stream starts collecting its anchors, then one
        # TRACKING status per frame, each with its own image's stamp (anchors included).
        starts = probe.snapshot("state_changes")
        assert [g.msg.state for g in starts] == [1], [g.msg for g in starts]
        assert stamp_ns(starts[0].msg.header.stamp) == image_stamps[0]
        assert [(stamp_ns(g.msg.header.stamp), g.msg.frame_index)
                for g in probe.snapshot("status")] == list(zip(image_stamps, range(FRAMES)))

        # The Path grows to every pose (transient local: the last message says it all).
        def full_path():
            paths = probe.snapshot("paths")
            return paths and len(paths[-1].msg.poses) == FRAMES
        probe.wait_until(full_path, 10, lambda: f"a Path of {FRAMES} poses (got lengths "
                         f"{[len(g.msg.poses) for g in probe.snapshot('paths')]})")
        paths = probe.snapshot("paths")
        assert [stamp_ns(p.header.stamp) for p in paths[-1].msg.poses] == image_stamps
        lengths = [len(g.msg.poses) for g in paths]
        assert lengths == sorted(lengths) and len(set(lengths)) > 1, lengths  # it grew

        # The cache as the session holds it: 'all' keyframes, a window of SCALE + WINDOW.
        reply = probe.call("get_cache_info")
        assert reply.success, reply.message
        info = reply.info
        assert (info.frames_seen, info.frames_committed, info.frames_rolled_back) == \
            (FRAMES, FRAMES, 0)
        assert info.frames_cached == min(FRAMES, SCALE + WINDOW)
        assert (info.scale_frames, info.window_frames) == (SCALE, WINDOW)
        assert info.special_frames == FRAMES and info.max_special_frames == -1
        assert 0 < info.bytes_used <= info.bytes_reserved
        assert info.patch_pages_used <= info.patch_pages_total
        assert "frames cached" in reply.message
        # ~/cache_info publishes the same state.
        probe.wait_until(lambda: [g for g in probe.snapshot("cache_info")
                                  if g.msg.frames_committed == FRAMES], 10,
                         f"a CacheInfo with {FRAMES} committed frames")
        latest = probe.snapshot("cache_info")[-1].msg
        for field in ("frames_seen", "frames_committed", "frames_cached", "special_frames",
                      "tokens_visible", "bytes_used", "bytes_reserved", "page_size"):
            assert getattr(latest, field) == getattr(info, field), field

        # /diagnostics: the documented keys, the counters of this run.
        def settled_diag():
            values = probe.last_diag()
            return values if values.get("processed") == str(FRAMES) else None
        values = probe.wait_until(settled_diag, 10, "/diagnostics counting every frame")
        missing = [k for k in DIAG_KEYS if k not in values]
        assert not missing, (missing, sorted(values))
        assert values["received"] == str(FRAMES)
        assert not [k for k in values if k.startswith(("dropped", "rejected", "failed"))], values
        assert int(values["cache_frames_cached"]) == SCALE + WINDOW
        assert values["fast_path"] == "eager (device cpu)" and values["graph_captures"] == "0"
        assert values["fused_kernels"] == "False"
        assert values["attention"] == "torch_ref"  # auto on a CPU
        assert float(values["latency_p99_ms"]) >= float(values["latency_p50_ms"]) > 0
        # Some message saw the stream going in and out (rates are over the last period).
        rates = [diag_values(g.msg) for g in probe.snapshot("diagnostics")]
        assert max(float(v.get("input_rate_hz", 0)) for v in rates) > 0
        assert max(float(v.get("processed_rate_hz", 0)) for v in rates) > 0
        assert node.poll() is None, node.log()[-3000:]


GOLDEN = Path(__file__).with_name("golden_node_bag.json")


def test_one_camera_is_bit_identical_to_the_node_before_rigs(tmp_path, ros_env):
    """No ``cameras.names``: the node's poses (every float, bit for bit) and its per-frame
    status (index, keyframe) on this bag equal those of the node at a1bd988, before issue
    35 (multi-camera rigs), stored in golden_node_bag.json by the same procedure."""
    golden = json.loads(GOLDEN.read_text())
    bag = tmp_path / "bag"
    make_bag(bag, FRAMES, "mcap")
    image_stamps = image_stamps_in_bag(bag)
    with NodeProcess(ros_env, tmp_path, {k: NO_DROP[k] for k in (
            "qos.image", "qos.image_depth", "queue_size")}) as node, Probe() as probe:
        probe.wait_active(node)
        replay(bag, ros_env)
        assert probe.wait_for_pose_of(image_stamps[-1]) == image_stamps
        poses = [[stamp_ns(g.msg.header.stamp)] + [float(v).hex() for v in (
            g.msg.pose.position.x, g.msg.pose.position.y, g.msg.pose.position.z,
            g.msg.pose.orientation.x, g.msg.pose.orientation.y, g.msg.pose.orientation.z,
            g.msg.pose.orientation.w)] for g in probe.snapshot("poses")]
        probe.wait_until(lambda: len(probe.snapshot("status")) >= FRAMES, 30,
                         f"{FRAMES} TrackingStatus messages")
        status = [[stamp_ns(g.msg.header.stamp), g.msg.frame_index, bool(g.msg.keyframe)]
                  for g in probe.snapshot("status")]
    assert poses == golden["poses"]
    assert status == golden["status"]
