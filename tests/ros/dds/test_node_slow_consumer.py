"""A camera faster than the model: the latest-wins queue drops (and counts) the oldest frames,
stays bounded, and the latency of what is processed does not grow."""
from __future__ import annotations

from tests.ros.node_harness import IMAGE_TOPIC, TINY_PARAMS, NodeProcess, Probe, make_bag
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture
from tests.ros.ros_helpers import finish, start_replay

FRAMES, RATE = 300, 5  # a 30 Hz bag at 5x: 150 images/s for two seconds
QUEUE = 2
ANCHORS = 2  # node_harness.TINY_PARAMS' session.num_scale_frames
# 112-px model input: tens of ms a frame on a CPU, well below 150 Hz. Warm-up on: the first
# frames do not pay the start-up costs (seconds on a loaded machine), so latency compares
# like with like.
PARAMS = {"input.width": 112, "queue_size": QUEUE, "qos.image": "reliable",
          "publish.diagnostics_rate_hz": 5.0, "warmup": True}


def test_slow_consumer_drops_old_frames_and_keeps_latency_bounded(tmp_path, ros_env):
    assert TINY_PARAMS["session.num_scale_frames"] == ANCHORS
    bag = tmp_path / "bag"
    stamps = make_bag(bag, FRAMES, "mcap")
    with NodeProcess(ros_env, tmp_path, PARAMS) as node, Probe() as probe:
        probe.wait_active(node)
        rc, out, err = finish(start_replay([str(bag), "--topics", IMAGE_TOPIC, "--rate", str(RATE),
                                            "--wait-for-subscribers", "1",
                                            "--wait-timeout", "30"], ros_env), timeout=90)
        assert rc == 0, err
        assert f"{FRAMES} msgs" in out, out

        # Idle again: nothing queued, every received frame is accounted for.
        def settled():
            values = probe.last_diag()
            received = int(values.get("received", 0))
            done = (int(values.get("processed", 0)) + int(values.get("dropped_queue_full", 0))
                    + sum(int(v) for k, v in values.items() if k.startswith("rejected_")))
            return values if received > 0 and done == received and \
                float(values.get("input_rate_hz", 1)) == 0 else None
        values = probe.wait_until(settled, 30,
                                  lambda: f"the node to go idle (last: {probe.last_diag()})")
        received, processed = int(values["received"]), int(values["processed"])
        dropped = int(values["dropped_queue_full"])
        assert received <= FRAMES
        assert dropped > 0 and processed > 0, values
        assert processed + dropped == received, values
        assert not [k for k in values if k.startswith(("rejected", "failed", "dropped_reset"))], \
            (values, node.log()[-3000:])

        statuses = [g.msg for g in probe.snapshot("status")]
        assert len(statuses) == processed == len(probe.poses)
        assert statuses[-1].frames_dropped == dropped
        # Bounded: what was received but neither processed nor dropped is at most the queue
        # plus the frame in flight (counters are read without a lock: one more of slack).
        backlog = [s.frames_received - s.frames_processed - s.frames_dropped
                   for s in statuses]
        assert max(backlog) <= QUEUE + 2, backlog

        # Latest wins: the poses are a subsequence of the bag in order, ending at its end.
        poses = probe.pose_stamps()
        assert poses == sorted(poses) and set(poses) <= set(stamps)
        assert poses[-1] >= stamps[-1 - QUEUE - 1], "the newest frames were not the ones kept"

        # Latency (callback -> published) is bounded by the queue, not by the backlog: a
        # processed frame waited at most for the frame in flight and the QUEUE frames ahead of
        # it, each one step plus its publication. That holds however slow the machine is, so
        # the bound is in units of the node's own step time (TrackingStatus.compute_ms), with
        # a fixed margin for publication and thread hand-over on a loaded 2-core machine.
        # Anchor frames also wait for the later anchors to arrive: not counted.
        steady = statuses[ANCHORS:]
        assert steady, "the last frames of the bag are always processed (latest wins)"
        step_ms = max(s.compute_ms for s in statuses)
        bound_ms = (QUEUE + 2) * step_ms + 1500.0
        worst = max(s.latency_ms for s in steady)
        assert worst <= bound_ms, (worst, step_ms, [s.latency_ms for s in steady])

        node.interrupt()
        assert node.wait(30) == 0, node.log()[-3000:]
    assert "Traceback" not in node.log()
    assert "[ERROR]" not in node.log()
