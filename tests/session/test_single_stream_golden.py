"""One stream's outcomes, stored: a micro-model CPU run through the scale phase, the
``every_n`` and ``flow`` keyframe policies, a blocking and a sliced rollover, a restart (a
stamp jump), a rejected frame and a reset, pipelined (``submit`` / ``collect``) and pushed.
Decisions, segments, tickets and every cache count must be exactly the stored ones, poses
and depth within float noise: a refactor of the session's pipeline (issue 35's split of
``submit``) changes none of them.

The stored values (golden_single_stream.json, beside this file) were computed before the
split; ``LINGBOT_GOLDEN_WRITE=1`` rewrites them (only for an intended behaviour change)."""
import json
import os
from pathlib import Path

import numpy as np
import pytest

from lingbot_ros.config import KeyframeConfig, SessionConfig
from lingbot_ros.session import FrameFailed, FrameRejected, StreamingSession
from tests.session.micro_model import SIZE_42x56, micro_model
from tests.session.test_streaming_session import DT, STAMP0, frames

GOLDEN = Path(__file__).with_name("golden_single_stream.json")
INFO_KEYS = ("frames_in", "frames_processed", "keyframes", "non_keyframes", "frames_rejected",
             "rejected_by_reason", "frames_failed", "phase", "segment", "segment_keyframes",
             "rollovers", "restarts", "restarts_by_reason", "trajectory_poses",
             "steps_planned_ahead", "cache", "camera_cache")


def config(name: str) -> SessionConfig:
    common = dict(preprocess=SIZE_42x56, attention_backend="torch_ref", num_scale_frames=3,
                  window=3, rollover_keyframes=6, max_gap_s=1.0)
    if name == "every_n_blocking":
        common["rollover_keyframes"] = 9  # not always near a rollover: depth may be skipped
        return SessionConfig(keyframes=KeyframeConfig(policy="every_n", n=2), **common)
    if name == "flow_sliced":
        return SessionConfig(keyframes=KeyframeConfig(policy="flow", flow_threshold=1e5,
                                                      max_gap=4),
                             rollover_mode="sliced", rollover_slices_per_frame=3, **common)
    if name == "all_push":
        return SessionConfig(keyframes=KeyframeConfig(policy="all"), **common)
    raise KeyError(name)


def outcome_row(o) -> dict:
    if isinstance(o, FrameFailed):
        return {"failed": o.reason, "tickets": list(o.tickets)}
    return {"index": o.index, "ticket": o.ticket, "stamp": o.stamp_ns - STAMP0,
            "keyframe": o.keyframe, "segment": o.segment,
            "c2w": o.c2w[:3].ravel().tolist(), "pose_enc": o.pose_enc.astype(float).tolist(),
            "depth": None if o.depth is None else [float(o.depth.mean()),
                                                   float(o.depth.std())]}


def info_row(s: StreamingSession) -> dict:
    d = s.info().as_dict()
    return {k: d[k] for k in INFO_KEYS}


def stamps(n: int, first: int = 0) -> list[int]:
    return [STAMP0 + (first + i) * DT for i in range(n)]


def feed(s: StreamingSession, images, stamp_list, pipelined: bool, log: list,
         no_depth_every: int = 0) -> None:
    """Hand ``images`` in (pipelined: ``submit`` then ``collect(wait=False)``, else
    ``push``); log every outcome and rejection, and the info after each frame."""
    for i, (image, stamp) in enumerate(zip(images, stamp_list)):
        try:
            if pipelined:
                with_depth = False if no_depth_every and i % no_depth_every == 1 else None
                s.submit(image, stamp, with_depth=with_depth)
                log += [outcome_row(o) for o in s.collect(wait=False)]
            else:
                log += [outcome_row(o) for o in s.push(image, stamp)]
        except FrameRejected as exc:
            log.append({"rejected": exc.reason})
        log.append({"info": info_row(s)})
    if pipelined:
        log += [outcome_row(o) for o in s.collect()]
    log.append({"rollovers": [[r.segment, r.frame_index] for r in s.rollovers]})


def scenario(name: str) -> list:
    s = StreamingSession(micro_model(), config(name))
    imgs = frames(40, seed=11)
    log: list = []
    pipelined = name != "all_push"
    n = 22 if name == "every_n_blocking" else 26
    feed(s, imgs[:n], stamps(n), pipelined, log, no_depth_every=3)
    # a duplicate stamp (rejected), then a jump of 2 s: the stream restarts on that frame
    feed(s, imgs[n:n + 1], stamps(1, n - 1), pipelined, log)
    feed(s, imgs[n:n + 7], stamps(7, n + 60), pipelined, log)
    s.reset()
    log.append({"info": info_row(s)})
    feed(s, imgs[:6], stamps(6, 500), pipelined, log)
    return log


NAMES = ("every_n_blocking", "flow_sliced", "all_push")


def compare(got, want, where="") -> None:
    if isinstance(want, float):
        assert isinstance(got, float), where
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=where)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want), where
        for k in want:
            compare(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want)):
            compare(a, b, f"{where}[{i}]")
    else:
        assert got == want, where


@pytest.mark.parametrize("name", NAMES)
def test_a_single_stream_gives_the_stored_outcomes(name):
    got = json.loads(json.dumps(scenario(name)))
    if os.environ.get("LINGBOT_GOLDEN_WRITE") == "1":
        stored = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        stored[name] = got
        GOLDEN.write_text(json.dumps(stored, indent=None, separators=(",", ":")) + "\n")
    want = json.loads(GOLDEN.read_text())[name]
    compare(got, want, name)


def test_the_scenarios_cover_what_they_claim():
    stored = json.loads(GOLDEN.read_text())
    for name in NAMES:
        rows = stored[name]
        infos = [r["info"] for r in rows if "info" in r]
        results = [r for r in rows if "keyframe" in r]
        assert max(i["rollovers"] for i in infos) >= 1, name
        assert any(i["restarts_by_reason"] for i in infos), name
        assert any(r.get("rejected") for r in rows), name
        assert any(r["index"] == 0 and r["ticket"] > 0 for r in results), name  # restarted
        if name != "all_push":
            assert any(not r["keyframe"] for r in results), name
        if name == "every_n_blocking":
            assert any(r["depth"] is None for r in results), name
