"""A session's state as plain data, and back: the assembly between ``StreamingSession`` and
the snapshot format (``snapshot_codec.py``).

    state = session_state(...)                     # SessionSnapshots.state_dict: each
                                                   # owner's state_dict + the pipeline's own
    loaded = load_session_state(state, model, config, laps)   # fresh owners, all checked;
                                                   # SessionSnapshots swaps them in
    manifest = session.snapshots.restore(path)     # read, check, load (``SessionSnapshots``)

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
from .fingerprint import InputFingerprint, check_digests
from .input_policy import InputPolicy, SessionEvent
from .keyframes import KeyframePolicy, make_policy
from .next_segment import NextSegment
from .results import Frame
from .segments import Segments
from .snapshot_codec import (SnapshotData, SnapshotError, check_compatible, read_snapshot,
                       snapshot_data, write_snapshot)
from .snapshot_parts import check_stream_state
from .stats import HostLaps, LatencyWindow
from .stream_runner import StreamRunner

__all__ = ["session_state", "LoadedState", "load_session_state", "SessionSnapshots",
           "restore_snapshot"]

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
    check_stream_state(state)  # every registered stream part (session/snapshot_parts.py)
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


class SessionSnapshots:
    """A session's snapshots (``session.snapshots``): its state as plain data and back, in
    host memory and on disk. The session's friend: it reads and swaps the session's owners,
    which the session itself only drives frame by frame.

        data = session.snapshots.take(extra)        # between frames: the device->host copy
        write_snapshot(data, path)                  # needs nothing of the session (a thread)
        session.snapshots.save(path, extra)         # both at once; returns (path, bytes)
        manifest = session.snapshots.restore(path)  # the stream continues from ``path``
    """

    def __init__(self, session) -> None:
        self._s = session

    def state_dict(self) -> dict:
        """Everything the next frame's outcome depends on, as plain data (JSON-able values,
        numpy arrays, host tensors): each owner's ``state_dict`` (input policy, keyframe
        policy, segments, the runner's caches) plus the pipeline's own (frame counters,
        buffered scale-phase frames, trajectory, statistics). Only at a frame boundary:
        ``SnapshotError`` while a frame is in flight or outcomes wait to be collected
        (``collect()`` first). The device->host copy is the only wait. A rollover being
        built beside the stream (``rollover_mode: sliced``) is saved as its anchors and
        progress (``NextSegment.state_dict``)."""
        s = self._s
        if s._flight is not None:
            raise SnapshotError("a frame is in flight: collect() it first (a snapshot is "
                                "taken between frames)")
        if s._ready:
            raise SnapshotError(f"{len(s._ready)} outcome(s) not yet collected: collect() "
                                "them first (a snapshot is taken between frames)")
        return dict(session_state(
            model_hw=s._model_hw, next_index=s._next_index, next_ticket=s._next_ticket,
            counts=s._counts, restarts=s._restarts, events=s._events, latency=s._latency,
            inputs=s._input, policy=s._policy, segments=s._segments, trajectory=s.trajectory,
            anchors=s._anchors, runner=s._runner, next_segment=s._next),
            input_fingerprint=s._fingerprint.state_dict())

    def load_state_dict(self, state: dict) -> None:
        """Continue the stream of ``state_dict``'s output (of a session of the same model and
        configuration; its pages go to a fresh pool). Everything is built and checked first;
        only then is the current stream replaced (on any error it is untouched). A frame in
        flight and outcomes not collected are dropped."""
        s = self._s
        loaded = load_session_state(state, s.model, s.config, s.timing.laps)
        try:
            fingerprint = check_digests(state.get("input_fingerprint", []))
        except ValueError as exc:
            raise SnapshotError(str(exc)) from None
        # -- swap (nothing below can fail) --
        if s._take_flight() is not None:  # the frame in flight, a rollover being built and
            s._readback.discard()         # outcomes not collected are dropped
        s._next.drop()
        s._ready = []
        s._runner, s._model_hw = loaded.runner, loaded.model_hw
        s._next = loaded.next_segment
        s._input, s._policy = loaded.inputs, loaded.policy
        s._segments, s._latency = loaded.segments, loaded.latency
        s.trajectory.reset()
        for stamp, pose in zip(*loaded.trajectory.snapshot()):
            s.trajectory.append(int(stamp), pose)
        s._anchors = loaded.anchors
        s._next_index = loaded.next_index
        s._next_ticket = max(s._next_ticket, loaded.next_ticket)
        s._counts, s._restarts = loaded.counts, loaded.restarts
        s._events.clear()
        s._events.extend(loaded.events)
        s._fingerprint = InputFingerprint(fingerprint)

    def take(self, extra: Optional[dict] = None,
             front_end_state: Optional[dict] = None) -> SnapshotData:
        """The stream's snapshot in host memory (``state_dict`` + manifest), made between
        frames: the part of ``save`` that waits for the device (its copy to the host).
        ``write_snapshot(data, path)`` then needs nothing of the session (a thread may run
        it). ``extra``: a front end's JSON-able additions (``manifest["extra"]``);
        ``front_end_state``: its own state with arrays (``manifest["front_end_state"]`` of
        ``restore``)."""
        s = self._s
        return snapshot_data(s.model, s.config, s.weights.origin(), self.state_dict(), extra,
                             front_end_state)

    def save(self, path, extra: Optional[dict] = None,
             front_end_state: Optional[dict] = None) -> tuple:
        """Write the stream's snapshot to the directory ``path`` (atomically: a temporary
        directory, fsynced, renamed). Returns (path, bytes). Between frames only
        (``SnapshotError`` otherwise: ``collect()`` first)."""
        return write_snapshot(self.take(extra, front_end_state), path)

    def restore(self, path) -> dict:
        """Continue the stream saved at ``path``; returns its manifest. ``SnapshotError``
        (and the current stream untouched) when the snapshot is unreadable, corrupted
        (digest, size, missing file), of an unknown version, or made with other weights,
        another model or stream configuration, input size or precision."""
        s = self._s
        return restore_snapshot(path, s.model, s.config, s.weights.origin(),
                                self.load_state_dict)


def restore_snapshot(path, model, config: SessionConfig, origin: str,
                     load_state_dict: Callable[[dict], None]) -> dict:
    """Read the snapshot at ``path``, check it against ``model`` (weights ``origin``) and
    ``config``, and hand its state to ``load_state_dict`` (``SessionSnapshots.restore``);
    returns its manifest. Any failure is a ``SnapshotError`` naming ``path`` and what is
    wrong."""
    try:
        manifest, state = read_snapshot(path)
        check_compatible(manifest, model, config, origin)
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
