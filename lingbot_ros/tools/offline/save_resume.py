"""Stream snapshots for ``lingbot-ros-offline``: save the session while a recording runs,
resume a recording from a snapshot.

    lingbot-ros-offline SEQ --max-frames 500 --save-session run.snap   # the first part
    lingbot-ros-offline SEQ --resume run.snap --out out2/              # the rest

``--save-session DIR`` writes the session's snapshot (``StreamingSession.snapshot``) when the
run ends, and every ``--snapshot-every N`` input frames with it (the same directory, replaced
atomically). ``--resume DIR`` restores one before the first frame: the input frames it had
read are skipped (read, not processed; the digests of the first of them -- pixels and stamps,
``session/fingerprint.py`` -- must be the snapshot's fingerprint of its input, and the last
one's stamp the snapshot's, else the run stops: another recording), so the trajectory
continues bit-identically (on the CPU) and ``trajectory.tum`` equals that of one
uninterrupted run. The run's own accumulators are in the snapshot too
(``front_end_state``): ``--scale``'s estimate (``OfflineScale.state_dict``) and, with ``--ply``, the point map (``VoxelMap.state_dict``), so ``points.ply`` and the scale
(and every file it converts) equal those of one run as well. ``--resume`` refuses a snapshot
made under another ``--scale`` (or other ``--scale-param`` estimate settings), ``--ply``
from a snapshot saved without it, and other ``--ply-voxel``, ``--ply-max-points``,
``--ply-stride`` or ``--min-conf`` values.

Both are checked before the first frame (``check_snapshot_args``): ``--resume`` must name a
readable snapshot (its marker, checksum and files: ``session/snapshot_folder.py``), and
``--save-session`` a target a save may replace (nothing, an empty folder or a snapshot of
ours; never a folder we did not write) in an existing folder.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Optional

from ...session import (FINGERPRINT_FRAMES, SCALE, VOXEL_MAP, SnapshotError,
                       StreamingSession, check_replaceable, front_end_state, frame_digest,
                       read_manifest, saved_part)
from .run_spec import BadRunOptions, CannotResume

__all__ = ["add_snapshot_args", "OfflineSnapshots", "snapshot_frames_read",
           "check_snapshot_args", "recording_fingerprint"]

log = logging.getLogger("lingbot_ros.offline")


def add_snapshot_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--save-session", metavar="DIR",
                   help="write the session's snapshot to DIR when the run ends (and every "
                   "--snapshot-every frames); --resume continues from it")
    p.add_argument("--snapshot-every", type=int, default=0, metavar="N",
                   help="with --save-session: also save after every N input frames (0: only "
                   "at the end)")
    p.add_argument("--resume", metavar="DIR",
                   help="continue from a snapshot (--save-session): the input frames it had "
                   "read are skipped")


def snapshot_frames_read(path) -> int:
    """Input frames the offline run that saved ``path`` had read (0 if not an offline one)."""
    return int(read_manifest(path).get("extra", {}).get("offline", {}).get("frames_read", 0))


def check_snapshot_args(args) -> None:
    """``--save-session`` and ``--resume`` checked before the run: ``BadRunOptions``,
    ``CannotResume`` (or ``FileNotFoundError``) saying why the run would fail at its end (or
    its start)."""
    save_to, resume = getattr(args, "save_session", None), getattr(args, "resume", None)
    if save_to:
        target = Path(save_to)
        if not target.parent.is_dir():
            raise FileNotFoundError(f"--save-session {save_to}: its folder {target.parent} "
                                    "does not exist")
        try:
            check_replaceable(target)
        except OSError as exc:  # NotReplaced: not ours, a symlink, a file
            raise BadRunOptions(f"--save-session {save_to}: {exc}") from None
    if resume:
        try:
            read_manifest(resume)
        except SnapshotError as exc:
            raise CannotResume(f"--resume {resume}: {exc}") from None


def recording_fingerprint(source) -> list[str]:
    """The fingerprint of a recording's first frames, as a session given them computes it
    (``frame_digest`` of each of the first ``FINGERPRINT_FRAMES`` frames ``source`` yields)."""
    digests = []
    for frame in source:
        digests.append(frame_digest(frame.image, frame.stamp_ns, frame.encoding))
        if len(digests) >= FINGERPRINT_FRAMES:
            break
    return digests


class OfflineSnapshots:
    """The snapshot side of one offline run: restore at the start, save as asked."""

    def __init__(self, args, session: StreamingSession, points=None, scale=None) -> None:
        save_to, resume = getattr(args, "save_session", None), getattr(args, "resume", None)
        self.save_to: Optional[Path] = Path(save_to) if save_to else None
        self.every = int(getattr(args, "snapshot_every", 0) or 0)
        if self.every < 0:
            raise BadRunOptions(f"--snapshot-every must be >= 0, got {self.every}")
        if self.every and self.save_to is None:
            raise BadRunOptions("--snapshot-every needs --save-session DIR")
        self.session = session
        self.start = 0  # input frames the resumed snapshot had read
        self.last_stamp: Optional[int] = None
        self.keyframe_flags: list[bool] = []
        self.saves = 0
        self.resumed_from = None
        self.points, self.scale = points, scale
        self.fingerprint: list[str] = []  # the resumed snapshot's input fingerprint
        check_snapshot_args(args)
        self.ply = ({"stride": int(args.ply_stride), "min_conf": float(args.min_conf)}
                    if points is not None else None)
        if resume:
            try:
                manifest = session.snapshots.restore(resume)
            except SnapshotError as exc:
                raise CannotResume(f"--resume {resume}: {exc}") from None
            offline = manifest.get("extra", {}).get("offline")
            if not offline:
                raise CannotResume(f"--resume {resume}: not a snapshot of an offline run "
                                 "(it does not say which input frames it had read)")
            self._resume_front_end(resume, offline, manifest.get("front_end_state") or {})
            self.start = int(offline["frames_read"])
            self.fingerprint = list((manifest.get("input") or {}).get("fingerprint") or [])
            if len(self.fingerprint) < min(self.start, FINGERPRINT_FRAMES):
                raise CannotResume(f"--resume {resume}: the snapshot records no fingerprint of "
                                 "its input's first frames: it cannot be checked against "
                                 "this recording")
            self.last_stamp = offline.get("last_stamp_ns")
            self.keyframe_flags = [bool(k) for k in offline.get("keyframe_flags", [])]
            self.resumed_from = str(resume)
            log.info("resumed from %s: %d input frames already read, %d processed",
                     resume, self.start, manifest.get("frames_processed", 0))

    def _resume_front_end(self, resume, offline: dict, front_end: dict) -> None:
        """Continue the snapshot's scale estimate and point map (refused, with the reason,
        when they do not fit this run's settings)."""
        scale, points = self.scale, self.points
        if scale is not None:
            state = saved_part(front_end, SCALE)
            if state is None:
                if scale.config.metric:
                    raise CannotResume(f"--resume {resume}: the snapshot holds no scale estimate "
                                     f"(made by an older build): --scale "
                                     f"{scale.config.source} cannot continue it")
            else:
                try:
                    scale.load_state_dict(state)
                except ValueError as exc:
                    raise CannotResume(f"--resume {resume}: {exc} (--scale, --scale-param)") \
                        from None
        if points is not None:
            state = saved_part(front_end, VOXEL_MAP)
            if state is None:
                raise CannotResume(f"--resume {resume}: the snapshot holds no point map (saved "
                                 "without --ply): resume without --ply, or run the whole "
                                 "recording with it")
            saved = dict(offline.get("ply") or {}, voxel=state.get("initial_voxel_size"),
                         max_points=state.get("max_points"))
            here = dict(self.ply, voxel=points.initial_voxel_size,
                        max_points=points.max_points)
            diff = [f"{k}: saved {saved.get(k)!r}, here {v!r}" for k, v in here.items()
                    if saved.get(k) != v]
            if diff:
                raise CannotResume(f"--resume {resume}: the point map was made with other "
                                 f"--ply settings ({'; '.join(diff)})")
            try:
                points.load_state_dict(state)
            except (KeyError, TypeError, ValueError) as exc:
                raise CannotResume(f"--resume {resume}: the snapshot's point map is malformed "
                                 f"({exc})") from None

    def skip(self, frames_read: int, frame) -> bool:
        """Whether input frame number ``frames_read`` (1-based) was read before the
        snapshot; checks the last of those against the snapshot's stamp."""
        if frames_read > self.start:
            return False
        if frames_read <= len(self.fingerprint) and frame_digest(
                frame.image, frame.stamp_ns, frame.encoding) != self.fingerprint[frames_read - 1]:
            raise CannotResume(f"--resume: input frame {frames_read} (stamp {frame.stamp_ns} ns) "
                             "is not the snapshot's (its pixels or stamp differ): the snapshot "
                             "was made from another recording")
        if frames_read == self.start and self.last_stamp is not None and (
                int(frame.stamp_ns) != int(self.last_stamp)):
            raise CannotResume(f"--resume: input frame {frames_read} has stamp "
                             f"{frame.stamp_ns} ns, the snapshot's has {self.last_stamp} ns: "
                             "the snapshot was made from another recording")
        return True

    def after_frame(self, frames_read: int, frame, keyframe_flags: list[bool]) -> None:
        self.last_stamp = int(frame.stamp_ns)
        if self.every and frames_read % self.every == 0:
            self.save(frames_read, keyframe_flags)

    def finish(self, frames_read: int, keyframe_flags: list[bool]) -> None:
        if frames_read < self.start:
            raise CannotResume(f"--resume: the input has {frames_read} frames, the snapshot had "
                             f"read {self.start}")
        if self.save_to is not None:
            self.save(frames_read, keyframe_flags)

    def save(self, frames_read: int, keyframe_flags: list[bool]) -> None:
        extra = {"offline": {"frames_read": frames_read, "last_stamp_ns": self.last_stamp,
                             "keyframe_flags": [bool(k) for k in keyframe_flags],
                             "ply": self.ply}}
        # the run's own snapshot parts (session/snapshot_parts.py): those it has
        front_end = front_end_state({k: v for k, v in ((SCALE, self.scale),
                                                       (VOXEL_MAP, self.points))
                                     if v is not None})
        path, nbytes = self.session.snapshots.save(self.save_to, extra=extra,
                                                   front_end_state=front_end)
        self.saves += 1
        log.info("session snapshot after %d input frames: %s (%.1f MB)", frames_read, path,
                 nbytes / 1e6)

    def summary(self) -> dict:
        return {"resumed_from": self.resumed_from, "frames_skipped": self.start,
                "saved_to": None if self.save_to is None else str(self.save_to),
                "saves": self.saves}
