"""A session's state as plain data, and back: the assembly between ``StreamingSession`` and
the snapshot format (``snapshot.py``).

    state = session_state(...)                     # StreamingSession.state_dict: each owner's
                                                   # state_dict + the pipeline's own
    loaded = load_session_state(state, model, config, laps)   # fresh owners, all checked;
                                                   # the session swaps them in
    manifest = restore_snapshot(path, model, config, session.load_state_dict)

Each owner (input policy, keyframe policy, segments, latency window, runner) saves and
loads its own part; this module gathers them with the pipeline's counters, trajectory and
buffered scale-phase frames into one tree, and rebuilds a complete set of owners from such a
tree before anything of the running stream is touched.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import torch

from ..config import SessionConfig
from ..geometry import Trajectory
from ..preprocess import CropInfo
from .input_policy import InputPolicy, SessionEvent
from .keyframes import KeyframePolicy, make_policy
from .next_segment import NextSegment
from .results import Frame
from .segments import Segments
from .snapshot import SnapshotError, check_compatible, read_snapshot
from .stats import HostLaps, LatencyWindow
from .stream_runner import StreamRunner

__all__ = ["session_state", "LoadedState", "load_session_state", "restore_snapshot"]

_CROP_FIELDS = ("input_hw", "resized_hw", "crop_xy", "output_hw")


def session_state(*, model_hw: Optional[tuple[int, int]], next_index: int, next_ticket: int,
                  counts: Counter, restarts: Counter, events, latency: LatencyWindow,
                  inputs: InputPolicy, policy: KeyframePolicy, segments: Segments,
                  trajectory: Trajectory, anchors: list[Frame],
                  runner: Optional[StreamRunner], next_segment: NextSegment) -> dict:
    """The stream's state tree (``StreamingSession.state_dict``): JSON-able values, numpy
    arrays and host tensors. The runner's device->host copy is the only wait."""
    stamps, poses = trajectory.snapshot()
    runner_state = None
    if runner is not None:
        state, tensors = runner.state_dict()
        runner_state = {"state": state, "tensors": tensors}
    return {
        "model_hw": None if model_hw is None else list(model_hw),
        "next_index": next_index, "next_ticket": next_ticket,
        "counts": dict(counts), "restarts": dict(restarts),
        "events": [{"kind": e.kind, "message": e.message} for e in events],
        "latency": latency.state_dict(),
        "input": inputs.state_dict(),
        "policy": policy.state_dict(),
        "segments": segments.state_dict(),
        "trajectory": {"stamps_ns": stamps, "poses": poses},
        "anchors": [{"image": f.image.detach().cpu().clone(), "stamp_ns": f.stamp_ns,
                     "crop": {k: list(getattr(f.crop, k)) for k in _CROP_FIELDS},
                     "index": f.index, "ticket": f.ticket} for f in anchors],
        "runner": runner_state,
        "next_segment": next_segment.state_dict(),  # a sliced rollover being built, or None
    }


@dataclass(frozen=True)
class LoadedState:
    """A stream rebuilt from a state tree into fresh owners, checked, not yet in use: the
    session swaps these in for its own (nothing of that swap can fail)."""

    model_hw: Optional[tuple[int, int]]
    runner: Optional[StreamRunner]  # a fresh runner holding the saved pages
    next_segment: NextSegment  # a sliced rollover's build, rerun to where it was
    inputs: InputPolicy
    policy: KeyframePolicy
    segments: Segments
    latency: LatencyWindow
    trajectory: Trajectory  # validated stamps and poses
    anchors: list[Frame]  # the scale phase's buffered frames, on the device
    next_index: int
    next_ticket: int  # the saved stream's; the session keeps the larger of it and its own
    counts: Counter
    restarts: Counter
    events: list[SessionEvent]


def load_session_state(state: dict, model, config: SessionConfig,
                       laps: HostLaps) -> LoadedState:
    """Fresh owners holding ``state`` (``session_state``'s tree, of a session of the same
    model and configuration; the runner's pages come from a fresh pool and record into
    ``laps``). Raises on a state that does not load (``SnapshotError`` among others)."""
    dev = torch.device(config.device)
    hw = None if state["model_hw"] is None else tuple(int(x) for x in state["model_hw"])
    inputs = InputPolicy(config)
    inputs.load_state_dict(state["input"])
    inputs.exempt_next_gap()  # the downtime before a restore is no scene change
    policy = make_policy(config.keyframes)
    policy.load_state_dict(state["policy"], dev)
    segments = Segments(config)
    segments.load_state_dict(state["segments"], dev)
    latency = LatencyWindow()
    latency.load_state_dict(state["latency"])
    trajectory = Trajectory()  # validates stamps and poses before anything is replaced
    traj = state["trajectory"]
    for stamp, pose in zip(np.asarray(traj["stamps_ns"]), np.asarray(traj["poses"])):
        trajectory.append(int(stamp), pose)
    now = time.perf_counter()
    anchors = [Frame(torch.as_tensor(a["image"]).to(dev), int(a["stamp_ns"]),
                     CropInfo(*(tuple(int(x) for x in a["crop"][k]) for k in _CROP_FIELDS)),
                     int(a["index"]), int(a["ticket"]), now) for a in state["anchors"]]
    runner = None
    if state["runner"] is not None:
        if hw is None:
            raise SnapshotError("the state has caches but no model input size")
        runner = StreamRunner(model, config, hw, laps=laps)
        runner.load_state_dict(state["runner"]["state"], state["runner"]["tensors"])
    events = [SessionEvent(e["kind"], e["message"]) for e in state["events"]]
    next_segment = NextSegment(model, config)
    build = state.get("next_segment")  # (absent in snapshots made before sliced rollovers)
    if build is not None:  # (the stream configuration, its rollover mode too, was checked)
        if hw is None:
            raise SnapshotError("the state has a rollover being built but no model input size")
        next_segment.load_state_dict(build, hw, dev)
    return LoadedState(
        model_hw=hw, runner=runner, next_segment=next_segment, inputs=inputs, policy=policy, segments=segments,
        latency=latency, trajectory=trajectory, anchors=anchors,
        next_index=int(state["next_index"]), next_ticket=int(state["next_ticket"]),
        counts=Counter({k: int(v) for k, v in state["counts"].items()}),
        restarts=Counter({k: int(v) for k, v in state["restarts"].items()}),
        events=events)


def restore_snapshot(path, model, config: SessionConfig,
                     load_state_dict: Callable[[dict], None]) -> dict:
    """Read the snapshot at ``path``, check it against ``model`` and ``config``, and hand its
    state to ``load_state_dict`` (``StreamingSession.restore``); returns its manifest. Any
    failure is a ``SnapshotError`` naming ``path`` and what is wrong."""
    try:
        manifest, state = read_snapshot(path)
        check_compatible(manifest, model, config)
    except (KeyError, TypeError, AttributeError) as exc:
        raise SnapshotError(f"{path}: the manifest is malformed ({type(exc).__name__}: "
                            f"{exc})") from exc
    try:
        load_state_dict(state)
    except SnapshotError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, RuntimeError) as exc:
        raise SnapshotError(f"{path}: the snapshot's state does not load: "
                            f"{type(exc).__name__}: {exc}") from exc
    return manifest
