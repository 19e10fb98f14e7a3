"""~/save_session does not block the node's one executor thread, over real DDS: while a
large snapshot (tens of MB) is written, a 60 Hz image stream keeps being taken and
/diagnostics keeps ticking; the reply comes once the files are on disk; every image lands
in the stream. The same for an inactive node.

The snapshot is made large without running the model: a long anchor phase
(``session.num_scale_frames``) at a large input keeps every image buffered in the stream
(~2.4 MB each), so the save writes their pixels and the worker does no model work (the scale
phase of that many frames would take minutes on a CPU). Before the fix the callback waited
for the write: no image was taken and no diagnostics went out until the reply."""
from __future__ import annotations

import re
import time

from lingbot_ros.session import read_manifest
from tests.ros.node_harness import (INACTIVE, NodeProcess, Probe, diag_values, good_images)
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture

W, H = 518, 392  # ~2.4 MB a frame in the stream (float32 at the model's input)
ANCHORS = 64  # never reached: no model work in this test
BEFORE, DURING = 40, 20  # images before the save, images sent while it is written
PARAMS = {"input.width": W, "session.num_scale_frames": ANCHORS, "qos.image": "reliable",
          "qos.image_depth": 100, "queue_size": 100, "publish.diagnostics_rate_hz": 20.0}
DEACTIVATE = 4


def _collected(probe) -> int:
    """How many images the stream holds, from the latest 'collecting anchor frames: n/N'."""
    for got in reversed(probe.snapshot("state_changes")):
        m = re.search(r"collecting anchor frames: (\d+)/", got.msg.message)
        if m:
            return int(m.group(1))
    return 0


def _save_async(probe, path):
    from lingbot_ros_interfaces.srv import SaveSession
    client = probe.clients["save_session"]
    assert client.wait_for_service(timeout_sec=30)
    return client.call_async(SaveSession.Request(path=str(path)))


def test_a_save_under_a_60hz_stream_blocks_neither_images_nor_diagnostics(tmp_path, ros_env):
    images = good_images(BEFORE + DURING, width=W, height=H, hz=60.0)
    with NodeProcess(ros_env, tmp_path, PARAMS) as node, Probe() as probe:
        probe.wait_active(node)
        probe.wait_for_image_subscriber()
        small = probe.call("save_session", probe.clients["save_session"].srv_type.Request(
            path=str(tmp_path / "empty.snap")), timeout=60)  # also: the client is known
        assert small.success, small.message
        for msg in images[:BEFORE]:
            probe.publish_image(msg)
        probe.wait_until(lambda: _collected(probe) == BEFORE, 120,
                         lambda: f"{BEFORE} images in the stream (have {_collected(probe)})")
        received_before = probe.counter("received")
        assert received_before == BEFORE, probe.last_diag()

        snap = tmp_path / "big.snap"
        future = _save_async(probe, snap)
        # The write has begun once its temporary folder exists: before the fix the executor
        # was then inside the service callback until the reply.
        probe.wait_until(lambda: future.done() or list(tmp_path.glob(".big.snap.*.tmp")),
                         120, "the save's temporary folder")
        assert not future.done(), "the save ended before its temporary folder was seen"
        t_write = time.monotonic()
        sent = 0
        while not future.done():
            if sent < DURING:  # a 60 Hz camera meanwhile
                probe.publish_image(images[BEFORE + sent])
                sent += 1
            time.sleep(1 / 60 if sent < DURING else 0.001)
        t_reply = time.monotonic()  # within a few ms of the reply's arrival
        reply = future.result()
        assert reply.success, reply.message
        manifest = read_manifest(snap)  # on disk, whole, when the reply came
        held = len(manifest["state"]["anchors"])
        assert BEFORE <= held <= BEFORE + DURING and reply.bytes > held * W * H * 3
        assert sum(f["bytes"] for f in manifest["files"].values()) > 40e6

        # While the files were written, the executor took images and ticked /diagnostics.
        during = [g for g in probe.snapshot("diagnostics") if t_write < g.t < t_reply]
        counts = [int(diag_values(g.msg).get("received", 0)) for g in during]
        assert len(during) >= 2 and max(counts, default=0) > received_before, (
            f"the write took {t_reply - t_write:.2f} s after its folder appeared; "
            f"diagnostics meanwhile: {len(during)}, received {counts}")
        for msg in images[BEFORE + sent:]:  # the rest, if the save was quicker than them
            probe.publish_image(msg)

        # Every image reached the stream: none lost, none under no counter.
        probe.wait_until(lambda: _collected(probe) == BEFORE + DURING, 120,
                         lambda: f"all {BEFORE + DURING} images in the stream "
                                 f"(have {_collected(probe)})")
        values = probe.wait_until(
            lambda: (lambda v: v if int(v.get("received", 0)) == BEFORE + DURING else None)(
                probe.last_diag()), 30, "diagnostics counting every image")
        assert not [k for k in values if k.startswith(("dropped", "rejected", "failed"))
                    and int(values[k])], values

        # Inactive: the same service, the same background write.
        assert probe.change_state(DEACTIVATE)
        assert probe.get_state()[0] == INACTIVE
        idle = tmp_path / "inactive.snap"
        future = _save_async(probe, idle)
        probe.wait_until(future.done, 120, "the ~/save_session reply (inactive)")
        reply = future.result()
        assert reply.success, reply.message
        assert len(read_manifest(idle)["state"]["anchors"]) == BEFORE + DURING
    assert node.poll() is not None
