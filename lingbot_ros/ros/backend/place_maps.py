"""Stored place maps in the node (docs/node.md "Stored maps and relocalization"): what the
back end's thread keeps of a loaded map, and how a localization becomes map -> odom.

Numpy only (no rclpy, no messages): ``BackendThread`` owns one ``MapLocalization`` and calls
it on its own thread (the map, its ``Relocalizer`` and the localization state have that one
owner); every other thread reads the frozen ``LocalizationFacts`` it gives out.

Frames. The back end works in the front end's world (the first camera's optical frame), in
metres once the scale locked (``corrections.metric_result``). A stored map's poses are
``T_map_cam`` in the saving node's optimised world, the same convention. The
``Relocalizer`` gives ``T = T_stored_odom``: the front end's world in the stored map. The
stream's own back end has its own correction ``C = T_own_odom`` (its loop closures), so
the stored map is reached from the stream's own map by the anchor

    A = T @ C^-1        (fixed at each localization; then correction = A @ C)

which is ``T`` itself at the localizing keyframe and keeps the stream's later loop
closures. The node publishes the correction as map -> odom (``odom_correction``: in the
node's frames), so ~/pose, ~/path and the points are then in the stored map's frame: a
robot restarted tomorrow in the same place gets yesterday's coordinates.

States (/diagnostics ``localization``): ``no map``; ``loaded`` (a map, no localization
asked); ``waiting`` (asked, not localized yet: map -> odom is withheld); ``localized``.
Keyframes keep going to the ``Relocalizer`` after it localized: each new confirmed
localization replaces the anchor (map -> odom may then jump, as at a loop closure), so a
first localization on a poor match is refreshed as the robot moves on.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ...geometry import rigid_inverse
from ..tf.frame_chain import FrameChain
from .corrections import odom_correction

__all__ = ["LocalizationFacts", "MapLocalization", "prior_in_camera", "NO_MAP", "LOADED",
           "WAITING", "LOCALIZED", "Anchored"]

NO_MAP, LOADED, WAITING, LOCALIZED = "no map", "loaded", "waiting", "localized"


@dataclass(frozen=True)
class LocalizationFacts:
    """The localization as the other threads read it (immutable)."""

    state: str = NO_MAP
    map_id: str = ""
    map_path: str = ""
    map_keyframes: int = 0
    offers: int = 0  # keyframes offered to the relocalizer since the request
    localizations: int = 0  # confirmed localizations (the first, then refreshes)
    matched_keyframe: int = -1  # the stored keyframe of the last one
    stamp_ns: int = 0  # the localizing keyframe's stamp
    # (4, 4) the tracked frame's pose in the stored map at that keyframe (node frames, m)
    pose: Optional[np.ndarray] = field(default=None, repr=False)
    last_outcome: str = ""  # the relocalizer's last reason (loop/relocalize.LocalizeReason)
    failures: int = 0
    last_error: str = ""

    @property
    def hold_map_to_odom(self) -> bool:
        """True while a localization was asked and has not succeeded: map -> odom withheld."""
        return self.state == WAITING

    def status_note(self) -> str:
        """~/status's message while waiting ("" otherwise)."""
        if self.state != WAITING:
            return ""
        return (f"not localized in the stored map {self.map_id} yet ({self.offers} keyframes "
                f"tried, last: {self.last_outcome or 'none'}): map -> odom is not published")

    def info(self) -> dict:
        """/diagnostics key/values."""
        out = {"localization": self.state}
        if self.state != NO_MAP:
            out.update(map_id=self.map_id, map_path=self.map_path,
                       map_keyframes=self.map_keyframes, localize_offers=self.offers,
                       localizations=self.localizations)
        if self.state == LOCALIZED:
            out["localized_on"] = self.matched_keyframe
        if self.last_error:
            out["localize_last_error"] = self.last_error
        return out


def prior_in_camera(chain: FrameChain, T_map_tracked: np.ndarray) -> np.ndarray:
    """The relocalizer's prior ``T_map_cam`` (the back end's convention: the optical frame
    in the stored world) from a prior pose of the tracked frame (the base) in the map, in
    the node's frames: the inverse of ``FrameChain.tracked_in_map``,
    ``T_map_cam = bo^-1 @ T_map_tracked @ T_base_tracked^-1 @ bo``."""
    bo = chain.T_base_optical
    T = np.asarray(T_map_tracked, np.float64)
    if T.shape != (4, 4) or not np.isfinite(T).all():
        raise ValueError(f"prior pose must be a finite (4, 4) transform, got {T.shape}")
    return rigid_inverse(bo) @ T @ rigid_inverse(chain.T_base_tracked) @ bo


class Anchored:
    """A back end read through the anchor (``A @`` every pose): what ``LoopOutputs``
    rewrites ~/path and the map from once the stream is localized."""

    def __init__(self, backend, anchor: np.ndarray) -> None:
        self._backend, self._anchor = backend, anchor

    def keyframe_poses(self) -> dict:
        return {k: self._anchor @ T for k, T in self._backend.keyframe_poses().items()}

    def keyframe_depths(self):
        for kid, T, depth, K, stride in self._backend.keyframe_depths():
            yield kid, self._anchor @ T, depth, K, stride


class MapLocalization:
    """The loaded map, its ``Relocalizer`` and the localization (the back end's thread)."""

    def __init__(self) -> None:
        self.relocalizer = None  # loop/relocalize.Relocalizer of the loaded map
        self.anchor: Optional[np.ndarray] = None  # (4, 4) A (module docstring); None: none
        self._prior: Optional[tuple[np.ndarray, float]] = None  # (T_map_tracked, radius m)
        self.facts = LocalizationFacts()

    def install(self, relocalizer, path: str) -> None:
        """A new map (replaces the loaded one; any localization in the old one ends)."""
        m = relocalizer.place_map
        self.relocalizer, self.anchor, self._prior = relocalizer, None, None
        self.facts = LocalizationFacts(LOADED, m.map_id, str(path), len(m))

    def request(self, prior: Optional[tuple[np.ndarray, float]]) -> None:
        """Localize from the next keyframe on (again: a localization so far is dropped);
        ``prior``: (the base's pose in the map (4, 4), radius m) or None. ValueError
        without a map."""
        if self.relocalizer is None:
            raise ValueError("no place map loaded: call ~/load_map first, or give "
                             "~/localize_in_map a path")
        self.relocalizer.reset()
        self.anchor, self._prior = None, prior
        self.facts = dataclasses.replace(self.facts, state=WAITING, offers=0, pose=None,
                                         matched_keyframe=-1, last_outcome="")

    def new_stream(self) -> None:
        """A reset, a restart, a loaded session: the stream's odom is new, so is the
        localization (asked again at once when it was asked)."""
        if self.relocalizer is None:
            return
        self.relocalizer.reset()
        self.anchor = None
        if self.facts.state in (WAITING, LOCALIZED):
            self.facts = dataclasses.replace(self.facts, state=WAITING, offers=0, pose=None,
                                             matched_keyframe=-1, last_outcome="")

    def corrected(self, C: np.ndarray) -> np.ndarray:
        """The correction to publish: ``A @ C`` once localized, else the stream's own."""
        return C if self.anchor is None else self.anchor @ C

    def view(self, backend):
        """``backend`` as ~/path and the map are rebuilt from (anchored when localized)."""
        return backend if self.anchor is None else Anchored(backend, self.anchor)

    def offer(self, kf, chain: FrameChain, C: np.ndarray, log) -> bool:
        """One metric keyframe (``KeyframeInput``, the back end's) and the stream's own
        correction after it; True when it localized (the anchor is new). Never raises: a
        failure is counted and logged (``log``: the node's logger) at ERROR."""
        if self.relocalizer is None or self.facts.state not in (WAITING, LOCALIZED):
            return False
        prior, radius = None, None
        try:
            if self._prior is not None:
                prior, radius = prior_in_camera(chain, self._prior[0]), self._prior[1]
            outcome = self.relocalizer.offer(kf, prior, radius)
        except Exception as exc:  # noqa: BLE001 -- a bad keyframe, a pair that failed
            error = f"{type(exc).__name__}: {exc}"
            self.facts = dataclasses.replace(self.facts, failures=self.facts.failures + 1,
                                             last_error=error)
            log.error(f"relocalization: keyframe {kf.keyframe_id} not taken: {error}")
            return False
        facts = dataclasses.replace(self.facts, offers=self.facts.offers + 1,
                                    last_outcome=outcome.reason)
        if not outcome.localized:
            self.facts = facts
            return False
        T = np.asarray(outcome.T_map_odom, np.float64)
        self.anchor = T @ rigid_inverse(np.asarray(C, np.float64))
        pose = odom_correction(chain, T) @ chain.tracked_in_map(np.asarray(kf.T_odom_cam))
        pose.flags.writeable = False
        self.facts = dataclasses.replace(
            facts, state=LOCALIZED, localizations=facts.localizations + 1,
            matched_keyframe=int(outcome.matched_id), stamp_ns=int(kf.stamp_ns), pose=pose)
        return True


def node_place_map(backend, anchor: Optional[np.ndarray], frame_id: str,
                   metres_per_unit: Optional[float], scale_source: str):
    """The back end's place map (every kept keyframe at its optimised pose, through the
    anchor when the stream is localized, so a map saved from a localized stream is in the
    stored map's frame). The node's back end already holds metres once the scale locked
    (``metric_result``): with ``metres_per_unit`` the map says "m" with that scale and
    ``scale_source``, without it "model" (``loop.place_map.to_metres`` is for a model-unit
    database, as offline; here it would scale twice)."""
    from ...loop.place_map import place_map_from
    poses = backend.keyframe_poses()
    if anchor is not None:
        poses = {k: anchor @ T for k, T in poses.items()}
    if metres_per_unit is None:
        return place_map_from(backend.database, poses, "model", frame_id=frame_id,
                              intrinsics=backend.intrinsics)
    return place_map_from(backend.database, poses, "m", scale=float(metres_per_unit),
                          scale_source=scale_source, frame_id=frame_id,
                          intrinsics=backend.intrinsics)
