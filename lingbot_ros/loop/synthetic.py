"""A synthetic loop with injected drift, for the pose graph's tests and benchmark (numpy).

* :func:`loop_path`: the ground truth, keyframe poses (N, 4, 4) of a camera driving around
  a room-sized circle (z up, a gentle vertical wave so that it is 3D), lap after lap, each
  ending where it began;
* :func:`drifted`: the front end: the ground truth's relative motions with a rotation bias,
  a translation bias and a scale drift per step, accumulated along the path (plus seeded
  noise); also ``units_per_m`` (N,), the front end's local units per metre at each
  keyframe (1 at the start, ``exp(log_scale_per_step * k)`` after k steps);
* :func:`loop_measurement`: what a verified loop reports from the ground truth: keyframe
  b seen from keyframe a as a Sim(3) ``[[s R, t], [0, 1]]`` in a's front-end units, with
  ``s`` the relative scale (the length of one of b's units in a's units).

A bias (not only noise) is what a streaming front end accumulates: its heading creeps, its
scale grows or shrinks over a segment. The loop's correction is then smooth along the path,
which a pose graph restores; pure random-walk drift can be restored only in part (between
two loop ends the graph can only spread the error), so the tests use a bias with small noise.
"""
from __future__ import annotations

import math

import numpy as np

from ..geometry import rigid_inverse, rotation_exp

__all__ = ["loop_path", "drifted", "loop_measurement"]


def loop_path(n: int, per_lap: int = 200, radius_m: float = 3.0,
              wave_m: float = 0.2) -> np.ndarray:
    """(n, 4, 4) keyframe poses (x forward, z up) around a circle of ``radius_m``,
    ``per_lap`` keyframes a lap: keyframe k at angle ``2 pi k / per_lap``, so keyframe
    ``per_lap`` is back at keyframe 0's pose; its height waves by ``wave_m`` twice a lap and
    it pitches with the slope."""
    if n < 2 or per_lap < 4 or not radius_m > 0:
        raise ValueError(f"loop_path needs n >= 2, per_lap >= 4, radius > 0; got {n}, "
                         f"{per_lap}, {radius_m}")
    out = np.zeros((n, 4, 4))
    out[:, 3, 3] = 1.0
    for k in range(n):
        a = 2.0 * math.pi * k / per_lap
        slope = 2.0 * wave_m * math.cos(2.0 * a) / radius_m  # dz / d(arc length)
        yaw = rotation_exp(np.array([0.0, 0.0, a + math.pi / 2]))
        pitch = rotation_exp(np.array([0.0, -math.atan(slope), 0.0]))
        out[k, :3, :3] = yaw @ pitch
        out[k, :3, 3] = (radius_m * math.cos(a), radius_m * math.sin(a),
                         wave_m * math.sin(2.0 * a))
    return out


def drifted(truth: np.ndarray, rot_deg_per_step=(0.004, 0.004, 0.04),
            trans_m_per_step=(0.0, 0.002, 0.0004), log_scale_per_step=0.0004,
            noise_deg: float = 0.005, noise_m: float = 0.0005,
            seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The front end's poses (N, 4, 4) and ``units_per_m`` (N,) for ground-truth poses
    (N, 4, 4): each relative motion ``T_k^-1 T_k+1`` rotated by a bias of
    ``rot_deg_per_step`` (a rotation vector in degrees, in the keyframe's axes) plus noise,
    its translation shifted by ``trans_m_per_step`` plus noise, then multiplied by the local
    scale ``exp(log_scale_per_step * k)`` (or, for an array (N - 1,) of per-step changes,
    ``exp`` of their running sum); the poses chained from ``truth[0]``. The
    defaults, over the 200 keyframes of a 3 m circle: 8 degrees of heading, 8 % of scale,
    about 0.4 m off where the loop closes (a few of the default odometry sigmas' spread,
    as an honest noise model would have it: docs/loop.md "Pose graph")."""
    truth = np.asarray(truth, dtype=np.float64)
    if truth.ndim != 3 or truth.shape[1:] != (4, 4) or len(truth) < 2:
        raise ValueError(f"truth must be (N >= 2, 4, 4), got {truth.shape}")
    rng = np.random.default_rng(seed)
    rel = rigid_inverse(truth[:-1]) @ truth[1:]  # (N-1, 4, 4) true relative motions
    bias_rad = np.radians(np.asarray(rot_deg_per_step, dtype=np.float64))
    steps = np.broadcast_to(np.asarray(log_scale_per_step, np.float64), (len(truth) - 1,))
    units_per_m = np.exp(np.concatenate([[0.0], np.cumsum(steps)]))  # (N,)
    out = np.empty_like(truth)
    out[0] = truth[0]
    for k, step in enumerate(rel):
        err = np.eye(4)
        err[:3, :3] = rotation_exp(bias_rad + np.radians(noise_deg) * rng.standard_normal(3))
        moved = step.copy()
        moved[:3, :3] = step[:3, :3] @ err[:3, :3]
        t = step[:3, 3] + np.asarray(trans_m_per_step) + noise_m * rng.standard_normal(3)
        moved[:3, 3] = units_per_m[k] * t
        out[k + 1] = out[k] @ moved
    return out, units_per_m


def loop_measurement(truth: np.ndarray, units_per_m: np.ndarray, a: int, b: int) -> np.ndarray:
    """Keyframe b seen from keyframe a, exactly (the ground truth), as a verified loop
    reports it: ``[[s R_ab, t_ab], [0, 1]]`` (4, 4), ``t_ab`` in a's front-end units,
    ``s = units_per_m[a] / units_per_m[b]``."""
    rel = rigid_inverse(truth[a]) @ truth[b]
    out = np.eye(4)
    scale = float(units_per_m[a] / units_per_m[b])
    out[:3, :3] = scale * rel[:3, :3]
    out[:3, 3] = units_per_m[a] * rel[:3, 3]
    return out
