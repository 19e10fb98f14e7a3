"""Stored maps in the node without ROS traffic (ros/backend/place_maps.py, the commands of
ros/backend/backend_thread.py, map_services.py's request parsing): a real ``Relocalizer`` of
a real place map (tests/loop/test_relocalize.py's plane and oracle pair) on the back end's
thread, driven by ``run_once`` (deterministic). The stream's own back end is
``ScriptedBackend`` (tests/ros/unit/test_backend_thread.py): its correction is what the test
says, so the anchor's algebra is checked exactly."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest

from lingbot_ros.geometry import rigid_inverse
from lingbot_ros.loop.config import LoopConfig
from lingbot_ros.loop.place_map import PlaceMapError, place_map_from
from lingbot_ros.loop.relocalize import Relocalizer
from lingbot_ros.ros.backend.backend_thread import BackendThread
from lingbot_ros.ros.backend.corrections import frame_correction, odom_correction
from lingbot_ros.ros.backend.place_maps import (LOADED, LOCALIZED, NO_MAP, WAITING,
                                                node_place_map, prior_in_camera)
from lingbot_ros.ros.tf.frame_chain import FrameChain
from tests.loop import test_place_map as maps
from tests.loop.test_relocalize import CURRENT, OFFSET, Oracle, frame, pose, stored_map
from tests.ros.unit.test_backend_thread import ScriptedBackend, shift

LOG = logging.getLogger("test_place_maps_node")
CHAIN = FrameChain.robot("base_link", "camera", pose((0.1, -0.2, 0.3), (0.2, 0.0, 0.5)),
                         camera_is_optical=False)


@dataclass(frozen=True)
class Result:
    """A frame result as ``metric_result`` and our ``keyframe_input`` take it."""

    index: int
    c2w: np.ndarray
    depth: np.ndarray


def keyframe_input(result: Result):
    kf = frame(result.index, 5.0 + result.index)
    return kf.__class__(**{**kf.__dict__, "T_odom_cam": result.c2w, "depth": result.depth})


def make_thread(tmp_path, loops_at=(), queue_size: int = 10):
    oracle = Oracle()
    backend = ScriptedBackend(loops_at)
    seen = []
    thread = BackendThread(
        lambda: backend, keyframe_input, queue_size=queue_size, log=LOG,
        on_loops=lambda events, view, chain, stamps: seen.append(
            (events, view.keyframe_poses())),
        make_relocalizer=lambda m: Relocalizer(LoopConfig(top_k=2), m, oracle))
    return thread, oracle, backend, seen


def offer(thread, oracle, i: int, run: bool = True) -> None:
    """Keyframe ``i`` (``CURRENT[i]``) to the thread; ``run``: processed now (the oracle
    pair then sees its true pose)."""
    if run:
        oracle.current = CURRENT[i]
    kf = frame(i, 5.0 + i)
    thread.offer(Result(i, np.array(kf.T_odom_cam), kf.depth), CHAIN, 1.0)
    if run:
        assert thread.run_once(0.0)


def test_refused_loads_change_nothing(tmp_path):
    thread, _, _, _ = make_thread(tmp_path)

    def corrupt():
        raise PlaceMapError("maps/lab/poses.npy does not match its SHA-256 in the manifest")
    ok, message, *_ = thread.load_map(corrupt, "maps/lab").wait(5)
    assert not ok and "SHA-256" in message
    model_units = place_map_from(maps.database(), maps.optimised(maps.database()), "model")
    ok, message, *_ = thread.load_map(lambda: model_units, "maps/model").wait(5)
    assert not ok and "not metres" in message
    ok, message, *_ = thread.localize(None).wait(5)
    assert not ok and "no place map loaded" in message
    facts = thread.facts()
    assert facts.localization.state == NO_MAP and not facts.localization.hold_map_to_odom
    assert facts.info()["localization"] == "no map"
    np.testing.assert_array_equal(facts.correction, np.eye(4))


def test_localized_map_to_odom_is_the_stored_maps_frame(tmp_path):
    thread, oracle, backend, seen = make_thread(tmp_path, loops_at=(2,), queue_size=1)
    stored = stored_map(tmp_path)
    ok, message, keyframes, facts = thread.load_map(lambda: stored, "lab").wait(5)
    assert ok and keyframes == len(stored) and facts.state == LOADED, message
    ok, _, _, facts = thread.localize(None).wait(5)
    assert ok and facts.state == WAITING
    kw, note = frame_correction(thread, CHAIN)
    assert kw["hold_map_to_odom"] and "not localized in the stored map" in note

    offer(thread, oracle, 0)  # two candidates verify and agree: localized on the first
    facts = thread.facts()
    assert facts.localization.state == LOCALIZED, facts.localization
    np.testing.assert_allclose(facts.correction, OFFSET, atol=1e-6)  # T_map_odom
    kf = frame(0, 5.0)
    np.testing.assert_allclose(
        facts.localization.pose,
        odom_correction(CHAIN, OFFSET) @ CHAIN.tracked_in_map(kf.T_odom_cam), atol=1e-9)
    kw, note = frame_correction(thread, CHAIN)
    assert "hold_map_to_odom" not in kw and note == ""
    np.testing.assert_allclose(kw["map_to_odom"], odom_correction(CHAIN, OFFSET), atol=1e-6)
    # ~/path and the map are rebuilt in the stored map's frame at the localization
    events, poses = seen[-1]
    assert events == () and np.allclose(poses[0], facts.correction @ backend.correction)

    # keyframes keep localizing (a refresh: the same anchor here); then the stream's own
    # loop on a keyframe not verified (the queue of 1 was full): map -> odom keeps it,
    # through the anchor
    oracle.current = CURRENT[1]
    offer(thread, oracle, 1, run=False)
    offer(thread, oracle, 2, run=False)  # ScriptedBackend closes a loop: shift(0.2)
    assert thread.run_once(0.0) and thread.run_once(0.0)
    facts = thread.facts()
    assert facts.localization.localizations == 2 and backend.offered[-1] == (2, False)
    anchor = OFFSET  # T_stored_odom @ (own correction then: identity)^-1
    np.testing.assert_allclose(facts.correction, anchor @ shift(0.2), atol=1e-6)
    events, _ = seen[-1]
    np.testing.assert_allclose(events[0].correction, anchor @ shift(0.2), atol=1e-6)

    # a new stream: waiting again, map -> odom held, the map kept
    thread.reset()
    facts = thread.facts()
    assert facts.localization.state == WAITING and facts.localization.hold_map_to_odom
    assert facts.localization.map_keyframes == len(stored)
    np.testing.assert_array_equal(facts.correction, np.eye(4))
    # a snapshot keeps the stream's own correction, never the anchor
    assert np.allclose(thread.state_dict()["correction"], np.eye(4))


def test_a_prior_far_from_the_place_finds_nothing(tmp_path):
    thread, oracle, _, _ = make_thread(tmp_path)
    thread.load_map(lambda: stored_map(tmp_path), "lab").wait(5)
    far = CHAIN.tracked_in_map(pose((0, 0, 0), (500.0, 0, 0)))
    ok, *_ = thread.localize((far, 1.0)).wait(5)
    assert ok
    offer(thread, oracle, 0)
    loc = thread.facts().localization
    assert loc.state == WAITING and loc.last_outcome == "no_candidates" and loc.offers == 1
    near = odom_correction(CHAIN, OFFSET) @ CHAIN.tracked_in_map(frame(1, 6.0).T_odom_cam)
    thread.localize((near, 2.0)).wait(5)
    offer(thread, oracle, 1)
    assert thread.facts().localization.state == LOCALIZED


@pytest.mark.parametrize("chain", [CHAIN, FrameChain.camera_only("cam", True),
                                   FrameChain.camera_only("cam", False)])
def test_the_prior_is_the_inverse_of_the_chain(chain):
    c2w = pose((0.3, -0.2, 0.1), (1.0, 2.0, -0.5))
    np.testing.assert_allclose(prior_in_camera(chain, chain.tracked_in_map(c2w)), c2w,
                               atol=1e-12)
    with pytest.raises(ValueError, match="finite"):
        prior_in_camera(chain, np.full((4, 4), np.nan))


def test_the_saved_map_is_in_metres_with_the_anchor():
    db = maps.database()
    poses = maps.optimised(db)
    backend = SimpleNamespace(database=db, keyframe_poses=lambda: poses, intrinsics=None)
    m = node_place_map(backend, None, "map", 0.4, "fixed")
    assert (m.units, m.scale, m.scale_source, m.frame_id) == ("m", 0.4, "fixed", "map")
    np.testing.assert_array_equal(m.poses[0], poses[int(m.ids[0])])  # already metres
    anchored = node_place_map(backend, OFFSET, "map", None, "none")
    assert anchored.units == "model" and anchored.scale is None
    np.testing.assert_allclose(anchored.poses[0], OFFSET @ poses[int(m.ids[0])])
    assert np.allclose(rigid_inverse(OFFSET) @ anchored.poses[1], poses[int(m.ids[1])])


def test_requests_are_checked():
    from geometry_msgs.msg import Pose

    from lingbot_ros.ros.backend.map_services import pose_matrix, prior_of
    p = Pose()
    p.position.x, p.orientation.w = 2.0, 1.0
    request = SimpleNamespace(use_prior=True, prior_pose=p, prior_radius_m=3.0)
    T, r = prior_of(request)
    assert r == 3.0 and np.allclose(T, shift(2.0))
    assert prior_of(SimpleNamespace(use_prior=False)) is None
    with pytest.raises(ValueError, match="prior_radius_m"):
        prior_of(SimpleNamespace(use_prior=True, prior_pose=p, prior_radius_m=0.0))
    p.orientation.w = 0.5
    with pytest.raises(ValueError, match="unit quaternion"):
        pose_matrix(p)


def test_a_stopped_thread_answers_what_it_did_not_run(tmp_path):
    import threading
    import time
    thread, _, _, _ = make_thread(tmp_path)
    thread.start()
    started, release = threading.Event(), threading.Event()

    def hold():  # holds the thread until released
        started.set()
        release.wait(10)
        return True, "ran"
    first = thread.submit(hold)
    assert started.wait(10)
    second = thread.submit(lambda: (True, "ran"))  # queued behind it
    stopper = threading.Thread(target=thread.stop)
    stopper.start()
    deadline = time.monotonic() + 10
    while not thread._stopping and time.monotonic() < deadline:
        time.sleep(0.001)
    release.set()
    stopper.join(10)
    assert first.wait(5) == (True, "ran")
    ok, message = second.wait(5)
    assert not ok and "stopped" in message


def test_start_settings_are_checked():
    from lingbot_ros.ros.backend.factory import start_problem
    from lingbot_ros.ros.params.declare import build_settings
    base = {"loop.enable": True, "scale.source": "fixed", "scale.factor": 0.5}
    assert start_problem(build_settings({**base, "map.load_on_start": "lab"})) is None
    for values, reason in (({"map.localize_on_start": True}, "needs map.load_on_start"),
                           ({"map.load_on_start": "lab", "loop.enable": False},
                            "needs loop.enable"),
                           ({"map.load_on_start": "lab", "scale.source": "none"},
                            "metric scale")):
        assert reason in start_problem(build_settings({**base, **values}))


def _handlers(tmp_path, maps, source_metric: bool = True):
    """``MapHandlers`` without an executor (``wait_done`` then blocks on the reply) over a
    thread that is not running (its commands run at once, on this thread)."""
    import asyncio

    from lingbot_ros.geometry import FileRoot
    from lingbot_ros.ros.backend.map_services import MapHandlers
    node = SimpleNamespace(executor=None, get_logger=lambda: LOG)
    stream = SimpleNamespace(files=FileRoot(tmp_path), scale=None)
    handlers = MapHandlers(node, lambda: stream, lambda: maps)
    return handlers, asyncio.run


def _request(**fields):
    from lingbot_ros_interfaces.srv import LoadMap, LocalizeInMap
    kind = LocalizeInMap if "use_prior" in fields or fields.pop("localize", False) else LoadMap
    return kind.Request(**fields), kind.Response()


def test_the_handlers_refuse_clearly(tmp_path):
    from lingbot_ros.ros.backend.factory import MapAccess
    handlers, run = _handlers(tmp_path, None)
    ok, message, _ = run(handlers.save_place_map("maps/lab"))
    assert not ok and "loop.enable is off" in message
    for name, fields in (("load_map", {"path": "lab"}),
                         ("localize_in_map", {"path": "", "localize": True})):
        response = run(getattr(handlers, name)(*_request(**fields)))
        assert not response.success and "loop.enable is off" in response.message
    thread, *_ = make_thread(tmp_path)
    handlers, run = _handlers(tmp_path, MapAccess(thread, "map", "none", False))
    response = run(handlers.load_map(*_request(path="lab")))
    assert not response.success and "scale.source: none" in response.message
    handlers, run = _handlers(tmp_path, MapAccess(thread, "map", "fixed", True))
    response = run(handlers.load_map(*_request(path="../elsewhere")))
    assert not response.success and "not loaded" in response.message
    response = run(handlers.localize_in_map(*_request(path="", localize=True)))
    assert not response.success and "no place map loaded" in response.message
    assert thread.facts().localization.state == NO_MAP


def test_load_then_a_corrupt_map_leaves_the_first_loaded(tmp_path):
    import shutil

    from lingbot_ros.ros.backend.factory import MapAccess
    thread, *_ = make_thread(tmp_path)
    stored = stored_map(tmp_path)  # tmp_path/lab
    handlers, run = _handlers(tmp_path, MapAccess(thread, "map", "fixed", True))
    response = run(handlers.load_map(*_request(path="lab")))
    assert response.success and response.keyframes == len(stored), response.message
    shutil.copytree(tmp_path / "lab", tmp_path / "bad")
    blob = bytearray((tmp_path / "bad" / "codes.npy").read_bytes())
    blob[-1] ^= 0x01
    (tmp_path / "bad" / "codes.npy").write_bytes(bytes(blob))
    response = run(handlers.load_map(*_request(path="bad")))
    assert not response.success and "codes.npy does not match its SHA-256" in response.message
    loc = thread.facts().localization
    assert (loc.state, loc.map_id) == (LOADED, stored.map_id)
    request, response = _request(path="", localize=True)
    request.use_prior, request.prior_radius_m = True, 5.0
    request.prior_pose.orientation.w = 1.0
    response = run(handlers.localize_in_map(request, response))
    assert response.success and not response.localized, response.message
    assert thread.facts().localization.state == WAITING
