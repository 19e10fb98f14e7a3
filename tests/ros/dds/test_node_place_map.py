"""Stored place maps and relocalization in the node over real DDS (issue 34, item 5; docs/node.md
"Stored maps and relocalization"): two node processes, one after the other, a probe in this one.

The model is the tiny preset whose camera head puts every frame at the identity
(``tests/loop/still_camera.py``): a pair's relative pose is then the identity, so a
candidate verifies (the geometric gates opened: random depths disagree) and the whole path
-- the back end's database, ~/save_map's place map, ~/load_map, the ``Relocalizer``, the
confirmation, map -> odom -- runs through the real model and session. The scale is
``fixed`` (0.4 m per model unit): locked from the first frame, so the back end works in
metres and the map is saved in metres.

1. Node 1 runs a pass of the synthetic scene with ``loop.enable``, then ~/save_map with
   ``place_map``: the PLY and the place map (metres, scale source ``fixed``); the place map
   alone (``path`` ""), replacing its own; a folder not ours is refused, untouched.
2. This process writes a *moved* copy of that map (every pose times a known rigid ``G``),
   so the localization has a non-trivial answer: node 2 must end up in the moved map's
   frame, its map -> odom ``bo G bo^-1`` (``bo``: the optical frame in the camera body
   frame) and its ~/pose of every revisited place node 1's pose there moved by it.
3. Node 2 (a second process) runs the scene; a corrupt copy of the map (one byte of an
   array file flipped) and a foreign folder are refused by ~/load_map with the reason, the
   stream publishing meanwhile, unchanged (map -> odom the identity, no localization).
4. ~/localize_in_map with the moved map's path answers at once (localized false); until it
   localizes /diagnostics says ``waiting``, ~/status says so and /tf has no map -> odom;
   the same images again localize it, and from then on map -> odom is the moved map's.
5. Node 3 does the same with ``map.load_on_start`` and ``map.localize_on_start``; a
   corrupt ``map.load_on_start`` fails the start (exit 1), saying why.
"""
from __future__ import annotations

import dataclasses
import uuid

import numpy as np

from lingbot_ros.geometry import T_BODY_OPTICAL, rigid_inverse, rotation_exp
from tests.loop.still_camera import still_camera_checkpoint
from tests.ros.dds.test_node_loop_closure import CAMERA, GATES, LoopProbe, matrix, transforms
from tests.ros.node_harness import NodeProcess, good_images, stamp_ns
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture

FRAMES = 8
SCALE = {"scale.source": "fixed", "scale.factor": 0.4}
PARAMS = {**GATES, **SCALE, "qos.image": "reliable", "qos.image_depth": 100,
          "queue_size": 100, "loop.queue_size": 100, "publish.map_points": True}
# the moved map: a turn about the optical y axis (the body's -z) and a shift, metres
G = np.eye(4)
G[:3, :3] = rotation_exp(np.array([0.0, 0.3, 0.0]))
G[:3, 3] = (1.5, -0.25, 2.0)


class MapProbe(LoopProbe):
    """The loop test's probe, plus the place-map services."""

    def setup(self, node) -> None:
        super().setup(node)
        from lingbot_ros_interfaces.srv import LoadMap, LocalizeInMap, SaveMap
        n = self._node_name
        for name, srv in (("save_map", SaveMap), ("load_map", LoadMap),
                          ("localize_in_map", LocalizeInMap)):
            self.clients[name] = node.create_client(srv, f"{n}/{name}")

    def request(self, name: str, timeout: float = 60.0, **fields):
        return self.call(name, self.clients[name].srv_type.Request(**fields), timeout)


def send_and_wait(probe, images) -> None:
    """Publish ``images``; return once the last one's pose and its /tf (another topic:
    odom -> camera and map -> odom go out in one message, after the pose) arrived."""
    for msg in images:
        probe.publish_image(msg)
    last = stamp_ns(images[-1].header.stamp)
    probe.wait_for_pose_of(last, timeout=180)
    probe.wait_until(lambda: last in transforms(probe, "odom", CAMERA), 30,
                     f"the /tf of {last}")


def wait_backend_idle(probe, keyframes: int) -> None:
    probe.wait_until(lambda: probe.counter("loop_keyframes") >= keyframes
                     and probe.counter("loop_queued") == 0, 120,
                     lambda: f"the back end idle after {keyframes} keyframes: "
                             f"{probe.last_diag()}")


def poses_of(probe) -> dict[int, np.ndarray]:
    return {stamp_ns(g.msg.header.stamp): matrix(g.msg.pose.position, g.msg.pose.orientation)
            for g in probe.snapshot("poses")}


def moved_copy(source, target) -> None:
    """``source``'s place map with every pose ``G @ T_map_cam`` (a new map id) at ``target``."""
    from lingbot_ros.loop.place_map import read_place_map, write_place_map
    m = read_place_map(source)
    write_place_map(target, dataclasses.replace(m, map_id=str(uuid.uuid4()),
                                                poses=G @ m.poses))


def corrupt_copy(source, target) -> None:
    """``source`` copied with one byte of its poses' array file flipped (digests unchanged)."""
    import shutil
    shutil.copytree(source, target)
    victim = target / "poses.npy"
    blob = bytearray(victim.read_bytes())
    blob[-3] ^= 0x40
    victim.write_bytes(bytes(blob))


def test_a_saved_map_gives_a_second_node_the_first_ones_map_frame(tmp_path, ros_env):
    first = good_images(FRAMES)
    checkpoint = still_camera_checkpoint(tmp_path / "still.safetensors")
    params = {**PARAMS, "checkpoint": str(checkpoint)}

    # 1. node 1: a pass, then the PLY and the place map
    with NodeProcess(ros_env, tmp_path, params, name="node1") as node, MapProbe() as probe:
        probe.wait_active(node)
        probe.wait_for_image_subscriber()
        send_and_wait(probe, first)
        wait_backend_idle(probe, FRAMES)
        ply_only = probe.request("save_map", path="map1.ply", place_map="")
        assert ply_only.success and ply_only.keyframes == 0, ply_only.message
        saved = probe.request("save_map", path="map1.ply", place_map="map1")
        assert saved.success, saved.message
        assert saved.keyframes >= 1 and "(m)" in saved.message, saved.message
        alone = probe.request("save_map", path="", place_map="map1")  # replaces our own
        assert alone.success and alone.keyframes == saved.keyframes, alone.message
        (tmp_path / "theirs").mkdir()
        (tmp_path / "theirs" / "notes.txt").write_text("not ours\n")
        refused = probe.request("save_map", path="", place_map="theirs")
        assert not refused.success and "theirs" in refused.message, refused.message
        assert (tmp_path / "theirs" / "notes.txt").read_text() == "not ours\n"
        node1_poses = poses_of(probe)
    assert (tmp_path / "map1.ply").is_file()
    from lingbot_ros.loop.place_map import read_place_map
    stored = read_place_map(tmp_path / "map1")
    assert (stored.units, stored.scale, stored.scale_source) == ("m", 0.4, "fixed")
    assert len(stored) == saved.keyframes

    moved_copy(tmp_path / "map1", tmp_path / "moved")
    corrupt_copy(tmp_path / "map1", tmp_path / "corrupt")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "manifest.json").write_text('{"format": "something else"}\n')

    # 2. node 2: the same scene; refusals leave the running stream as it was
    start2 = stamp_ns(first[-1].header.stamp) + 5_000_000_000
    before = good_images(FRAMES // 2, start_ns=start2)
    with NodeProcess(ros_env, tmp_path, params, name="node2") as node, MapProbe() as probe:
        probe.wait_active(node)
        probe.wait_for_image_subscriber()
        send_and_wait(probe, before)
        for folder, reason in (("corrupt", "poses.npy does not match its sha-256"),
                               ("foreign", "not a lingbot_ros place map")):
            response = probe.request("load_map", path=folder)
            assert not response.success, response.message
            assert "not loaded" in response.message and reason in response.message.lower()
        bo = np.asarray(T_BODY_OPTICAL, float)
        during = good_images(2, start_ns=stamp_ns(before[-1].header.stamp) + 100_000_000)
        send_and_wait(probe, during)
        map_odom = transforms(probe, "map", "odom")
        for s in (stamp_ns(m.header.stamp) for m in before + during):
            np.testing.assert_allclose(map_odom[s], np.eye(4), atol=1e-6)
        probe.wait_until(lambda: probe.last_diag().get("localization") == "no map", 30,
                         lambda: f"localization: no map ({probe.last_diag()})")

        # 3. localize in the moved map: answered at once, then waiting, then localized
        response = probe.request("localize_in_map", path="moved")
        assert response.success and not response.localized, response.message
        asked = stamp_ns(during[-1].header.stamp)
        again = good_images(FRAMES, start_ns=asked + 2_000_000_000)
        send_and_wait(probe, again)
        probe.wait_until(lambda: probe.last_diag().get("localization") == "localized", 120,
                         lambda: f"localized (diagnostics: {probe.last_diag()})")
        last = good_images(2, start_ns=stamp_ns(again[-1].header.stamp) + 1_000_000_000)
        send_and_wait(probe, last)
        diag = probe.last_diag()
        assert int(diag["localizations"]) >= 1 and diag["map_keyframes"] == str(len(stored))
        waiting = [g.msg.message for g in probe.snapshot("status")
                   if "not localized in the stored map" in g.msg.message]
        assert waiting, "~/status never said the node was waiting to localize"

        # map -> odom: none while waiting, the moved map's once localized
        map_odom = transforms(probe, "map", "odom")
        odom_cam = transforms(probe, "odom", CAMERA)
        expected = bo @ G @ rigid_inverse(bo)
        after = [stamp_ns(m.header.stamp) for m in last]
        sent = [stamp_ns(m.header.stamp) for m in again]
        held = [s for s in sent if s not in map_odom]
        assert held and held == sent[:len(held)], "map -> odom not withheld before localizing"
        poses2 = poses_of(probe)
        ref = node1_poses[stamp_ns(first[0].header.stamp)]  # node 1's pose of this place
        for s in after:
            np.testing.assert_allclose(map_odom[s], expected, atol=1e-4)
            np.testing.assert_allclose(poses2[s], map_odom[s] @ odom_cam[s], atol=1e-6)
            np.testing.assert_allclose(poses2[s], expected @ ref, atol=1e-4)

    # 4. node 3: map.load_on_start + map.localize_on_start do the same without a call
    restart = good_images(FRAMES, start_ns=stamp_ns(last[-1].header.stamp) + 5_000_000_000)
    on_start = {**params, "map.load_on_start": "moved", "map.localize_on_start": True}
    with NodeProcess(ros_env, tmp_path, on_start, name="node3") as node, MapProbe() as probe:
        probe.wait_active(node)
        probe.wait_for_image_subscriber()
        send_and_wait(probe, restart)
        probe.wait_until(lambda: probe.last_diag().get("localization") == "localized", 120,
                         lambda: f"localized at start (diagnostics: {probe.last_diag()})")
        tail = good_images(2, start_ns=stamp_ns(restart[-1].header.stamp) + 1_000_000_000)
        send_and_wait(probe, tail)
        map_odom = transforms(probe, "map", "odom")
        for s in (stamp_ns(m.header.stamp) for m in tail):
            np.testing.assert_allclose(map_odom[s], expected, atol=1e-4)
        assert "map.load_on_start: loaded the place map" in node.log()

    # ... and a corrupt one fails the start, with the reason
    with NodeProcess(ros_env, tmp_path, {**params, "map.load_on_start": "corrupt"},
                     name="node4") as node:
        rc = node.wait(60)
        log = node.log()
    assert rc == 1, log[-3000:]
    assert any("map.load_on_start: not loaded" in line and "SHA-256" in line
               for line in log.splitlines() if "[ERROR]" in line), log[-3000:]
