"""Health costs nothing (issue 32): with /diagnostics at 100 Hz and gc_freeze on (the
default), the worker still takes every frame of a camera-rate stream.

Each tick read ``gc.get_freeze_count()``, which walks every frozen object (~20 ms with the GIL
held in the test node's process, 190,000 frozen objects): at 100 Hz the executor held the
GIL between back-to-back ticks, a tiny frame's compute went from ~50 to 250-350 ms (p50) and
the latest-wins queue (4) dropped 4-11 of these 30 images at 5 Hz. A tick now reads figures
kept by the node (``scripts/diagnostics_tick_bench.py`` times one: docs/performance.md).
"""
from __future__ import annotations

import time

from tests.ros.node_harness import NodeProcess, Probe, good_images, stamp_ns
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture

# The defaults otherwise (gc_freeze on); 4 frames of the latest-wins queue: slack for a loaded
# machine, where one frame may take a few times its usual ~50 ms.
PARAMS = {"publish.diagnostics_rate_hz": 100.0, "gc_freeze": True, "queue_size": 4}
FRAMES, CAMERA_GAP_S = 30, 0.2  # a 5 Hz camera: a tiny CPU frame takes ~50 ms (p99 ~100)


def test_every_pose_comes_with_diagnostics_at_100_hz(tmp_path, ros_env):
    images = good_images(FRAMES)
    stamps = [stamp_ns(m.header.stamp) for m in images]
    with NodeProcess(ros_env, tmp_path, PARAMS) as node, Probe() as probe:
        probe.wait_active(node)
        probe.wait_until(lambda: int(probe.last_diag().get("gc_frozen_objects", 0)) > 0, 30,
                         "/diagnostics with the frozen heap")
        probe.wait_for_image_subscriber()
        ticks_before = len(probe.snapshot("diagnostics"))
        for msg in images:
            probe.publish_image(msg)
            time.sleep(CAMERA_GAP_S)  # the camera's rate, not a wait for a result

        def all_counted():
            values = probe.last_diag()
            return values if values.get("received") == str(FRAMES) and \
                int(values.get("processed", 0)) + sum(
                    int(v) for k, v in values.items() if k.startswith("dropped_")) == FRAMES \
                else None
        values = probe.wait_until(all_counted, 60, lambda: f"every image counted (last: "
                                  f"{probe.last_diag()})")
        dropped = {k: v for k, v in values.items() if k.startswith("dropped_") and v != "0"}
        assert not dropped, f"the worker fell behind the camera: {dropped}"
        probe.wait_until(lambda: len(probe.poses) >= FRAMES, 30, f"{FRAMES} poses")
        assert probe.pose_stamps() == stamps  # every frame, in order
        assert len(probe.snapshot("diagnostics")) - ticks_before >= FRAMES  # ticks went on
