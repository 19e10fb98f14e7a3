"""RobotFrames: which FrameChain a stream is published in, and the TF tree this node adds.

On a robot the base -> camera extrinsic comes from the robot's TF (robot_state_publisher's
``/tf_static``), looked up when the first image arrives and kept: it is rigid. Until it is
there, frames are dropped (counted) and the node says what it waits for; after
``tf.wait_for_extrinsic_s`` that becomes an ERROR on /diagnostics. A bare camera
(``frames.base: ""``) needs no TF. A different base -> camera later on TF (a corrected
calibration) is reported (``check_extrinsic``: the worker logs it, WARN, old and new) and
applied by ``restart()`` on the next ~/reset, not mid-stream (docs/node.md says why).

For the metric scale (docs/node.md, "Scale") the same TF tree answers two more lookups, on
the worker's thread, at a frame's stamp: the ground frame (``frames.ground``) -> the
camera's optical frame (``ground_to_optical``: the camera's height over the floor, source
``camera_height``) and another node's ``frames.odom`` -> ``frames.base`` (``odom_to_base``,
source ``odometry`` with ``scale.odometry_input: tf``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ...geometry import T_BODY_OPTICAL, matrix_to_tq
from ..params.node_config import NodeConfig
from .frame_chain import FrameChain
from .tree import ExtrapolationError, TransformError

DEFAULT_CAMERA_FRAME = "camera_optical_frame"  # images without a frame_id
EXTRINSIC_CHECK_S = 1.0  # how often the extrinsic in use is compared with TF's
EXTRINSIC_TOLERANCE = 1e-6  # metres / rotation-matrix entries: a smaller change is none


@dataclass(frozen=True)
class FramesFacts:
    """``RobotFrames``' part: the chain in use and the wait for the robot's TF."""

    tf_tree: str = ""  # which transforms this node publishes (tf_tree_mode)
    wait_for_extrinsic_s: float = 0.0  # tf.wait_for_extrinsic_s: waiting becomes an ERROR
    chain: Optional[FrameChain] = None  # the stream's chain, once known
    extrinsic: str = ""  # base -> optical in use, as text ("" camera-only or no chain yet)
    pending_extrinsic: str = ""  # a different base -> camera seen on TF: on ~/reset ("": none)
    waiting_since: Optional[float] = None  # time.monotonic() of the first miss, while waiting
    waiting_for: str = ""  # "base_link -> camera_optical_frame", while waiting
    waiting_message: str = ""  # what is missing and how to provide it, while waiting

    def describe(self) -> dict:
        """Diagnostics key/values: the tree, the tracked frame, the extrinsic in use."""
        out = {"tf_tree": self.tf_tree}
        if self.chain is not None:
            out["tracked_frame"] = self.chain.tracked_frame
            out["camera_frame"] = self.chain.camera_frame
            if self.extrinsic:
                out["extrinsic_base_optical"] = self.extrinsic
                if self.pending_extrinsic:
                    out["extrinsic_pending"] = (f"{self.pending_extrinsic} (base -> "
                                                f"{self.chain.camera_frame}; on ~/reset)")
        return out


def tf_tree_mode(cfg: NodeConfig) -> str:
    """One line saying which transforms this node publishes (diagnostics, logs)."""
    tracked = "<camera frame> (camera-only)" if cfg.camera_only else cfg.base_frame
    if cfg.publish_odom_to_base:
        odom = f"{cfg.odom_frame} -> {tracked} (this node's estimate)"
        head = (f"{cfg.map_frame} -> {cfg.odom_frame} (identity), " if cfg.publish_map_to_odom
                else f"({cfg.map_frame} -> {cfg.odom_frame} left to another node), ")
        return head + odom
    if cfg.publish_map_to_odom:
        return (f"{cfg.map_frame} -> {cfg.odom_frame} (corrects another node's "
                f"{cfg.odom_frame} -> {tracked})")
    return "none (tf.publish_map_to_odom and tf.publish_odom_to_base are false)"


class RobotFrames:
    def __init__(self, config: NodeConfig, tf_tree=None) -> None:
        """``tf_tree``: a ``TransformTree`` fed from /tf and /tf_static (needed unless
        camera-only)."""
        if not config.camera_only and tf_tree is None:
            raise ValueError("a robot base frame needs a TF tree for base -> camera")
        self.config = config
        self._tree = tf_tree
        self.chain: Optional[FrameChain] = None  # the stream's chain, once known
        self.waiting_since: Optional[float] = None  # time.monotonic() of the first miss
        self.last_error = ""
        self.waiting_for = ""  # "base_link -> camera_optical_frame"
        self._T_base_camera = None  # the extrinsic in use (looked up for ``chain``)
        self._pending = None  # a different base -> camera seen since: applied on restart()
        self._last_check = -math.inf
        self._tq_texts: dict[bytes, str] = {}  # the extrinsics' text (diagnostics), by value
        self._tf_tree = tf_tree_mode(config)

    def camera_frame(self, header_frame_id: str) -> str:
        return self.config.camera_frame or header_frame_id or DEFAULT_CAMERA_FRAME

    def resolve(self, header_frame_id: str, now: float) -> Optional[FrameChain]:
        """The chain for an image of this frame id, or None while the extrinsic is missing."""
        cfg = self.config
        camera = self.camera_frame(header_frame_id)
        if self.chain is not None and self.chain.camera_frame == camera:
            return self.chain
        if cfg.camera_only:
            self.chain = FrameChain.camera_only(camera, cfg.camera_is_optical)
            return self.chain
        try:
            T_base_camera = self._tree.lookup(cfg.base_frame, camera, None)
        except TransformError as exc:
            if self.waiting_since is None:
                self.waiting_since = now
            self.waiting_for = f"{cfg.base_frame} -> {camera}"
            self.last_error = str(exc)
            return None
        self.chain = FrameChain.robot(cfg.base_frame, camera, T_base_camera,
                                      cfg.camera_is_optical)
        self._T_base_camera, self._pending = T_base_camera, None
        self.waiting_since, self.waiting_for, self.last_error = None, "", ""
        return self.chain

    def check_extrinsic(self, now: float) -> str:
        """At most every ``EXTRINSIC_CHECK_S``: the base -> camera transform on TF against
        the one in use. A new value (a corrected calibration on /tf_static) is not applied
        mid-stream -- the poses already published, the path and the map are in the old
        camera's frame, and the stream's map frame is the first camera's -- but kept for the
        next ``restart()`` (~/reset); returns the WARN line (old and new) once per new
        value, else ""."""
        if (self._T_base_camera is None or self.config.camera_only
                or now - self._last_check < EXTRINSIC_CHECK_S):
            return ""
        self._last_check = now
        try:
            T = self._tree.lookup(self.config.base_frame, self.chain.camera_frame, None)
        except TransformError:
            return ""
        if np.allclose(T, self._T_base_camera, rtol=0.0, atol=EXTRINSIC_TOLERANCE):
            self._pending = None
            return ""
        if self._pending is not None and np.allclose(T, self._pending, rtol=0.0,
                                                     atol=EXTRINSIC_TOLERANCE):
            return ""  # already said
        self._pending = T
        return (f"the extrinsic {self.config.base_frame} -> {self.chain.camera_frame} changed "
                f"on TF: in use {_tq(self._T_base_camera)}, new {_tq(T)}; kept until the "
                "next ~/reset (the published poses, path and map are in the current one)")

    def restart(self) -> str:
        """A new stream (~/reset): a changed extrinsic is applied now (looked up again on
        the next image); returns the log line, "" when nothing changed."""
        if self._pending is None:
            return ""
        old, self._pending = self._T_base_camera, None
        self.chain = self._T_base_camera = None
        return (f"~/reset: applying the new extrinsic {self.config.base_frame} -> camera "
                f"(was {_tq(old)})")

    def ground_to_optical(self, stamp_ns: int) -> np.ndarray:
        """``T_ground_optical`` (4x4, metres): the stream camera's optical frame in the ground
        frame (``frames.ground``, on the floor, z up) at ``stamp_ns``; the latest transform
        when TF has none at that stamp (a camera's height hardly changes; a static chain
        has no time anyway). Raises TransformError saying which frame is missing."""
        cfg = self.config
        if self.chain is None or self._tree is None:
            raise TransformError(f"no ground frame {cfg.ground_frame!r} in TF: no TF tree "
                                 "or no camera frame yet")
        camera = self.chain.camera_frame
        try:
            try:
                T = self._tree.lookup(cfg.ground_frame, camera, stamp_ns)
            except ExtrapolationError:
                T = self._tree.lookup(cfg.ground_frame, camera, None)
        except TransformError as exc:
            raise TransformError(f"no ground frame {cfg.ground_frame!r} in TF "
                                 f"({cfg.ground_frame} -> {camera}: {exc})") from exc
        return T if cfg.camera_is_optical else T @ T_BODY_OPTICAL

    def odom_to_base(self, stamp_ns: int) -> np.ndarray:
        """``T_odom_base`` (4x4, metres) at ``stamp_ns``, from another node's odometry on TF
        (interpolated by the tree). Raises TransformError (ExtrapolationError: not there
        yet, or too old)."""
        cfg = self.config
        if self._tree is None or cfg.camera_only:
            raise TransformError("odometry from TF needs a robot base frame (frames.base)")
        return self._tree.lookup(cfg.odom_frame, cfg.base_frame, stamp_ns)

    def waiting_message(self) -> str:
        return (f"waiting for the transform {self.waiting_for} (the robot's static TF, e.g. "
                f"robot_state_publisher on /tf_static); frames are dropped until it arrives. "
                f"A bare camera without TF: set frames.base to ''. ({self.last_error})")

    def facts(self) -> FramesFacts:
        """What the executor may know of the frames (``NodeFacts``; the worker publishes it):
        the tree, the chain in use, a pending extrinsic, the wait for TF."""
        cfg = self.config
        chain, pending, robot = self.chain, self._pending, not cfg.camera_only
        waiting = self.waiting_since is not None
        return FramesFacts(
            tf_tree=self._tf_tree, wait_for_extrinsic_s=cfg.wait_for_extrinsic_s,
            chain=chain,
            extrinsic=self._tq_text(chain.T_base_optical) if robot and chain else "",
            pending_extrinsic=(self._tq_text(pending) if robot and chain and pending is not None
                               else ""),
            waiting_since=self.waiting_since, waiting_for=self.waiting_for if waiting else "",
            waiting_message=self.waiting_message() if waiting else "")

    def _tq_text(self, T) -> str:
        """``_tq(T)``, made once per value: each frame's facts carry the extrinsic, which
        changes only with a new camera mount (~50 us of numpy per frame saved)."""
        key = np.asarray(T, dtype=np.float64).tobytes()
        text = self._tq_texts.get(key)
        if text is None:
            if len(self._tq_texts) >= 8:  # mounts seen: a handful at most
                self._tq_texts.clear()
            text = self._tq_texts[key] = _tq(T)
        return text


def _tq(T) -> str:
    t, q = matrix_to_tq(np.asarray(T)[None])
    return ("t " + " ".join(f"{v:.4f}" for v in t[0]) + ", q xyzw "
            + " ".join(f"{v:.4f}" for v in q[0]))


def extrinsic_summary(chain: FrameChain) -> str:
    """For the log line when the extrinsic is found: where the camera is and its tilt."""
    T = chain.T_base_optical
    view = T[:3, 2]  # the optical z axis (viewing direction) in the base frame
    down = math.degrees(math.atan2(-view[2], math.hypot(view[0], view[1])))
    return (f"camera {chain.camera_frame} at ({T[0, 3]:.3f}, {T[1, 3]:.3f}, {T[2, 3]:.3f}) m in "
            f"{chain.tracked_frame}, looking {abs(down):.1f} deg "
            f"{'below' if down >= 0 else 'above'} the horizontal")
