"""Malformed images from another process: each is refused with a warning and counted by reason,
the node keeps running, and the good frames that follow are processed."""
from __future__ import annotations

import time

from tests.ros.node_harness import NodeProcess, Probe, good_images, header, stamp_ns
from tests.ros.ros_helpers import BAG_START_NS, ros_env  # noqa: F401 -- the fixture

PARAMS = {"qos.image": "reliable", "qos.image_depth": 50, "queue_size": 50,
          "publish.diagnostics_rate_hz": 5.0,
          # a stamp going backwards is refused and counted (the default restarts the stream)
          "session.on_stamp_backwards": "drop"}


def bad_images() -> dict[str, object]:
    """One malformed Image per reject reason of lingbot_ros.ros.intake.convert."""
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

        # good[-1], published last, is the sentinel: a pose of anything before it (a bad
        # image, the backwards stamp) would have come before its pose
        assert probe.wait_for_pose_of(stamps[-1]) == stamps  # every good frame, nothing else

        reasons = list(bad) + ["non_monotonic_stamp"]
        # every image counted once (a /diagnostics message may predate the last ones)
        expected = {f"rejected_{r}": "1" for r in reasons}
        expected.update(received=str(len(bad) + len(good) + 1), processed=str(len(good)))

        def counted():
            values = probe.last_diag()
            return values if all(values.get(k) == v for k, v in expected.items()) else None
        values = probe.wait_until(counted, 15, lambda: f"/diagnostics counting "
                                  f"{expected} (last: {probe.last_diag()})")
        assert "failed" not in values

        last = probe.wait_until(  # statuses come on their own topic: wait for the last one
            lambda: next((g.msg for g in probe.snapshot("status")
                          if g.msg.frame_index == len(good) - 1), None), 15,
            "the status of the last good frame")
        assert last.frames_rejected == len(reasons)
        assert last.frames_processed == len(good) and last.frames_dropped == 0
        assert last.frame_index == len(good) - 1
        assert node.poll() is None, node.log()[-3000:]

    log = node.log()
    for reason in reasons:  # warnings are throttled per reason: each one is reported
        assert f"rejected ({reason})" in log, (reason, log[-3000:])
    assert "[WARN]" in log and "Traceback" not in log, log[-3000:]


def vm_hwm_bytes(pid: int) -> int:
    """Peak resident set size of a process so far (VmHWM of /proc/<pid>/status)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


def test_compressed_bomb_is_refused_before_decoding(tmp_path, ros_env):
    """A ~10 KB WebP declaring 16000 x 16000 (a complete lossless image: decoding it takes
    over 1 GB) and the same bitstream bare (38 bytes): both are refused from their header and
    counted as too_large, the node's peak RSS does not move, and it goes on processing."""
    from sensor_msgs.msg import CompressedImage

    from tests.ros.dds.test_compressed_topic import (COMPRESSED_TOPIC, CompressedProbe,
                                                 compressed_frames)
    from tests.test_image_header import vp8l_constant, vp8x_wrap

    bomb = vp8l_constant(16000, 16000)
    payloads = [vp8x_wrap(bomb, 16000, 16000, xmp=b"<x:xmpmeta/>" + b" " * 10_000), bomb]
    assert 9_000 < len(payloads[0]) < 11_000 and len(payloads[1]) < 100
    bombs = [CompressedImage(header=header(BAG_START_NS - 10**9 + i), format="webp",
                             data=data) for i, data in enumerate(payloads)]
    good = compressed_frames(6)
    stamps = [stamp_ns(m.header.stamp) for m in good]
    with NodeProcess(ros_env, tmp_path, {**PARAMS, "topics.use_compressed": True}) as node, \
            CompressedProbe(COMPRESSED_TOPIC) as probe:
        probe.wait_active(node)
        probe.wait_for_compressed_subscriber()
        for msg in good[:3]:  # the node's first frames allocate what it needs
            probe.publish_compressed(msg)
            time.sleep(0.02)
        probe.wait_until(lambda: len(probe.poses) >= 3, 60, "3 poses")
        before = vm_hwm_bytes(node.pid)
        for msg in bombs:
            probe.publish_compressed(msg)
            time.sleep(0.02)
        probe.wait_until(lambda: probe.counter("rejected_too_large") == len(bombs), 30,
                         lambda: f"/diagnostics counting {len(bombs)} rejected_too_large "
                                 f"(last: {probe.last_diag()})")
        after = vm_hwm_bytes(node.pid)
        print(f"node VmHWM before the bombs {before / 2**20:.1f} MiB, after "
              f"{after / 2**20:.1f} MiB (+{(after - before) / 2**20:.1f} MiB)")
        # Decoding one would add over 1 GB; refused from the header it adds nothing.
        assert after - before < 200 * 2**20, (before, after)
        assert node.poll() is None, node.log()[-3000:]

        for msg in good[3:]:  # and the frames after it are processed
            probe.publish_compressed(msg)
            time.sleep(0.02)
        assert probe.wait_for_pose_of(stamps[-1]) == stamps  # good[-1]: the sentinel

        def counted():
            values = probe.last_diag()
            return values if values.get("processed") == str(len(good)) else None
        values = probe.wait_until(counted, 15, lambda: f"/diagnostics counting {len(good)} "
                                  f"processed (last: {probe.last_diag()})")
        assert values["received"] == str(len(good) + len(bombs))
        assert values["rejected_too_large"] == str(len(bombs))
        assert "failed" not in values
        assert node.poll() is None, node.log()[-3000:]
    log = node.log()
    assert "rejected (too_large)" in log and "declares 16000x16000" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
