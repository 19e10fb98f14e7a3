"""~/reset under overload: the camera publishes at several times the processing rate, the
diagnostics timer runs at 100 Hz, resets come back to back. The node never crashes (a reset
clearing the latency window under the diagnostics timer once killed it) and every reset
returns within one frame in flight plus the service round trip (the worker takes no next
frame while a reset waits)."""
from __future__ import annotations

import re
import threading
import time

import numpy as np

from tests.ros.node_harness import NodeProcess, Probe, good_images, header
from tests.ros.ros_helpers import BAG_START_NS, ros_env  # noqa: F401 -- the fixture

# The tiny model at a 168-px input: a CPU frame takes ~100 ms, so a camera at 240 Hz (which a
# loaded machine may only reach in part) stays well above 5x the processing rate.
PARAMS = {"input.width": 168, "queue_size": 2, "qos.image": "reliable",
          "publish.diagnostics_rate_hz": 100.0}
RATE_HZ, RESETS = 240.0, 25


def camera(probe, stop: threading.Event) -> None:
    """Cycled images with increasing stamps at RATE_HZ until ``stop``."""
    images, i = good_images(30), 0
    next_t = time.monotonic()
    while not stop.is_set():
        msg = images[i % len(images)]
        msg.header = header(BAG_START_NS + int(i * 1e9 / RATE_HZ))
        probe.publish_image(msg)
        i += 1
        next_t += 1.0 / RATE_HZ
        time.sleep(max(0.0, next_t - time.monotonic()))


def test_resets_under_overload_are_bounded_and_never_crash(tmp_path, ros_env):
    with NodeProcess(ros_env, tmp_path, PARAMS) as node, Probe() as probe:
        probe.wait_active(node)
        probe.wait_for_image_subscriber()
        stop = threading.Event()
        streamer = threading.Thread(target=camera, args=(probe, stop), daemon=True)
        streamer.start()
        try:
            probe.wait_until(lambda: len(probe.status) >= 3, 60, "the first frames processed")
            round_trips, in_node = [], []
            for _ in range(RESETS):
                t0 = time.monotonic()
                reply = probe.call("reset")
                round_trips.append((time.monotonic() - t0) * 1e3)
                assert reply.success, reply.message
                in_node.append(float(re.search(r" in ([0-9.]+) ms$", reply.message).group(1)))
                time.sleep(0.05)
        finally:
            stop.set()
            streamer.join(timeout=10)
        assert node.poll() is None, node.log()[-3000:]

        statuses = [g.msg for g in probe.snapshot("status")]
        values = probe.wait_until(lambda: probe.last_diag() if int(probe.last_diag().get(
            "resets", 0)) == RESETS else None, 15, "the resets counted")
        received, processed = int(values["received"]), int(values["processed"])
        # Overload: the node processed at most a fifth of what arrived.
        assert received >= 5 * processed, values
        # The node's part of a reset (request in to reply out, as it reports) waits for the
        # frame in flight and no other: bounded in units of the node's own step time (its
        # slowest, anchor batches included), + 100 ms. The round trip adds the DDS hand-over
        # and the scheduling of two processes, which a loaded 2-core machine does not bound:
        # reported, not asserted.
        frame_ms = max(s.compute_ms for s in statuses)
        p99 = float(np.percentile(in_node, 99))
        print(f"reset in the node ms: p50 {np.median(in_node):.1f} p99 {p99:.1f} max "
              f"{max(in_node):.1f}; round trip p50 {np.median(round_trips):.1f} p99 "
              f"{np.percentile(round_trips, 99):.1f}; slowest frame {frame_ms:.1f} ms; "
              f"received {received}, processed {processed}")
        assert p99 < 3 * frame_ms + 100, (p99, frame_ms, in_node, round_trips)
        node.interrupt()
        assert node.wait(30) == 0
    log = node.log()
    assert "Traceback" not in log and "[ERROR]" not in log, log[-3000:]
