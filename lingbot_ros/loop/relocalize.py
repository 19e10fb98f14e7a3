"""Relocalization of a stream in a stored place map (docs/loop.md, "Relocalization").

    reloc = Relocalizer(config, read_place_map("maps/lab"), pair)   # a map in metres
    out = reloc.offer(keyframe_input, prior=None, prior_radius_m=None)
    if out.localized: publish(map -> odom = out.T_map_odom)           # the map's frame

Per offered keyframe (metric pose and depth: the stream's scale locked):

1. **retrieval**: its place descriptor (``place_descriptor`` of its features) against the
   map's database, top ``loop.top_k``. No age rule: a stored map is all old. With a
   ``prior`` (a guess of ``T_map_cam``), only keyframes within ``prior_radius_m`` of its
   position are candidates.
2. **verification**: the model on the pair (``pair(stored keyframe, image)``), then
   ``LoopVerifier.verify`` with the front end's ``T_odom_cam``. Both sides are in metres,
   so the relative scale is 1 (the current depth is not used for it). The plausibility gate
   is opened (``relocalization_config``): the implied pose is in the map's frame and the
   front end's in ``odom``, so their difference is the unknown offset itself, not a
   correction to bound. With a prior, the implied position must lie within
   ``prior_radius_m`` of it instead (else ``far_from_prior``).
3. **confirmation**: ``LoopConfirmation`` (the back end's rule): a verification is pending
   until a second agrees within ``loop.confirm_m`` / ``loop.confirm_deg``, both saying the
   same ``T_map_odom``. Only then is the stream localized, with
   ``T_map_odom = implied_pose_in_map @ inverse(T_odom_cam)`` of the second.

Counters: ``counts`` by outcome (one per offer), ``candidate_counts`` by each candidate's
reason (``verify.LoopReason``'s, ``pair_failed``, ``far_from_prior``). Single-threaded, like
the back end. Numpy and lingbot_ros.geometry only.
"""
from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from ..geometry import check_rigid
from .backend_types import KeyframeInput
from .config import LoopConfig
from .confirm import LoopConfirmation
from .graph_types import ROTATION_TOL
from .place_db import PlaceCandidate, PlaceKeyframe
from .place_descriptor import place_descriptor
from .place_map import PlaceMap, database_from
from .verify import LoopVerifier, PairOutputs

__all__ = ["Relocalizer", "LocalizeOutcome", "LocalizeReason", "relocalization_config"]

_NOW = (1 << 63) - 1  # "now" for retrieval: every stored stamp is older
_OPEN_M = 1e300  # the plausibility gate's distance, opened (LoopConfig wants it finite)
FAR_FROM_PRIOR = "far_from_prior"
PAIR_FAILED = "pair_failed"


class LocalizeReason:
    """Why an offer did (not) localize; ``Relocalizer.counts`` is keyed by these."""

    LOCALIZED = "localized"  # two verifications agreed
    NO_CANDIDATES = "no_candidates"  # nothing retrieved (an empty map, or none near the prior)
    NOT_VERIFIED = "not_verified"  # candidates, none verified
    UNCONFIRMED = "unconfirmed"  # verified, waiting for a second that agrees


@dataclass(frozen=True, eq=False)
class LocalizeOutcome:
    """What one ``Relocalizer.offer`` did. ``T_map_odom`` (4, 4) rigid, read-only: the
    stream's ``odom`` in the map's frame, when ``localized``; ``matched_id`` the stored
    keyframe of the confirming verification; ``verified`` how many candidates of this offer
    passed every gate; ``results`` their ``VerifyResult``s."""

    localized: bool
    reason: str
    T_map_odom: Optional[np.ndarray]
    matched_id: Optional[int]
    candidates: tuple[PlaceCandidate, ...]
    verified: int
    results: tuple = field(default=(), repr=False)


def relocalization_config(config: LoopConfig) -> LoopConfig:
    """``config`` for relocalization: retrieval with no age rule, and verification with the
    plausibility gate opened (module docstring)."""
    if not isinstance(config, LoopConfig):
        raise ValueError(f"config must be a LoopConfig, got {type(config).__name__}")
    return dataclasses.replace(config, min_age_s=0.0, max_correction_m=_OPEN_M,
                               max_correction_deg=180.0)


class Relocalizer:
    def __init__(self, config: LoopConfig, place_map: PlaceMap,
                 pair: Callable[[PlaceKeyframe, np.ndarray], PairOutputs],
                 verifier: Optional[LoopVerifier] = None) -> None:
        """``place_map`` in metres (ValueError otherwise: relocalizing needs the stream's
        metric scale on both sides); ``pair(keyframe, image) -> PairOutputs`` runs the model
        on the pair (``pair_runner.run_pair``); ``verifier`` defaults to a ``LoopVerifier``
        of ``relocalization_config(config)``."""
        reloc = relocalization_config(config)
        if not isinstance(place_map, PlaceMap):
            raise ValueError(f"place_map must be a PlaceMap, got {type(place_map).__name__}")
        if place_map.units != "m":
            raise ValueError(f"the place map {place_map.map_id} is in {place_map.units!r} "
                             "units, not metres: relocalization needs a map saved with the "
                             "stream's scale locked (and a stream with its scale locked)")
        if not callable(pair):
            raise ValueError("pair must be callable: (PlaceKeyframe, image) -> PairOutputs")
        self.config, self.place_map, self.pair = config, place_map, pair
        self.verifier = LoopVerifier(reloc) if verifier is None else verifier
        if not isinstance(self.verifier, LoopVerifier):
            raise ValueError(f"verifier must be a LoopVerifier, got {type(verifier).__name__}")
        self.database = database_from(place_map, reloc)
        self.confirmation = LoopConfirmation(config)
        self._ids = place_map.ids
        self._positions = place_map.poses[:, :3, 3]  # (n, 3)
        self.counts: Counter = Counter()
        self.candidate_counts: Counter = Counter()
        self.T_map_odom: Optional[np.ndarray] = None  # the last localization's

    def reset(self) -> None:
        """Forget pending verifications and the last localization (a new stream)."""
        self.confirmation = LoopConfirmation(self.config)
        self.T_map_odom = None

    def offer(self, kf: KeyframeInput, prior=None,
              prior_radius_m: Optional[float] = None) -> LocalizeOutcome:
        """Try to localize the keyframe ``kf`` (module docstring); ``prior`` an optional
        rigid (4, 4) guess of ``T_map_cam``, with ``prior_radius_m`` (metres, required with
        it). ValueError for bad input; a pair that raises ValueError counts as
        ``pair_failed``."""
        if not isinstance(kf, KeyframeInput):
            raise ValueError(f"kf must be a KeyframeInput, got {type(kf).__name__}")
        T_odom_cam = check_rigid(kf.T_odom_cam, "kf.T_odom_cam", tol=ROTATION_TOL)
        exclude = np.zeros(0, np.int64)
        prior_t = None
        if prior is not None or prior_radius_m is not None:
            prior_t = check_rigid(prior, "prior", tol=ROTATION_TOL)[:3, 3]
            r = prior_radius_m
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not (
                    math.isfinite(r) and r > 0):
                raise ValueError(f"prior_radius_m must be a finite number > 0 with a prior, "
                                 f"got {r!r}")
            far = np.linalg.norm(self._positions - prior_t, axis=1) > r  # (n,)
            exclude = self._ids[far]
        descriptor = place_descriptor(kf.features)
        candidates = self.database.candidates(descriptor, _NOW, exclude_ids=exclude)
        self.candidate_counts["candidates"] += len(candidates)
        if not candidates:
            return self._outcome(LocalizeReason.NO_CANDIDATES, candidates, ())
        results = []
        for c in candidates:
            keyframe = self.database.get(c.keyframe_id)
            try:
                outputs = self.pair(keyframe, kf.image)
            except ValueError:
                self.candidate_counts[PAIR_FAILED] += 1
                continue
            r = self.verifier.verify(outputs, keyframe, T_odom_cam, kf.stamp_ns)
            if r.accepted and prior_t is not None and np.linalg.norm(
                    r.implied_pose[:3, 3] - prior_t) > prior_radius_m:
                self.candidate_counts[FAR_FROM_PRIOR] += 1
                continue
            self.candidate_counts[r.reason] += 1
            if not r.accepted:
                continue
            results.append(r)
            if self.confirmation.offer(r).confirmed:
                T = r.correction()  # implied_pose @ inverse(T_odom_cam)
                T.flags.writeable = False
                self.T_map_odom = T
                return self._outcome(LocalizeReason.LOCALIZED, candidates, results, T,
                                     c.keyframe_id)
        reason = LocalizeReason.UNCONFIRMED if results else LocalizeReason.NOT_VERIFIED
        return self._outcome(reason, candidates, results)

    def _outcome(self, reason: str, candidates, results, T=None,
                 matched: Optional[int] = None) -> LocalizeOutcome:
        self.counts[reason] += 1
        return LocalizeOutcome(reason == LocalizeReason.LOCALIZED, reason, T, matched,
                               tuple(candidates), len(results), tuple(results))
