"""The one rigid-transform check: how far (..., 4, 4) matrices are from ``[[R, t], [0, 1]]``
with R a rotation, and the check that says which matrix is not and why.

Two parts, two tolerances. R drifts with arithmetic (a composition of poses, a pose printed
to 6 digits), so its departure from orthonormal, ``max |R^T R - I|``, is held to a tolerance
the caller states: each caller knows what its poses went through (the pose graph 1e-5, the
keyframe database and the scale sources 1e-4, published datasets 1e-3). The last row is
copied, never computed, so it must be ``[0, 0, 0, 1]`` to ``last_row_tol`` (default 1e-9;
0: exactly). A reflection (``det R <= 0``) and a non-finite value are never rigid.

* :func:`rigid_error`: the deviation, per matrix (inf where a matrix cannot be rigid);
* :func:`check_rigid`: a float64 copy, or a ValueError naming the matrix (its caller's name,
  or its label in a batch) and what is off;
* :func:`is_rigid`: the same test as a bool, for callers that turn a bad pose into their
  own outcome (the scale sources' rejections), never raising.

Numpy only.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

__all__ = ["LAST_ROW_TOL", "rigid_error", "check_rigid", "is_rigid"]

LAST_ROW_TOL = 1e-9  # max |last row - [0, 0, 0, 1]| of a rigid transform, by default
_LAST_ROW = np.array([0.0, 0.0, 0.0, 1.0])


def _parts(m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(ortho, row, det, finite)``, each (...,), of float64 matrices (..., 4, 4):
    ``max |R^T R - I|``, ``max |last row - [0, 0, 0, 1]|``, ``det R``, all values finite.
    A non-finite matrix is replaced by the identity first (no warnings; ``finite`` says)."""
    finite = np.isfinite(m).all(axis=(-2, -1))  # (...,)
    if not finite.all():
        m = np.where(finite[..., None, None], m, np.eye(4))
    r = m[..., :3, :3]
    ortho = np.abs(np.swapaxes(r, -1, -2) @ r - np.eye(3)).max(axis=(-2, -1))
    row = np.abs(m[..., 3, :] - _LAST_ROW).max(axis=-1)
    return ortho, row, np.linalg.det(r), finite


def _check_tolerances(tol: float, last_row_tol: float) -> None:
    for name, v in (("tol", tol), ("last_row_tol", last_row_tol)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < np.inf:
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")


def rigid_error(T, last_row_tol: float = LAST_ROW_TOL):
    """How far transforms ``T`` (..., 4, 4) are from rigid: ``max |R^T R - I|`` per matrix,
    a float for one matrix, else an array (...,); inf where a value is not finite, ``det R
    <= 0`` or the last row is off ``[0, 0, 0, 1]`` by more than ``last_row_tol``. A matrix
    is rigid to ``tol`` when ``rigid_error(T) <= tol``. ValueError for another shape."""
    _check_tolerances(0.0, last_row_tol)
    m = np.asarray(T, dtype=np.float64)
    if m.ndim < 2 or m.shape[-2:] != (4, 4):
        raise ValueError(f"T must have shape (..., 4, 4), got {m.shape}")
    ortho, row, det, finite = _parts(m)
    err = np.where(finite & (det > 0) & (row <= last_row_tol), ortho, np.inf)
    return float(err) if err.ndim == 0 else err


def check_rigid(T, name: str, *, tol: float, last_row_tol: float = LAST_ROW_TOL,
                batch: bool = False, labels: Optional[Sequence[str]] = None) -> np.ndarray:
    """``T`` as a float64 copy, checked rigid: one (4, 4), or with ``batch`` (N, 4, 4).
    ``tol``: the most ``|R^T R - I|`` may be (any entry); ``last_row_tol``: the most the
    last row may be off ``[0, 0, 0, 1]``. Else a ValueError naming ``name`` (in a batch the
    first bad matrix: ``labels[i]``, e.g. ``file:line``, or ``name[i]``) and what is off."""
    _check_tolerances(tol, last_row_tol)
    want = "(N, 4, 4)" if batch else "(4, 4)"
    try:  # a copy: what is returned is never the caller's array
        m = np.array(T, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name}: cannot read {type(T).__name__} as a float64 {want} array "
                         f"(move tensors to the CPU first): {err}") from None
    if m.ndim != (3 if batch else 2) or m.shape[-2:] != (4, 4):
        raise ValueError(f"{name} must have shape {want}, got {m.shape}")
    if labels is not None and (not batch or len(labels) != len(m)):
        raise ValueError(f"labels name each matrix of a batch: {len(labels)} labels for "
                         f"{name} of shape {m.shape}")
    ortho, row, det, finite = _parts(m)
    bad = ~finite | (ortho > tol) | (det <= 0) | (row > last_row_tol)  # (N,) or ()
    if not bad.any():
        return m
    i = int(np.argmax(bad)) if batch else ()
    who = name if not batch else labels[i] if labels is not None else f"{name}[{i}]"
    if not finite[i]:
        n = int(np.count_nonzero(~np.isfinite(m[i])))
        raise ValueError(f"{who} is not finite ({n} non-finite value(s))")
    why = []
    if ortho[i] > tol:
        why.append(f"|R^T R - I| = {ortho[i]:.3g} > {tol:g}")
    if det[i] <= 0:
        why.append(f"det R = {det[i]:.6g}: not a rotation")
    if row[i] > last_row_tol:
        why.append(f"last row {m[i][3].tolist()}, not [0, 0, 0, 1]")
    raise ValueError(f"{who}: not a rigid transform ({'; '.join(why)})")


def is_rigid(T, *, tol: float, last_row_tol: float = LAST_ROW_TOL) -> bool:
    """Whether ``T`` is one finite rigid (4, 4) (as :func:`check_rigid` with these
    tolerances would pass it); False, never an exception, for anything else."""
    try:
        m = np.asarray(T, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return m.shape == (4, 4) and rigid_error(m, last_row_tol) <= tol
