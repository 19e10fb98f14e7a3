"""The node's side of stream snapshots: ~/save_session, ~/load_session,
``session.resume_from`` and ``session.save_on_shutdown`` (docs/node.md, Resume after a
restart).

A save is taken by the worker between two frames, like a reset: the frame in flight is
published first, then the stream's state is copied to the host (``snapshot_state``: the only
time the worker is held); the files are written by a background thread (``SnapshotJob``),
and the service answers once they are on disk. The node's own state (the voxel map of
~/map_points, the ~/path history) and the stream's scale estimate (``StreamScale.state_dict``,
key ``scale``) go into the same directory (``front_end_state``).

On restore the scale estimate continues (LOCKED stays LOCKED at the same metres per unit):
``check_scale`` refuses a snapshot whose estimate was made under another ``scale.source``
(or other estimate settings) *before* the stream is touched; ``restore_scale`` then loads it.
A snapshot without an estimate (saved by an older build) restarts the estimate, with a
warning.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Optional

import numpy as np

from ..session import SnapshotError, write_snapshot

__all__ = ["SnapshotJob", "start_save", "node_state", "load_node_state", "SnapshotError",
           "scale_state", "check_scale", "restore_scale"]

SCALE_KEY = "scale"  # front_end_state[SCALE_KEY]: StreamScale.state_dict()


class SnapshotJob:
    """A snapshot being written in the background; ``wait`` gives (success, message, bytes,
    frames)."""

    def __init__(self, data, path: Path, frames: int, blocked_ms: float) -> None:
        self.path, self.frames, self.blocked_ms = Path(path), frames, blocked_ms
        self.nbytes = 0
        self.error: Optional[str] = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._write, args=(data,),
                                        name="lingbot_snapshot", daemon=True)
        self._thread.start()

    def _write(self, data) -> None:
        try:
            _, self.nbytes = write_snapshot(data, self.path)
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            self.error = f"cannot write {self.path}: {reason}"
        except Exception as exc:  # noqa: BLE001 -- answered, never a dead thread
            self.error = f"cannot write {self.path}: {type(exc).__name__}: {exc}"
        finally:
            self._done.set()

    def wait(self, timeout: Optional[float] = None) -> tuple[bool, str, int, int]:
        if not self._done.wait(timeout):
            return False, f"{self.path}: still being written after {timeout} s", 0, 0
        if self.error is not None:
            return False, self.error, 0, self.frames
        return (True, f"wrote the stream ({self.frames} frames, {self.nbytes / 2**20:.1f} MiB;"
                f" the worker waited {self.blocked_ms:.1f} ms) to {self.path}",
                self.nbytes, self.frames)


def start_save(session, path, front_end_state: Optional[dict] = None,
               extra: Optional[dict] = None, scale=None) -> SnapshotJob:
    """Copy the stream to the host now (between frames: the caller holds the worker) and
    write it in the background. ``scale``: the stream's ``StreamScale`` (its estimate is
    saved with the node's state). ``SnapshotError`` if the session is mid-frame."""
    import time
    t0 = time.perf_counter()
    if scale is not None:
        front_end_state = dict(front_end_state or {}, **{SCALE_KEY: scale.state_dict()})
    data = session.snapshot_state(extra=extra, front_end_state=front_end_state)
    blocked_ms = (time.perf_counter() - t0) * 1e3
    return SnapshotJob(data, path, int(data.manifest["frames_processed"]), blocked_ms)


def node_state(voxel_map=None, path_records: Optional[np.ndarray] = None) -> dict:
    """The node's own state for a snapshot: the voxel map (``VoxelMap.state_dict``) and the
    ~/path history (its serialized records, oldest first)."""
    return {"voxel_map": None if voxel_map is None else voxel_map.state_dict(),
            "path_records": None if path_records is None else np.ascontiguousarray(path_records)}


def load_node_state(state: Optional[dict], voxel_map=None):
    """Load the voxel map of ``node_state``'s output into ``voxel_map`` (when both exist);
    returns the path records (or None)."""
    if not state:
        return None
    if voxel_map is not None and state.get("voxel_map") is not None:
        voxel_map.load_state_dict(state["voxel_map"])
    return state.get("path_records")


def scale_state(manifest: Optional[dict]) -> Optional[dict]:
    """The scale estimate a snapshot's manifest holds (None: saved without one)."""
    front_end = (manifest or {}).get("front_end_state") or {}
    return front_end.get(SCALE_KEY) if isinstance(front_end, dict) else None


def check_scale(manifest: Optional[dict], scale) -> None:
    """``SnapshotError`` unless the snapshot's scale estimate can continue in ``scale`` (a
    ``StreamScale``): call it before the stream is restored, so a refusal changes nothing.
    A snapshot without an estimate passes (``restore_scale`` restarts it)."""
    state = scale_state(manifest)
    if scale is None or state is None:
        return
    try:
        scale.check_state_dict(state)
    except ValueError as exc:
        raise SnapshotError(str(exc)) from None


def restore_scale(manifest: Optional[dict], scale):
    """Continue the snapshot's scale estimate in ``scale`` (checked by ``check_scale``);
    returns ``(estimate, warning)``: the warning (else None) says the estimate restarted
    because the snapshot holds none."""
    state = scale_state(manifest)
    if state is None:
        estimate = scale.reset()
        if scale.config.source in ("none", "fixed"):
            return estimate, None
        return estimate, (f"the snapshot holds no scale estimate (an older build saved it): "
                          f"the {scale.config.source} scale is estimated anew")
    try:
        return scale.load_state_dict(state), None
    except ValueError as exc:
        raise SnapshotError(str(exc)) from None
