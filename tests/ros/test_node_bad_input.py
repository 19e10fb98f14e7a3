"""Malformed images from another process: each is refused with a warning and counted by reason,
the node keeps running, and the good frames that follow are processed."""
from __future__ import annotations

import time

from tests.ros.node_harness import NodeProcess, Probe, good_images, header, stamp_ns
from tests.ros.ros_helpers import BAG_START_NS, ros_env  # noqa: F401 -- the fixture

PARAMS = {"qos.image": "reliable", "qos.image_depth": 50, "queue_size": 50,
          "publish.diagnostics_rate_hz": 5.0}


def bad_images() -> dict[str, object]:
    """One malformed Image per reject reason of lingbot_ros.ros.convert."""
    from sensor_msgs.msg import Image

    def image(i, **fields):
        msg = Image(header=header(BAG_START_NS - 10**9 + i), **fields)
        return msg

    w, h = 80, 60
    return {
        "unknown_encoding": image(0, height=h, width=w, encoding="yuv_mystery", step=w * 2,
                                  data=bytes(w * h * 2)),
        "bad_step": image(1, height=h, width=w, encoding="rgb8", step=w * 3 - 1,
                          data=bytes(w * h * 3)),
        "zero_size": image(2, height=0, width=0, encoding="rgb8", step=0, data=b""),
        "truncated": image(3, height=h, width=w, encoding="rgb8", step=w * 3,
                           data=bytes(w * 3 * (h - 1))),
        # A corrupt header: 100000 x 100000 claimed, a few bytes sent.
        "too_large": image(4, height=100_000, width=100_000, encoding="rgb8", step=300_000,
                           data=bytes(64)),
    }


def test_bad_messages_are_counted_and_skipped(tmp_path, ros_env):
    good = good_images(8)
    stamps = [stamp_ns(m.header.stamp) for m in good]
    bad = bad_images()
    with NodeProcess(ros_env, tmp_path, PARAMS) as node, Probe() as probe:
        probe.wait_active(node)
        probe.wait_for_image_subscriber()
        for msg in bad.values():
            probe.publish_image(msg)
            time.sleep(0.02)
        for msg in good[:4]:
            probe.publish_image(msg)
            time.sleep(0.02)
        probe.publish_image(good[1])  # a stamp going backwards: refused by the session
        time.sleep(0.02)
        for msg in good[4:]:
            probe.publish_image(msg)
            time.sleep(0.02)

        probe.wait_until(lambda: len(probe.poses) >= len(good), 60, f"{len(good)} poses")
        time.sleep(0.3)
        assert probe.pose_stamps() == stamps  # every good frame, nothing else

        reasons = list(bad) + ["non_monotonic_stamp"]
        expected = {f"rejected_{r}": "1" for r in reasons}

        def counted():
            values = probe.last_diag()
            return values if all(values.get(k) == v for k, v in expected.items()) else None
        values = probe.wait_until(counted, 15, lambda: f"/diagnostics counting "
                                  f"{sorted(expected)} (last: {probe.last_diag()})")
        assert values["received"] == str(len(bad) + len(good) + 1)
        assert values["processed"] == str(len(good))
        assert "failed" not in values

        last = probe.snapshot("status")[-1].msg
        assert last.frames_rejected == len(reasons)
        assert last.frames_processed == len(good) and last.frames_dropped == 0
        assert last.frame_index == len(good) - 1
        assert node.poll() is None, node.log()[-3000:]

    log = node.log()
    for reason in reasons:  # warnings are throttled per reason: each one is reported
        assert f"rejected ({reason})" in log, (reason, log[-3000:])
    assert "[WARN]" in log and "Traceback" not in log, log[-3000:]
