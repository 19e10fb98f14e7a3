"""A session's state as plain data, and back: the assembly between ``StreamingSession`` and
the snapshot format (``snapshot_codec.py``).

    state = session_state(owners, ...)             # SessionSnapshots.state_dict: each
                                                   # part's state_dict + the pipeline's own
    loaded = load_session_state(state, model, config, laps)   # fresh owners, all checked;
                                                   # SessionSnapshots swaps them in
    manifest = session.snapshots.restore(path)     # read, check, load (``SessionSnapshots``)

The stream's owners are the registered stream parts (``snapshot_parts.py``: key, the
session's attribute, how a restore builds a fresh one); each saves and loads its own part
through one protocol (``state_dict()`` / ``load_state_dict(state)``). This module loops over
them, gathers them with the pipeline's counters, trajectory and buffered scale-phase frames
into one tree, and rebuilds a complete set of owners from such a tree before anything of the
running stream is touched.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

import numpy as np
import torch

from ..config import SessionConfig
from ..geometry import Trajectory
from ..preprocess import CropInfo
from .input_policy import SessionEvent
from .results import Frame
from .snapshot_codec import (SnapshotData, SnapshotError, check_compatible, read_snapshot,
                       snapshot_data, write_snapshot)
from .snapshot_parts import (RUNNER, LoadContext, Part, SnapshotPart, check_stream_state,
                             stream_parts)
from .stats import HostLaps
from .stream_runner import StreamRunner

__all__ = ["session_state", "load_part", "LoadedState", "load_session_state", "SessionSnapshots",
           "restore_snapshot"]

_CROP_FIELDS = ("input_hw", "resized_hw", "crop_xy", "output_hw")


def session_state(owners: Mapping[str, Optional[SnapshotPart]], *,
                  model_hw: Optional[tuple[int, int]], next_index: int, next_ticket: int,
                  counts: Counter, restarts: Counter, events, trajectory: Trajectory,
                  anchors: list[Frame]) -> dict:
    """The stream's state tree (``StreamingSession.state_dict``): JSON-able values, numpy
    arrays and host tensors. ``owners``: each registered stream part's owner by its key
    (None: a nullable part the stream has none of, saved as None). The runner's
    device->host copy is the only wait."""
    stamps, poses = trajectory.snapshot()
    tree = {
        "model_hw": None if model_hw is None else list(model_hw),
        "next_index": next_index, "next_ticket": next_ticket,
        "counts": dict(counts), "restarts": dict(restarts),
        "events": [{"kind": e.kind, "message": e.message} for e in events],
    }
    own_tail = {
        "trajectory": {"stamps_ns": stamps, "poses": poses},
        "anchors": [{"image": f.image.detach().cpu().clone(), "stamp_ns": f.stamp_ns,
                     "crop": {k: list(getattr(f.crop, k)) for k in _CROP_FIELDS},
                     "index": f.index, "ticket": f.ticket} for f in anchors],
    }
    for p in stream_parts():  # in the registry's order
        if p.key == RUNNER:  # the format's order (a manifest's bytes keep it): the
            tree.update(own_tail)  # pipeline's trajectory and anchors before the caches
        owner = owners[p.key]
        tree[p.key] = None if owner is None else owner.state_dict()
    return tree


def load_part(p: Part, state: Mapping, ctx: LoadContext) -> Optional[SnapshotPart]:
    """A fresh owner of the stream part ``p`` (``p.build(ctx)``) holding its state in the
    tree ``state``: as built when the tree lacks an optional part (a snapshot of an older
    build), None when a nullable part was saved as None."""
    if p.key not in state:
        if not p.optional:
            raise KeyError(f"the state has no {p.key}")
        return p.build(ctx)
    saved = state[p.key]
    if saved is None and p.nullable:
        return None
    owner = p.build(ctx)
    owner.load_state_dict(saved)
    return owner


@dataclass(frozen=True)
class LoadedState:
    """A stream rebuilt from a state tree into fresh owners, checked, not yet in use: the
    session swaps these in for its own (nothing of that swap can fail)."""

    model_hw: Optional[tuple[int, int]]
    parts: dict[str, Optional[SnapshotPart]]  # each stream part's fresh owner, by its key
    trajectory: Trajectory  # validated stamps and poses
    anchors: list[Frame]  # the scale phase's buffered frames, on the device
    next_index: int
    next_ticket: int  # the saved stream's; the session keeps the larger of it and its own
    counts: Counter
    restarts: Counter
    events: list[SessionEvent]


def load_session_state(state: dict, model, config: SessionConfig, laps: HostLaps,
                       make_runner: Callable[..., StreamRunner] = StreamRunner) -> LoadedState:
    """Fresh owners holding ``state`` (``session_state``'s tree, of a session of the same
    model and configuration; the runner's pages come from a fresh pool and record into
    ``laps``). Raises on a state that does not load (``SnapshotError`` among others)."""
    check_stream_state(state)  # every registered stream part (session/snapshot_parts.py)
    dev = torch.device(config.device)
    hw = None if state["model_hw"] is None else tuple(int(x) for x in state["model_hw"])
    trajectory = Trajectory()  # validates stamps and poses before anything is replaced
    traj = state["trajectory"]
    for stamp, pose in zip(np.asarray(traj["stamps_ns"]), np.asarray(traj["poses"])):
        trajectory.append(int(stamp), pose)
    now = time.perf_counter()
    anchors = [Frame(torch.as_tensor(a["image"]).to(dev), int(a["stamp_ns"]),
                     CropInfo(*(tuple(int(x) for x in a["crop"][k]) for k in _CROP_FIELDS)),
                     int(a["index"]), int(a["ticket"]), now) for a in state["anchors"]]
    events = [SessionEvent(e["kind"], e["message"]) for e in state["events"]]
    ctx = LoadContext(model=model, config=config, model_hw=hw, device=dev, laps=laps,
                      make_runner=make_runner)
    parts = {p.key: load_part(p, state, ctx) for p in stream_parts()}
    return LoadedState(
        model_hw=hw, parts=parts, trajectory=trajectory, anchors=anchors,
        next_index=int(state["next_index"]), next_ticket=int(state["next_ticket"]),
        counts=Counter({k: int(v) for k, v in state["counts"].items()}),
        restarts=Counter({k: int(v) for k, v in state["restarts"].items()}),
        events=events)


class SessionSnapshots:
    """A session's snapshots (``session.snapshots``): its state as plain data and back, in
    host memory and on disk. The session's friend: it reads and swaps the session's owners
    (the attributes the registered stream parts name), which the session itself only drives
    frame by frame.

        data = session.snapshots.take(extra)        # between frames: the device->host copy
        write_snapshot(data, path)                  # needs nothing of the session (a thread)
        session.snapshots.save(path, extra)         # both at once; returns (path, bytes)
        manifest = session.snapshots.restore(path)  # the stream continues from ``path``
    """

    def __init__(self, session) -> None:
        self._s = session

    def state_dict(self) -> dict:
        """Everything the next frame's outcome depends on, as plain data (JSON-able values,
        numpy arrays, host tensors): each registered stream part's ``state_dict`` (latency
        window, input and keyframe policies, segments, the runner's caches, a rollover being
        built, the input's fingerprint) plus the pipeline's own (frame counters, buffered
        scale-phase frames, trajectory). Only at a frame boundary: ``SnapshotError`` while a
        frame is in flight or outcomes wait to be collected (``collect()`` first). The
        device->host copy is the only wait. A rollover being built beside the stream
        (``rollover_mode: sliced``) is saved as its anchors and progress
        (``NextSegment.state_dict``)."""
        s = self._s
        if s._flight is not None:
            raise SnapshotError("a frame is in flight: collect() it first (a snapshot is "
                                "taken between frames)")
        if s._ready:
            raise SnapshotError(f"{len(s._ready)} outcome(s) not yet collected: collect() "
                                "them first (a snapshot is taken between frames)")
        return session_state(
            {p.key: getattr(s, p.attr) for p in stream_parts()}, model_hw=s._model_hw,
            next_index=s._next_index, next_ticket=s._next_ticket, counts=s._counts,
            restarts=s._restarts, events=s._events, trajectory=s.trajectory,
            anchors=s._anchors)

    def load_state_dict(self, state: dict) -> None:
        """Continue the stream of ``state_dict``'s output (of a session of the same model and
        configuration; its pages go to a fresh pool). Everything is built and checked first;
        only then is the current stream replaced (on any error it is untouched). A frame in
        flight and outcomes not collected are dropped."""
        s = self._s
        loaded = load_session_state(state, s.model, s.config, s.timing.laps,
                                    s._runner_factory)
        # -- swap (nothing below can fail) --
        if s._take_flight() is not None:  # the frame in flight, a rollover being built and
            s._readback.discard()         # outcomes not collected are dropped
        s._next.drop()
        s._ready = []
        for p in stream_parts():  # each part's owner (a restored input policy takes the
            setattr(s, p.attr, loaded.parts[p.key])  # next frame after any gap)
        s._model_hw = loaded.model_hw
        s.trajectory.reset()
        for stamp, pose in zip(*loaded.trajectory.snapshot()):
            s.trajectory.append(int(stamp), pose)
        s._anchors = loaded.anchors
        s._next_index = loaded.next_index
        s._next_ticket = max(s._next_ticket, loaded.next_ticket)
        s._counts, s._restarts = loaded.counts, loaded.restarts
        s._events.clear()
        s._events.extend(loaded.events)

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
