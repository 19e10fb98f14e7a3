"""What one offline run is: :class:`OfflineRun`, the typed description that
:func:`~lingbot_ros.tools.offline.cli.run` takes, and the typed errors it raises.

Both its builders make one: the command line (:meth:`OfflineRun.from_namespace`, from
``lingbot-ros-offline``'s arguments, whose defaults are the run's) and the fleet
(:meth:`OfflineRun.from_settings`, from a unit's settings: ``lingbot-ros-eval``'s options that
decide the numbers, with the unit's input, output folder, policy and snapshots). Callers tell
a failure's kind by its type (:class:`CannotResume`, :class:`BadRunOptions`), never by its
message.
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Optional

# lingbot-ros-eval --save-maps: the folder of a unit's out that its run's place map is
UNIT_PLACE_MAP = "place_map"

__all__ = ["OfflineRun", "OfflineRunError", "BadRunOptions", "CannotResume"]


class OfflineRunError(Exception):
    """A run that cannot start or go on; the message says why, in one line."""


class BadRunOptions(OfflineRunError, ValueError):
    """Options that cannot make a run (values, or combinations of them)."""


class CannotResume(OfflineRunError, ValueError):
    """``--resume``'s snapshot cannot continue this run: unreadable, not an offline run's,
    made with other settings or from another recording. Its saver may drop it and start
    over."""


@dataclass(frozen=True)
class OfflineRun:
    """Everything one run of a recording depends on (the options of ``lingbot-ros-offline``,
    named as its flags; their meaning and defaults: ``lingbot-ros-offline --help``)."""
    input: str
    out: str
    # how the sequence is read, and its ground truth
    format: str
    stamps: str
    fps: float
    topic: Optional[str]
    gt: Optional[str]
    max_diff: float
    offset: float
    # the network and the streaming session
    checkpoint: Optional[str]
    trust_checkpoint: bool
    preset: str
    device: str
    camera_head_precision: str
    backend: str
    variant: str
    width: int
    height: Optional[int]
    scale_frames: int
    window: int
    keyframes: str
    keyframe_n: int
    flow_threshold: float
    max_gap: int
    rollover: int
    rollover_mode: str
    rollover_slices: int
    max_frames: Optional[int]
    no_progress: bool
    # outputs
    ply: bool
    ply_stride: int
    ply_voxel: float
    ply_max_points: int
    min_conf: float
    plot: bool
    # metric scale
    scale: str
    scale_param: tuple
    depth_topic: Optional[str]
    # stream snapshots
    save_session: Optional[str]
    snapshot_every: int
    resume: Optional[str]
    # every N-th input frame (--stride); a default, so runs built without it read every one
    stride: int = 1
    # the back end (tools/offline/loop_run.py): --loop-closure (trajectory_optimized.tum,
    # loops.json, loop_graph.json; lingbot-ros-eval passes it to every unit), --loop-param,
    # --save-map, --localize-in
    loop_closure: bool = False
    loop_param: tuple = ()
    save_map: Optional[str] = None
    localize_in: Optional[str] = None
    # --view: the run in the browser as it streams (tools/view/live.py; needs the view extra)
    view: bool = False
    view_host: str = "127.0.0.1"
    view_port: int = 8080
    view_max_points: int = 200_000
    view_keep: bool = False

    @classmethod
    def from_namespace(cls, args) -> "OfflineRun":
        """The run ``lingbot-ros-offline``'s parsed arguments describe."""
        values = {f.name: getattr(args, f.name) if f.default is MISSING
                  else getattr(args, f.name, f.default) for f in fields(cls)}
        values["scale_param"] = tuple(values["scale_param"] or ())
        values["loop_param"] = tuple(values["loop_param"] or ())
        return cls(**values)

    @classmethod
    def from_settings(cls, settings: dict, *, input: str = "", out: str = "",
                      keyframes: str = "all", no_progress: bool = True,
                      save_session: Optional[str] = None, snapshot_every: int = 0,
                      resume: Optional[str] = None,
                      save_map: Optional[str] = None) -> "OfflineRun":
        """A fleet unit's run: ``settings`` (the options that decide the numbers, every
        other field; TypeError for one missing or unknown) with the unit's own. With the
        setting ``save_maps`` (``lingbot-ros-eval --save-maps``) the run's ``save_map`` is
        the unit's own folder ``out/place_map`` (:data:`UNIT_PLACE_MAP`), never shared."""
        settings = dict(settings)
        if settings.pop("save_maps", False) and save_map is None and out:
            save_map = str(Path(out) / UNIT_PLACE_MAP)
        values = dict(settings, input=input, out=out, keyframes=keyframes,
                      no_progress=no_progress, save_session=save_session,
                      snapshot_every=snapshot_every, resume=resume, save_map=save_map)
        values["scale_param"] = tuple(values.get("scale_param") or ())
        values["loop_param"] = tuple(values.get("loop_param") or ())
        return cls(**values)
