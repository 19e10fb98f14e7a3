"""What ``lingbot-ros-offline`` writes, checked before the run, and what it says when a run
stops early.

:func:`planned_outputs` lists the files a run will write into ``--out`` with the header each
begins with, for :func:`lingbot_ros.tools.out_folder.check_out_folder` (an existing one is
replaced only if we wrote it). :class:`RunState` follows a run (frames read, files written)
so that an interrupted one ends on one line saying where it stopped and what was written.
:func:`checkpoint_identity` and :func:`stamp_range` are parts of ``summary.json``;
:func:`progress_bar` and :func:`source_total` the run's progress bar.

Exit statuses of ``lingbot-ros-offline`` (docs/evaluation.md):

- 0: the whole input was run and every output written;
- 2: nothing was run: a bad option, input or ``--out`` (one ``ERROR`` line says which), or
  an output could not be written (a full disk: the line says which were);
- 3: the input ended early (a truncated bag: a killed recorder): the frames that could be
  read were run and the outputs written for them; ``summary.json``'s ``input_ended_early``
  and one ``ERROR`` line say where it ended;
- 130: interrupted (Ctrl-C, SIGINT): one ``ERROR`` line says at which frame and which files
  were written (none before the end of the input: the folder's files are as they were).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import numpy as np

from ...geometry import PLY_HEADER, TUM_HEADER
from ..metrics.plot import PNG_SOFTWARE
from ..out_folder import OurFile

if TYPE_CHECKING:  # pragma: no cover -- annotations only
    from ...config import SessionConfig
    from ...session import SessionInfo

__all__ = ["SUMMARY_FORMAT", "SUMMARY_BEGINS", "OFFLINE_FILES", "planned_outputs",
           "checkpoint_identity", "stamp_range", "settings_of", "RunState", "EXIT_FAILED",
           "EXIT_ENDED_EARLY", "EXIT_INTERRUPTED", "progress_bar", "source_total"]

EXIT_FAILED = 2
EXIT_ENDED_EARLY = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it

# summary.json's first key: how a summary is recognised as ours (json.dumps, indent 2).
SUMMARY_FORMAT = "lingbot_ros.offline.summary/1"
SUMMARY_BEGINS = b'{\n  "summary_format": "lingbot_ros.offline.summary/'

_TUM = (TUM_HEADER + "\n").encode("utf-8")
# Every file a run may write, by name (lingbot-ros-eval's unit folders hold these only).
OFFLINE_FILES = {
    "trajectory.tum": OurFile("trajectory.tum", _TUM),
    "groundtruth.tum": OurFile("groundtruth.tum", _TUM),
    "points.ply": OurFile("points.ply", PLY_HEADER),
    "trajectory.png": OurFile("trajectory.png", b"\x89PNG\r\n\x1a\n",
                              b"Software\x00" + PNG_SOFTWARE.encode("ascii")),
    "summary.json": OurFile("summary.json", SUMMARY_BEGINS),
    # --loop-closure (tools/offline/loop_run.py)
    "trajectory_optimized.tum": OurFile("trajectory_optimized.tum", _TUM),
    "loops.json": OurFile("loops.json", b'{\n  "format": "lingbot_ros_loops"'),
    "loop_graph.json": OurFile("loop_graph.json", b'{\n  "format": "lingbot_ros_loop_graph"'),
    "trajectory_in_map.tum": OurFile("trajectory_in_map.tum", _TUM),
    "localization.json": OurFile("localization.json",
                                 b'{\n  "format": "lingbot_ros_localization"'),
}


def planned_outputs(args) -> list[OurFile]:
    """The files the run of ``args`` may write. ``groundtruth.tum`` is always listed: whether
    the input has ground truth is known only once it is opened."""
    names = ["trajectory.tum", "groundtruth.tum", "summary.json"]
    if getattr(args, "ply", False):
        names.append("points.ply")
    if getattr(args, "plot", False):
        names.append("trajectory.png")
    if getattr(args, "loop_closure", False):
        names += ["trajectory_optimized.tum", "loops.json", "loop_graph.json"]
    if getattr(args, "localize_in", None):
        names += ["trajectory_in_map.tum", "localization.json"]
    return [OFFLINE_FILES[n] for n in names]


@dataclass
class RunState:
    """How far a run got, for the line an interruption ends on."""
    out: str
    total: Optional[int] = None  # input frames, when known
    frames_read: int = 0
    last_stamp_ns: Optional[int] = None
    writing: bool = False  # the input is done; the outputs are being written
    written: list[str] = field(default_factory=list)  # file names, in order
    snapshot_dir: Optional[str] = None  # --save-session
    snapshot_frame: Optional[int] = None  # input frames read at its last save
    snapshots: object = None  # the run's OfflineSnapshots (its ``saves`` count)
    bar: object = None  # the progress bar: closed before the line, which then starts a line
    _pending: Optional[tuple[int, int]] = None  # (saves before, frames read) of a save

    def saving(self, frames_read: int) -> None:
        """Called before the snapshots may save after input frame ``frames_read``: an
        interruption during or after that save then names the right frame."""
        self._settle()
        self._pending = (self.snapshots.saves, frames_read)

    def _close_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def _settle(self) -> None:
        if self._pending is not None and self.snapshots.saves > self._pending[0]:
            self.snapshot_frame = self._pending[1]

    def failed(self, reason: str) -> str:
        """One line for an error: ``reason``, and once the outputs were being written,
        which were."""
        self._close_bar()
        if not self.writing:
            return reason
        wrote = ", ".join(self.written) or "none"
        return (f"{reason} (writing the outputs after input frame {self.frames_read}; "
                f"written in {self.out}: {wrote})")

    def interrupted(self) -> str:
        """One line: where the run stopped and what it left on disk."""
        self._close_bar()
        if self.snapshots is not None:
            self._settle()
        where = (f"after input frame {self.frames_read}" if self.writing
                 else f"at input frame {self.frames_read}" if self.frames_read
                 else "before the first input frame")
        if self.total:
            where += f" of {self.total}"
        if self.last_stamp_ns is not None:
            where += f" (stamp {self.last_stamp_ns / 1e9:.9f} s)"
        out = Path(self.out)
        if self.written:
            wrote = (f"written in {out}: {', '.join(self.written)}; the other outputs were "
                     "not written")
        else:
            wrote = f"nothing written in {out} (its files are as they were)"
        line = f"interrupted (SIGINT) {where}" + (", while writing the outputs"
                                                  if self.writing else "") + f": {wrote}"
        if self.snapshot_dir is not None and self.snapshot_frame is not None:
            line += (f"; --save-session {self.snapshot_dir} holds the snapshot after input "
                     f"frame {self.snapshot_frame} (--resume continues from it)")
        return line


def checkpoint_identity(path: Optional[str]) -> Optional[dict]:
    """Name, size and SHA-256 of the weights: which checkpoint made these numbers."""
    if not path:
        return None
    p = Path(path)
    digest = hashlib.sha256()
    with open(p, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            digest.update(block)
    return {"path": str(p.resolve()), "name": p.name, "bytes": p.stat().st_size,
            "sha256": digest.hexdigest()}


def stamp_range(stamps: np.ndarray) -> dict:
    if not len(stamps):
        return {"first_s": None, "last_s": None, "duration_s": 0.0}
    return {"first_s": int(stamps[0]) / 1e9, "last_s": int(stamps[-1]) / 1e9,
            "duration_s": (int(stamps[-1]) - int(stamps[0])) / 1e9}


def settings_of(args, config: SessionConfig, info: SessionInfo) -> dict:
    """Everything that decides the numbers of a run."""
    kf = config.keyframes
    stream = info.stream
    return {"input_size_hw": info.model_hw, "width": args.width, "height": args.height,
            "window": config.window, "scale_frames": config.num_scale_frames,
            "keyframes": {"policy": kf.policy, "n": kf.n, "flow_threshold": kf.flow_threshold,
                          "max_gap": kf.max_gap},
            "rollover_keyframes": config.rollover_keyframes,
            "rollover_mode": config.rollover_mode,
            "rollover_slices_per_frame": config.rollover_slices_per_frame,
            "device": config.device,
            "attention": stream.attention, "fast_path": stream.fast_path,
            "fused_kernels": stream.fused_kernels,
            "fused_kernel_names": list(stream.fused_kernel_names or []),
            "camera_head_precision": args.camera_head_precision, "max_diff_s": args.max_diff,
            "offset_s": args.offset, "scale": args.scale,
            "scale_params": list(args.scale_param), "depth_topic": args.depth_topic,
            "stride": getattr(args, "stride", 1),
            "loop_closure": getattr(args, "loop_closure", False),
            "loop_params": list(getattr(args, "loop_param", ()))}


def progress_bar(total, disabled, what):
    try:
        from tqdm import tqdm
    except ImportError:  # optional: plain runs still work
        return None
    # tqdm shows the rate (the live FPS) and, with a total, the ETA.
    return tqdm(total=total, unit="frame", disable=disabled, dynamic_ncols=True, desc=what)


def source_total(source) -> Optional[int]:
    """Frames the source will give, for the progress bar's total and ETA: its length (image
    lists, bags from their index), a video's announced frame count; None if unknown."""
    try:
        return len(source)
    except TypeError:
        return getattr(source, "frame_count", None) or None
