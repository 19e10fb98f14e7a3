"""~/reset while images are flowing: the cache empties, frame indices and the Path restart, and
no frame from before the reset yields a pose after it."""
from __future__ import annotations

import re
import time

from tests.ros.node_harness import NodeProcess, Probe, good_images, stamp_ns
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture

STEADY, BURST, AFTER = 20, 30, 30  # frames at 30 Hz, then at once, then (after the reset) 30 Hz
# A slower model input (112 px) and a deep queue: the burst is still queued at the reset, and
# nothing is dropped for lack of room (every drop here is the reset's).
PARAMS = {"input.width": 112, "qos.image": "reliable", "qos.image_depth": 100,
          "queue_size": 100, "publish.diagnostics_rate_hz": 20.0}


def test_reset_mid_stream(tmp_path, ros_env):
    images = good_images(STEADY + BURST + AFTER)
    before = [stamp_ns(m.header.stamp) for m in images[:STEADY + BURST]]
    after = [stamp_ns(m.header.stamp) for m in images[STEADY + BURST:]]
    with NodeProcess(ros_env, tmp_path, PARAMS) as node, Probe() as probe:
        probe.wait_active(node)
        probe.wait_for_image_subscriber()
        for msg in images[:STEADY]:
            probe.publish_image(msg)
            time.sleep(1 / 30)
        probe.wait_until(lambda: len(probe.poses) >= 3, 30, "the first poses")
        for msg in images[STEADY:STEADY + BURST]:
            probe.publish_image(msg)

        # Every image published so far has reached the node's callback (counted as received),
        # while the worker is still busy with the burst: the reset has frames to drop.
        def all_received():
            statuses = probe.snapshot("status")
            received = max([probe.counter("received")]
                           + [g.msg.frames_received for g in statuses])
            return received >= len(before)
        probe.wait_until(all_received, 30, f"the node to receive {len(before)} images", 0.005)
        t_request = time.monotonic()
        reply = probe.call("reset")
        t_response = time.monotonic()
        assert reply.success, reply.message
        match = re.search(r"(\d+) queued frame\(s\) dropped", reply.message)
        assert match, reply.message
        assert int(match.group(1)) > 0, "the burst was processed before the reset: " \
                                        f"nothing was in flight ({reply.message})"

        # The cache is empty: no image arrived since the reset.
        info = probe.call("get_cache_info")
        assert info.success, info.message
        assert (info.info.frames_seen, info.info.frames_committed, info.info.frames_cached,
                info.info.special_frames) == (0, 0, 0, 0), info.info

        for msg in images[STEADY + BURST:-2]:
            probe.publish_image(msg)
            time.sleep(1 / 30)
        probe.wait_until(lambda: probe.pose_stamps()[-1:] == after[-3:-2], 60,
                         "the pose of the last image but two")
        # A pause (the next frame's Path goes out at once), then two frames back to back: the
        # Path of the last one is throttled, and must still be sent when the stream stops.
        time.sleep(0.5)
        for msg in images[-2:]:
            probe.publish_image(msg)
        # The last image is the sentinel: the node handles images in order, so a pose of
        # anything published before it has come before its pose.
        poses = probe.wait_for_pose_of(after[-1])

        # Poses: a prefix of the images before the reset (processed in order before it; the
        # rest was dropped), then every image after it. A frame queued before the reset and
        # processed after it would be a pose of an earlier stamp after the reset's poses, or a
        # pre-reset stamp with a restarted frame index (below).
        k = len(poses) - len(after)
        assert 3 <= k < len(before), (k, len(before))
        assert poses == before[:k] + after
        late = [g for g in probe.snapshot("poses") if g.t > t_response + 1.0
                and stamp_ns(g.msg.header.stamp) in set(before)]
        assert not late, f"{len(late)} stale pose(s) arrived well after the reset response"

        # ~/status: frame_index counts from 0 again after the reset. The last image's status
        # is this topic's sentinel.
        probe.wait_until(lambda: after[-1] in [stamp_ns(g.msg.header.stamp)
                                               for g in probe.snapshot("status")], 10,
                         "the status of the last image")
        statuses = [g.msg for g in probe.snapshot("status")]
        assert [(stamp_ns(s.header.stamp), s.frame_index) for s in statuses] == \
            [(t, i) for i, t in enumerate(before[:k])] + [(t, i) for i, t in enumerate(after)]
        # /diagnostics (counters since start): every image not processed went to the reset.
        diag = probe.wait_until(lambda: (lambda v: v if v.get("resets") == "1" and
                                         v.get("processed") == str(k + len(after)) else None)(
                                    probe.last_diag()), 10, "/diagnostics after the reset")
        assert diag["received"] == str(len(before) + len(after))
        assert diag["dropped_reset"] == str(len(before) - k)
        assert not [key for key in diag if key.startswith(("dropped_queue", "rejected"))], diag

        # The Path restarted: an empty one at the reset, then only the new poses.
        paths = probe.snapshot("paths")
        lengths = [len(g.msg.poses) for g in paths]
        assert 0 in lengths[1:], lengths
        restart = lengths.index(0, 1)
        assert max(lengths[:restart]) <= k and all(n <= len(after) for n in lengths[restart:])
        probe.wait_until(lambda: len(probe.snapshot("paths")[-1].msg.poses) == len(after), 10,
                         "the Path of the new stream")
        assert [stamp_ns(p.header.stamp) for p in probe.snapshot("paths")[-1].msg.poses] == after

        info = probe.call("get_cache_info").info
        assert info.frames_committed == len(after) and info.frames_seen == len(after)
        assert node.poll() is None, node.log()[-3000:]
        assert t_request < t_response
