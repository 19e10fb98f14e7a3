"""Trajectory evaluation against a ground truth, with the numbers ``evo`` users know.

Poses are 4x4 float64 camera-to-world matrices, stamps integer nanoseconds (see
:mod:`lingbot_ros.geometry.poses`). The estimate's world is the first camera's optical frame and
its scale is arbitrary (monocular), so the headline numbers are Sim(3)-aligned.

* :func:`associate` -- ``evo``'s nearest-stamp association (``evo_ape --t_max_diff --t_offset``,
  ``evo.core.sync.associate_trajectories`` with the ground truth first), in integer ns.
* :func:`ate` -- absolute trajectory error, translation part (``evo_ape -a`` / ``-as``).
* :func:`rpe` -- relative pose error over frame or metre deltas (``evo_rpe``), translation and
  rotation angle, plus a KITTI-style drift in %.
* :func:`evaluate` -- all of it as one JSON-ready summary; never raises on bad input data,
  it reports an ``"error"`` instead.

What differs from evo on purpose: stamps are integers, so "nearest" and "within max_diff" are
exact (evo compares float seconds: at epoch-sized stamps its resolution is ~0.24 us, so a
difference within that of a tie or of ``max_diff`` may go the other way there); an exactly
collinear trajectory is aligned (the position errors are still well defined) where evo refuses
with "Degenerate covariance rank"; rotation angles use ``atan2`` (evo: scipy's rotation vector),
equal to ~1e-15 rad.
"""
from __future__ import annotations

import numpy as np

from ...geometry import Sim3, rigid_inverse, rotation_angle, umeyama

__all__ = ["associate", "ate", "rpe", "evaluate", "align_positions", "rotation_angle_deg",
           "DEFAULT_MAX_DIFF_NS", "ALIGNMENTS"]

DEFAULT_MAX_DIFF_NS = 10_000_000  # evo's --t_max_diff default, 0.01 s
ALIGNMENTS = ("sim3", "se3", "none")
_I64_MAX = np.iinfo(np.int64).max


def _stamps(x, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1:
        a = a.reshape(-1)
    if a.dtype.kind in "iu":
        return a.astype(np.int64)
    if a.size == 0:
        return np.zeros(0, np.int64)
    if a.dtype.kind == "f" and np.isfinite(a).all() and (a == np.round(a)).all():
        return a.astype(np.int64)
    raise ValueError(f"{name} must be integer nanoseconds, got dtype {a.dtype}")


def _nearest(short: np.ndarray, long: np.ndarray, max_diff: int) -> tuple[np.ndarray, np.ndarray]:
    """evo's ``matching_time_indices(short, long)`` on integers: for every stamp of ``short``
    in its order, the index of the nearest stamp of ``long`` if at most ``max_diff`` away."""
    if len(short) == 0 or len(long) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if not np.all(np.diff(long) >= 0):
        # evo's linear fallback for unsorted stamps: argmin, i.e. the first of equal distances
        diffs = np.abs(long[None, :] - short[:, None])
        best = np.argmin(diffs, axis=1)
        ok = diffs[np.arange(len(short)), best] <= max_diff
        return np.nonzero(ok)[0].astype(np.int64), best[ok].astype(np.int64)
    idx = np.minimum(np.searchsorted(long, short, side="right"), len(long) - 1)
    diff_ub = long[idx] - short  # may be < 0 past the last stamp: then it is the nearest
    diff_lb = np.where(idx > 0, short - long[np.maximum(idx - 1, 0)], _I64_MAX)
    take_ub = (diff_ub <= max_diff) & (diff_ub < diff_lb)
    take_lb = ~take_ub & (diff_lb <= max_diff) & (diff_lb <= diff_ub)
    in_range = (short >= long[0] - max_diff) & (short <= long[-1] + max_diff)
    ok = in_range & (take_ub | take_lb)
    best = np.where(take_ub, idx, idx - 1)
    return np.nonzero(ok)[0].astype(np.int64), best[ok].astype(np.int64)


def associate(est_stamps_ns, gt_stamps_ns, max_diff_ns: int = DEFAULT_MAX_DIFF_NS,
              offset_ns: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Pair estimate and ground-truth poses by stamp, exactly as ``evo_ape`` does.

    ``offset_ns`` is added to the estimate's stamps (evo's ``--t_offset``/``offset_2``, with the
    ground truth as the reference). Returns ``(est_idx, gt_idx)``: int64 index arrays of equal
    length, the i-th estimate pose ``est_idx[i]`` pairs with ground-truth pose ``gt_idx[i]``.

    The rule (``evo.core.sync.associate_trajectories``, nearest_time):

    * evo walks the trajectory with *fewer* poses (the estimate when both have as many) and
      pairs each of its stamps with the nearest stamp of the other one, if at most
      ``max_diff_ns`` away (inclusive). Pairs come in that walk's order, i.e. by stamp for
      sorted input.
    * It is not forced one-to-one: two stamps of the shorter trajectory may both pick the same
      stamp of the longer one (it happens only when ``max_diff`` exceeds half the spacing of the
      longer trajectory, e.g. around a gap). Stamps of the shorter trajectory without a
      partner within ``max_diff`` are dropped, as are unpicked stamps of the longer one.
    * Ties: a stamp exactly halfway between two stamps of the other trajectory goes to the
      earlier one. Duplicate stamps in the longer trajectory: the last of them is picked
      (evo's binary search); if the longer trajectory's stamps are not sorted, evo falls back to
      a linear search that picks the first index at the smallest distance -- reproduced too.
    """
    est = _stamps(est_stamps_ns, "est_stamps_ns")
    gt = _stamps(gt_stamps_ns, "gt_stamps_ns")
    max_diff, offset = int(max_diff_ns), int(offset_ns)
    if max_diff < 0:
        raise ValueError(f"max_diff_ns must be >= 0, got {max_diff}")
    if len(est) > len(gt):  # evo: the ground truth is the shorter one, est shifted by +offset
        gt_idx, est_idx = _nearest(gt, est + offset, max_diff)
    else:  # the estimate is walked, matched into the ground truth shifted by -offset
        est_idx, gt_idx = _nearest(est, gt - offset, max_diff)
    return est_idx, gt_idx


def _positions(x, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 3 and a.shape[1:] == (4, 4):
        return a[:, :3, 3]
    if a.ndim == 2 and a.shape[1] == 3:
        return a
    raise ValueError(f"{name} must be (N, 4, 4) poses or (N, 3) positions, got {a.shape}")


def _poses(x, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 3 or a.shape[1:] != (4, 4):
        raise ValueError(f"{name} must be (N, 4, 4) poses, got {a.shape}")
    return a


def _check_align(align: str) -> str:
    if align is None:
        align = "none"
    if align not in ALIGNMENTS:
        raise ValueError(f"align must be one of {ALIGNMENTS}, got {align!r}")
    return align


def align_positions(est_xyz, gt_xyz, align: str = "sim3") -> Sim3:
    """The transform mapping the estimate onto the ground truth: Umeyama on the (associated)
    positions, with scale for ``'sim3'`` (``evo_ape -as``), without for ``'se3'`` (``-a``),
    identity for ``'none'``. Needs >= 3 pairs (ValueError otherwise)."""
    align = _check_align(align)
    est, gt = _positions(est_xyz, "est"), _positions(gt_xyz, "gt")
    if est.shape != gt.shape:
        raise ValueError(f"est and gt must pair up: {est.shape} vs {gt.shape}")
    if len(est) < 3:
        raise ValueError(f"alignment needs at least 3 associated poses, got {len(est)}")
    if align == "none":
        return Sim3.identity()
    return umeyama(est, gt, with_scale=align == "sim3")


def _stats(errors: np.ndarray, prefix: str = "", suffix: str = "") -> dict:
    """evo's statistics: rmse, mean, median, std (population), min, max."""
    e = np.asarray(errors, dtype=np.float64)
    if e.size == 0:
        return {f"{prefix}{k}{suffix}": None for k in ("rmse", "mean", "median", "std", "min",
                                                       "max")}
    return {f"{prefix}rmse{suffix}": float(np.sqrt(np.mean(e ** 2))),
            f"{prefix}mean{suffix}": float(np.mean(e)),
            f"{prefix}median{suffix}": float(np.median(e)),
            f"{prefix}std{suffix}": float(np.std(e)),
            f"{prefix}min{suffix}": float(np.min(e)),
            f"{prefix}max{suffix}": float(np.max(e))}


def ate(est_poses, gt_poses, align: str = "sim3") -> dict:
    """Absolute trajectory error of *associated* poses (same length, pair by pair).

    Translation part, as ``evo_ape tum gt est --pose_relation trans_part`` with ``-as``
    (``'sim3'``, for monocular estimates), ``-a`` (``'se3'``) or no alignment (``'none'``): the
    estimate's positions are mapped onto the ground truth by the Umeyama fit of all pairs, and
    the error of pose i is ``|s R p_est_i + t - p_gt_i|`` (ground-truth units).

    ``est_poses`` / ``gt_poses``: (N, 4, 4) poses or (N, 3) positions, N >= 3.

    Returns ``rmse``, ``mean``, ``median``, ``std``, ``min``, ``max`` (floats, evo's definitions:
    ``std`` is the population one), ``scale`` (the alignment's; 1.0 for se3/none),
    ``errors`` ((N,) float64 per pose, for plots) and ``alignment`` (the :class:`Sim3`).
    """
    est, gt = _positions(est_poses, "est_poses"), _positions(gt_poses, "gt_poses")
    sim = align_positions(est, gt, align)
    errors = np.linalg.norm(sim.apply_points(est) - gt, axis=1)
    return {**_stats(errors), "scale": float(sim.scale), "errors": errors, "alignment": sim}


def rotation_angle_deg(r) -> np.ndarray:
    """Angle of (..., 3, 3) rotations in degrees, accurate for small and large angles
    (``atan2(|vee(R - R^T)| / 2, (tr R - 1) / 2)``)."""
    return np.degrees(rotation_angle(r))


def _pairs_by_index(n: int, delta: int, all_pairs: bool) -> np.ndarray:
    """evo's ``filter_pairs_by_index``."""
    if all_pairs:
        i = np.arange(max(n - delta, 0))
        return np.stack([i, i + delta], 1).astype(np.int64)
    ids = np.arange(0, n, delta)
    return np.stack([ids[:-1], ids[1:]], 1).astype(np.int64)


def _pairs_by_path(xyz: np.ndarray, delta: float, tol: float, all_pairs: bool) -> np.ndarray:
    """evo's ``filter_pairs_by_path``.

    Consecutive: walk the poses summing the step lengths since the last chosen pose; the first
    pose where the sum reaches ``delta`` (>=) is chosen and the sum restarts, the pairs are the
    consecutive chosen poses (pose 0 first). All pairs: for each pose i, the later pose j whose
    path distance from i is nearest to ``delta``, kept if within ``tol``."""
    n = len(xyz)
    if n < 2:
        return np.zeros((0, 2), np.int64)
    steps = np.linalg.norm(xyz[1:] - xyz[:-1], axis=1)
    if all_pairs:
        dist = np.concatenate(([0.0], np.cumsum(steps)))
        pairs = []
        for i in range(n - 1):
            from_here = dist[i + 1:] - dist[i]
            k = int(np.argmin(np.abs(from_here - delta)))
            if abs(from_here[k] - delta) <= tol:
                pairs.append((i, k + i + 1))
        return np.asarray(pairs, np.int64).reshape(-1, 2)
    ids, path = [0], 0.0
    for i, step in enumerate(steps.tolist(), start=1):  # sequential float sum, as evo
        path += step
        if path >= delta:
            ids.append(i)
            path = 0.0
    return np.stack([ids[:-1], ids[1:]], 1).astype(np.int64)


def rpe(est_poses, gt_poses, delta: float = 1, unit: str = "frames", all_pairs: bool = False,
        align: str = "sim3", pairs_from_reference: bool = True, rel_delta_tol: float = 0.1
        ) -> dict:
    """Relative pose error of *associated* (N, 4, 4) poses, as ``evo_rpe``.

    For each pair (i, j) the error pose is ``E = (Q_i^-1 Q_j)^-1 (P_i^-1 P_j)`` (Q ground truth,
    P estimate); the translation error is ``|t(E)|`` (``--pose_relation trans_part``, ground-
    truth units) and the rotation error the angle of ``R(E)`` in degrees (``angle_deg``).

    * ``align``: the estimate is first aligned onto the ground truth like :func:`ate` (``evo_rpe
      -as`` for ``'sim3'``, the default: a monocular estimate's translations only mean
      something once scaled; ``'se3'`` changes nothing for RPE but rounding).
    * ``unit='frames'``: pairs ``delta`` associated poses apart (evo's ``--delta_unit f``):
      ``(0, d), (d, 2d), ...`` or, with ``all_pairs``, ``(i, i + d)`` for every i. "RPE at 1
      frame" is the frame-to-frame odometry error.
    * ``unit='m'``: pairs ``delta`` metres of *path length* apart (``--delta_unit m``), chosen
      as evo does (see :func:`_pairs_by_path`): consecutive -- walk the path, cut it each time
      the travelled length since the last cut reaches ``delta`` (so each segment is >= delta);
      all pairs -- from every pose the pose whose path distance is nearest ``delta``, kept when
      within ``rel_delta_tol * delta``. The path is the ground truth's when
      ``pairs_from_reference`` (the default here: ``evo_rpe --pairs_from_reference``; evo's
      default is the aligned estimate's path). "RPE at 1 m" is the error accumulated over about
      1 m of travel.
    * ``drift_pct`` -- the KITTI-style drift used here: the mean over pairs of
      ``100 * |t(E)| / L``, with ``L`` the ground-truth path length between the pair's poses
      (pairs with ``L = 0`` left out; None if none is left): the translation error in % of
      the distance travelled. Meant for the metre-based pairs (for 1 m segments: cm of error per
      metre travelled); also computed for frame pairs.

    Returns ``pairs`` ((K, 2) int64), ``trans_errors`` and ``rot_errors_deg`` ((K,)),
    ``path_lengths`` ((K,) ground-truth path length per pair), ``trans_rmse``, ``trans_mean``,
    ``trans_median``, ``trans_std``, ``trans_min``, ``trans_max``, the same with ``rot_`` and
    ``_deg`` (``rot_rmse_deg``, ...), ``drift_pct``, ``num_pairs``, ``scale`` (the alignment's).
    No pair (e.g. a path shorter than ``delta``) raises ValueError, as evo does.
    """
    est, gt = _poses(est_poses, "est_poses"), _poses(gt_poses, "gt_poses")
    if est.shape != gt.shape:
        raise ValueError(f"est and gt must pair up: {est.shape} vs {gt.shape}")
    if unit not in ("frames", "m"):
        raise ValueError(f"unit must be 'frames' or 'm', got {unit!r}")
    if not delta > 0:
        raise ValueError(f"delta must be > 0, got {delta}")
    sim = Sim3.identity()
    if _check_align(align) != "none":
        sim = align_positions(est[:, :3, 3], gt[:, :3, 3], align)
        est = sim.apply_c2w(est)
    if unit == "frames":
        if float(delta) != int(delta):
            raise ValueError(f"delta must be an integer number of frames, got {delta}")
        pairs = _pairs_by_index(len(est), int(delta), all_pairs)
    else:
        path_of = gt if pairs_from_reference else est
        pairs = _pairs_by_path(path_of[:, :3, 3], float(delta), float(delta) * rel_delta_tol,
                               all_pairs)
    if len(pairs) == 0:
        raise ValueError(f"delta = {delta} ({unit}) gives no pose pair among {len(est)} "
                         "associated poses (path or sequence too short)")
    i, j = pairs[:, 0], pairs[:, 1]
    q_rel = rigid_inverse(gt[i]) @ gt[j]
    p_rel = rigid_inverse(est[i]) @ est[j]
    e = rigid_inverse(q_rel) @ p_rel
    trans = np.linalg.norm(e[:, :3, 3], axis=1)
    rot = rotation_angle_deg(e[:, :3, :3])
    dist = np.concatenate(([0.0], np.cumsum(np.linalg.norm(np.diff(gt[:, :3, 3], axis=0),
                                                           axis=1))))
    lengths = dist[j] - dist[i]
    moving = lengths > 0
    drift = float(np.mean(100.0 * trans[moving] / lengths[moving])) if moving.any() else None
    return {"pairs": pairs, "trans_errors": trans, "rot_errors_deg": rot,
            "path_lengths": lengths, **_stats(trans, "trans_"), **_stats(rot, "rot_", "_deg"),
            "drift_pct": drift, "num_pairs": int(len(pairs)), "scale": float(sim.scale)}


def _span(stamps: np.ndarray) -> str:
    if len(stamps) == 0:
        return "no poses"
    return (f"{len(stamps)} poses, stamps {stamps.min() / 1e9:.3f} .. "
            f"{stamps.max() / 1e9:.3f} s")


def evaluate(est_stamps, est_poses, gt_stamps, gt_poses,
             max_diff_ns: int = DEFAULT_MAX_DIFF_NS, offset_ns: int = 0,
             metric: bool = False) -> dict:
    """Associate (:func:`associate`), then ATE and RPE; a JSON-ready summary.

    Keys: ``associated`` (pairs), ``estimate_poses``, ``ground_truth_poses``, ``max_diff_ns``,
    ``offset_ns``, ``error`` (None, or why there are no metrics), and when there are metrics:

    * ``ate_sim3`` / ``ate_se3``: ``rmse``, ``mean``, ``median``, ``std``, ``min``, ``max``,
      ``scale`` -- the ATE after a Sim(3) (``evo_ape -as``, the meaningful one for a monocular
      estimate) or SE(3) (``-a``) alignment, in ground-truth units.
    * ``rpe_1_frame``: ``pairs``, ``trans_rmse``, ``trans_mean``, ``rot_rmse_deg``,
      ``rot_mean_deg`` -- frame-to-frame (consecutive associated poses) relative error of the
      Sim(3)-aligned estimate (``evo_rpe -as --delta 1 --delta_unit f``).
    * ``rpe_1_m``: ``pairs``, ``trans_rmse``, ``trans_mean``, ``rot_rmse_deg``, ``drift_pct``
      -- the relative error over consecutive segments of >= 1 m of ground-truth path
      (``evo_rpe -as --delta 1 --delta_unit m --pairs_from_reference``), and the drift: mean
      translation error per segment in % of the segment's ground-truth length; or
      ``{"error": ...}`` when the path is shorter than 1 m.
    * ``gt_path_length_m``: the ground-truth path length over the associated poses.
    * ``estimate_units``: ``'m'`` when ``metric`` (the estimate was converted to metres by a
      metric scale), else ``'model units'``; with ``metric``, ``ate_se3_metres``: the ATE of
      the metric estimate after an SE(3) alignment -- rotation and translation only, no
      scale fitted -- in metres (the number a robot's metric output is judged by), beside
      the Sim(3) one (which fits the scale away).

    Fewer than 3 associated poses (or a degenerate alignment) gives no metrics but an
    ``error`` that says how many associated, the stamp ranges of both and the knobs.
    """
    est_t = _stamps(est_stamps, "est_stamps")
    gt_t = _stamps(gt_stamps, "gt_stamps")
    est_p, gt_p = np.asarray(est_poses, np.float64), np.asarray(gt_poses, np.float64)
    if est_p.size == 0:
        est_p = est_p.reshape(0, 4, 4)
    if gt_p.size == 0:
        gt_p = gt_p.reshape(0, 4, 4)
    est_p, gt_p = _poses(est_p, "est_poses"), _poses(gt_p, "gt_poses")
    if len(est_t) != len(est_p) or len(gt_t) != len(gt_p):
        raise ValueError(f"stamps and poses differ in number: estimate {len(est_t)} vs "
                         f"{len(est_p)}, ground truth {len(gt_t)} vs {len(gt_p)}")
    ei, gi = associate(est_t, gt_t, max_diff_ns, offset_ns)
    out = {"associated": int(len(ei)), "estimate_poses": int(len(est_t)),
           "ground_truth_poses": int(len(gt_t)), "max_diff_ns": int(max_diff_ns),
           "offset_ns": int(offset_ns), "error": None,
           "estimate_units": "m" if metric else "model units"}
    if len(ei) < 3:
        out["error"] = (
            f"only {len(ei)} estimated pose(s) associate with a ground-truth pose within "
            f"{max_diff_ns / 1e6:g} ms (after adding {offset_ns / 1e6:g} ms to the estimate's "
            f"stamps); ATE and RPE need at least 3. Estimate: {_span(est_t)}; ground truth: "
            f"{_span(gt_t)}. If the two clocks differ, shift the estimate with --offset; if "
            f"the stamps are close but not within the window, widen it with --max-diff.")
        return out
    est, gt = est_p[ei], gt_p[gi]
    finite = np.isfinite(est).all(axis=(1, 2)) & np.isfinite(gt).all(axis=(1, 2))
    if not finite.all():
        out["error"] = f"{int((~finite).sum())} associated pose(s) are not finite"
        return out
    keys = ("rmse", "mean", "median", "std", "min", "max", "scale")
    try:
        for align in ("sim3", "se3"):
            res = ate(est, gt, align)
            out[f"ate_{align}"] = {k: res[k] for k in keys}
        if metric:
            out["ate_se3_metres"] = {**out["ate_se3"], "units": "m",
                                     "alignment": "SE(3): no scale fitted"}
        frame = rpe(est, gt, 1, "frames", align="sim3")
    except ValueError as exc:  # degenerate alignment (e.g. all estimated positions equal)
        for k in ("ate_sim3", "ate_se3", "ate_se3_metres"):
            out.pop(k, None)
        out["error"] = f"no alignment possible on the {len(ei)} associated poses: {exc}"
        return out
    out["rpe_1_frame"] = {"pairs": frame["num_pairs"], "trans_rmse": frame["trans_rmse"],
                          "trans_mean": frame["trans_mean"],
                          "rot_rmse_deg": frame["rot_rmse_deg"],
                          "rot_mean_deg": frame["rot_mean_deg"]}
    try:
        metre = rpe(est, gt, 1.0, "m", align="sim3", pairs_from_reference=True)
        out["rpe_1_m"] = {"pairs": metre["num_pairs"], "trans_rmse": metre["trans_rmse"],
                          "trans_mean": metre["trans_mean"],
                          "rot_rmse_deg": metre["rot_rmse_deg"], "drift_pct": metre["drift_pct"]}
    except ValueError as exc:
        out["rpe_1_m"] = {"error": str(exc)}
    out["gt_path_length_m"] = float(np.linalg.norm(np.diff(gt[:, :3, 3], axis=0), axis=1).sum())
    return out
