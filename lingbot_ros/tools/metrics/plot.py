"""Trajectory plots (PNG) that read like an evaluation: the estimate Sim(3)-aligned onto the
ground truth in a top and a side view, and the ATE over time. An estimate in metres (a locked
metric scale) is drawn SE(3)-aligned instead (``align='se3'``: the scale is kept); the legend,
the ATE panel and the heading name the alignment drawn.

matplotlib is optional (``pip install matplotlib``, setup.py's ``viz`` extra) and imported only
when a plot is drawn, with the Agg backend (files only, no display); call
:func:`require_matplotlib` before a long run to fail early.

Views (:func:`plot_data` picks them; every axis is labelled with what it is):

* **With ground truth**, everything is drawn in the ground truth's world, the estimate mapped
  onto it by the Umeyama Sim(3) fit of the associated positions (``evo_ape -as``), and the
  views follow the ground truth's motion: its principal axes (PCA of its positions) -- the two
  of largest spread span the "top" view, the third is "up" in the side view, whose horizontal
  axis is the top view's axis of larger spread. When the least-spread axis is within 25 deg of
  a world axis the views snap to the world axes, so the labels are plain ``x``/``y``/``z``:
  normal ``z`` -> a z-up world (ROS, motion capture): top view x-y seen from +z, up = +z;
  normal ``y`` -> a camera-style world with y down (KITTI, the estimate's own): top view x-z
  seen from -y, up = -y; normal ``x``: top view y-z seen from +x. Otherwise the axes are
  labelled as the principal components in world coordinates, e.g. ``PC1 = +0.71x +0.70y``.
* **Without ground truth** (or when it does not associate), the estimate alone in its own
  world, the first camera's optical frame (x right, y down, z forward): top view x-z seen from
  above (-y), side view z or x (whichever spreads more) against -y (up). Units are the model's
  (monocular: arbitrary scale).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ...geometry import Sim3
from .trajectory import DEFAULT_MAX_DIFF_NS, align_positions, associate

__all__ = ["require_matplotlib", "plot_evaluation", "plot_data", "PlotData", "View",
           "view_axes", "MATPLOTLIB_HINT"]

MATPLOTLIB_HINT = "--plot needs matplotlib: pip install matplotlib"
# The PNG's Software text: how a plot is recognised as ours (--out never replaces another file)
PNG_SOFTWARE = "lingbot_ros"
SNAP_DEG = 25.0  # snap PCA views to the world axes when the motion normal is this close
FLAT, MIN_HALF = 0.2, 0.05  # side view: height < FLAT x width is stretched, to >= 2 MIN_HALF
_NAMES = ("x", "y", "z")


def require_matplotlib():
    """Import matplotlib with the Agg backend and return ``pyplot``; RuntimeError with the
    install hint if it is missing (callers check this before a run starts)."""
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError(MATPLOTLIB_HINT) from exc
    return plt


@dataclass(frozen=True)
class View:
    """A 2D view: screen coordinates are ``(p @ horizontal, p @ vertical)``."""

    horizontal: np.ndarray
    vertical: np.ndarray
    xlabel: str
    ylabel: str
    title: str

    def project(self, xyz: np.ndarray) -> np.ndarray:
        return np.stack([xyz @ self.horizontal, xyz @ self.vertical], -1)


@dataclass
class PlotData:
    """What :func:`plot_evaluation` draws (returned by it, for tests and callers).

    ``est_xyz``: every estimated camera centre (N, 3) in the drawing world -- the ground
    truth's, after ``alignment`` (``None`` without ground truth: the estimate's own world).
    ``gt_xyz``: the ground-truth centres (M, 3) or None. ``est_idx`` / ``gt_idx``: the
    association. ``ate_errors``: per associated pose, after the Sim(3) (K,), at ``ate_time_s``
    (estimate stamps, seconds since the first estimate stamp). ``top`` / ``side``: the views;
    ``top_est`` etc. are the drawn 2D coordinates. ``note``: why the ground truth is not drawn.
    """

    est_xyz: np.ndarray
    gt_xyz: Optional[np.ndarray]
    alignment: Optional[Sim3]
    est_idx: np.ndarray
    gt_idx: np.ndarray
    ate_errors: np.ndarray
    ate_time_s: np.ndarray
    top: View
    side: View
    keyframes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    note: str = ""
    align: str = "sim3"  # the alignment drawn: sim3 | se3 | none (trajectory.ALIGNMENTS)
    units: str = ""  # the estimate's own units without ground truth ("m", "model units")

    @property
    def alignment_label(self) -> str:
        """Which alignment the drawing shows, in words."""
        return {"sim3": "Sim(3)-aligned, scale fitted",
                "se3": "SE(3)-aligned, metric scale kept",
                "none": "not aligned"}.get(self.align, self.align)

    @property
    def top_est(self) -> np.ndarray:
        return self.top.project(self.est_xyz)

    @property
    def side_est(self) -> np.ndarray:
        return self.side.project(self.est_xyz)

    @property
    def top_gt(self) -> Optional[np.ndarray]:
        return None if self.gt_xyz is None else self.top.project(self.gt_xyz)

    @property
    def side_gt(self) -> Optional[np.ndarray]:
        return None if self.gt_xyz is None else self.side.project(self.gt_xyz)


def _axis(k: int, sign: float = 1.0) -> np.ndarray:
    v = np.zeros(3)
    v[k] = sign
    return v


def _side_horizontal(xyz: np.ndarray, a: np.ndarray, b: np.ndarray, la: str, lb: str):
    spread = [np.ptp(xyz @ a) if len(xyz) else 0.0, np.ptp(xyz @ b) if len(xyz) else 0.0]
    return (a, la) if spread[0] >= spread[1] else (b, lb)


def _label(v: np.ndarray) -> str:
    terms = [f"{c:+.2f}{n}" for c, n in zip(v, _NAMES) if abs(c) >= 0.005]
    return " ".join(terms)


def view_axes(xyz: Optional[np.ndarray], unit: str = "m", camera_world: bool = False
              ) -> tuple[View, View]:
    """(top view, side view) for points ``xyz`` (N, 3); see the module docstring.

    ``camera_world``: the fixed views of the estimate's optical world (no PCA)."""
    u = f" ({unit})" if unit else ""
    if camera_world or xyz is None or len(xyz) < 3:
        x, z, up = _axis(0), _axis(2), _axis(1, -1.0)
        top = View(x, z, f"x, right{u}", f"z, forward{u}", "top view (from above, -y)")
        pts = np.zeros((0, 3)) if xyz is None else xyz
        h, hl = _side_horizontal(pts, z, x, f"z, forward{u}", f"x, right{u}")
        side = View(h, up, hl, f"-y, up{u}", "side view")
        return top, side
    centred = xyz - xyz.mean(0)
    _, _, vt = np.linalg.svd(centred, full_matrices=True)
    normal = vt[2]
    k = int(np.argmax(np.abs(normal)))
    if abs(normal[k]) >= np.cos(np.radians(SNAP_DEG)):
        if k == 2:  # z up
            a, b, up = _axis(0), _axis(1), _axis(2)
            la, lb, lup, seen = "x", "y", "z, up", "from +z"
        elif k == 1:  # y down (camera convention)
            a, b, up = _axis(0), _axis(2), _axis(1, -1.0)
            la, lb, lup, seen = "x", "z", "-y, up", "from -y"
        else:
            a, b, up = _axis(1), _axis(2), _axis(0)
            la, lb, lup, seen = "y", "z", "x", "from +x"
        top = View(a, b, la + u, lb + u, f"top view ({seen})")
        h, hl = _side_horizontal(xyz, a, b, la + u, lb + u)
        return top, View(h, up, hl, lup + u, "side view")
    pcs = []
    for v in vt:  # sign: the largest component positive, so labels read "+x"-ish
        pcs.append(v if v[np.argmax(np.abs(v))] > 0 else -v)
    a, b = pcs[0], pcs[1]
    up = np.cross(a, b)  # right-handed: the top view is seen from +PC3
    top = View(a, b, f"PC1 = {_label(a)}{u}", f"PC2 = {_label(b)}{u}",
               "top view (principal plane of the ground truth)")
    side = View(a, up, f"PC1 = {_label(a)}{u}", f"PC3 = {_label(up)}{u}", "side view")
    return top, side


def _keyframe_indices(mask, n: int) -> np.ndarray:
    if mask is None:
        return np.zeros(0, np.int64)
    m = np.asarray(mask, dtype=bool).reshape(-1)
    if len(m) != n:
        raise ValueError(f"keyframe_mask has {len(m)} entries for {n} estimated poses")
    return np.nonzero(m)[0]


def plot_data(est_stamps, est_poses, gt_stamps=None, gt_poses=None, keyframe_mask=None,
              max_diff_ns: int = DEFAULT_MAX_DIFF_NS, offset_ns: int = 0,
              align: str = "sim3", units: str = "model units") -> PlotData:
    """Everything :func:`plot_evaluation` draws, without matplotlib.

    With ground truth, the association (:func:`~.trajectory.associate`) and the alignment
    of the associated positions (:func:`~.trajectory.align_positions`, Sim(3) by default)
    are applied to *all* estimated centres, so the drawn estimate is the aligned one. Fewer than
    3 associated poses (or a degenerate fit): the estimate alone, with a ``note`` saying why.
    ``align``: 'sim3' (a monocular estimate: the scale is fitted) or 'se3' (an estimate in
    metres: the scale is kept, so the drawing shows its metric error); ``units``: the
    estimate's units, for the views without ground truth."""
    est_t = np.asarray(est_stamps, dtype=np.int64).reshape(-1)
    est_p = np.asarray(est_poses, dtype=np.float64).reshape(-1, 4, 4)
    if len(est_t) != len(est_p):
        raise ValueError(f"{len(est_t)} estimate stamps for {len(est_p)} poses")
    est_xyz = est_p[:, :3, 3]
    kf = _keyframe_indices(keyframe_mask, len(est_p))
    empty = np.zeros(0, np.int64)
    note = ""
    if gt_poses is not None and gt_stamps is not None:
        gt_t = np.asarray(gt_stamps, dtype=np.int64).reshape(-1)
        gt_p = np.asarray(gt_poses, dtype=np.float64).reshape(-1, 4, 4)
        if len(gt_t) != len(gt_p):
            raise ValueError(f"{len(gt_t)} ground-truth stamps for {len(gt_p)} poses")
        gt_xyz = gt_p[:, :3, 3]
        ei, gi = associate(est_t, gt_t, max_diff_ns, offset_ns)
        try:
            sim = align_positions(est_xyz[ei], gt_xyz[gi], align)
        except ValueError as exc:
            note = (f"ground truth not drawn: {len(ei)} pose(s) associate within "
                    f"{max_diff_ns / 1e6:g} ms ({exc})")
        else:
            aligned = sim.apply_points(est_xyz)
            errors = np.linalg.norm(aligned[ei] - gt_xyz[gi], axis=1)
            top, side = view_axes(gt_xyz, unit="m")
            t0 = est_t[0] if len(est_t) else 0
            return PlotData(aligned, gt_xyz, sim, ei, gi, errors, (est_t[ei] - t0) / 1e9,
                            top, side, kf, align=align, units="m")
    top, side = view_axes(est_xyz, unit="m" if units == "m" else "", camera_world=True)
    return PlotData(est_xyz, None, None, empty, empty, np.zeros(0), np.zeros(0), top, side, kf,
                    note, align=align, units=units)


def _draw_view(ax, view: View, data: PlotData, est2d: np.ndarray, gt2d: Optional[np.ndarray],
               stretch: bool = False):
    if gt2d is not None and len(gt2d):
        ax.plot(gt2d[:, 0], gt2d[:, 1], "-", color="0.6", lw=3.0, label="ground truth",
                zorder=1)
    label = f"estimate ({data.alignment_label})" if data.alignment is not None else "estimate"
    if len(est2d):
        ax.plot(est2d[:, 0], est2d[:, 1], "-", color="tab:blue", lw=1.2, label=label, zorder=2)
        if len(data.keyframes):
            k = est2d[data.keyframes]
            ax.plot(k[:, 0], k[:, 1], "o", ms=3, color="tab:orange", label="keyframes",
                    zorder=3)
        ax.plot(est2d[0, 0], est2d[0, 1], "^", ms=9, color="tab:green", label="start",
                zorder=4)
        ax.plot(est2d[-1, 0], est2d[-1, 1], "s", ms=7, color="tab:red", label="end", zorder=4)
    ax.set_xlabel(view.xlabel)
    ax.set_ylabel(view.ylabel)
    title = view.title
    pts = est2d if gt2d is None or not len(gt2d) else np.concatenate([est2d, gt2d])
    h_span = float(np.ptp(pts[:, 0])) if len(pts) else 0.0
    v_span = float(np.ptp(pts[:, 1])) if len(pts) else 0.0
    if stretch and h_span > 0 and v_span < FLAT * h_span:
        # a flat side view at equal scale is a line: stretch the height, at most 1/(2 MIN_HALF)
        half = max(0.6 * v_span, MIN_HALF * h_span)
        mid = 0.5 * (pts[:, 1].max() + pts[:, 1].min())
        ax.set_ylim(mid - half, mid + half)
        title += " (height stretched, not to scale)"
    else:
        ax.set_aspect("equal", adjustable="datalim")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)


def _draw_ate(ax, data: PlotData):
    e, t = data.ate_errors, data.ate_time_s
    ax.plot(t, e, "-", color="tab:blue", lw=1.0, label="ATE per pose")
    if len(data.keyframes):
        pos = {int(i): k for k, i in enumerate(data.est_idx)}
        kk = [pos[int(i)] for i in data.keyframes if int(i) in pos]
        ax.plot(t[kk], e[kk], "o", ms=3, color="tab:orange", label="keyframes")
    rmse = float(np.sqrt(np.mean(e ** 2)))
    ax.axhline(rmse, color="tab:red", ls="--", lw=1.0, label=f"RMSE {rmse:.4g} m")
    ax.set_xlabel("time since the first estimate (s)")
    ax.set_ylabel("translation error (m)")
    how = (f"Sim(3) alignment (scale {data.alignment.scale:.4g})" if data.align == "sim3" else
           "SE(3) alignment (metric scale, no scale fit)" if data.align == "se3" else
           "no alignment")
    ax.set_title(f"ATE after {how}: "
                 f"{len(e)} associated poses, RMSE {rmse:.4g} m, max {float(e.max()):.4g} m",
                 fontsize=10)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)


def plot_evaluation(path, est_stamps, est_poses, gt_stamps=None, gt_poses=None,
                    keyframe_mask=None, title: str = "",
                    max_diff_ns: int = DEFAULT_MAX_DIFF_NS, offset_ns: int = 0,
                    align: str = "sim3", dpi: int = 100,
                    units: str = "model units") -> PlotData:
    """Write ONE PNG to ``path`` and return the :class:`PlotData` it drew.

    ``est_stamps`` / ``gt_stamps``: int ns (N,) / (M,); ``est_poses`` / ``gt_poses``: 4x4 c2w.
    With ground truth: the top and side views of the ground truth (grey) and of the estimate
    Sim(3)-aligned onto it (blue), and below them the ATE per associated pose over time with
    its RMSE. Without it (or if fewer than 3 poses associate): the estimate alone in its own
    views. ``keyframe_mask`` (N,) bool marks keyframes with orange dots. ``max_diff_ns`` /
    ``offset_ns``: the association, as :func:`~.trajectory.associate`. ``align``: the
    alignment drawn ('sim3', or 'se3' for an estimate in metres), named in the legend, the
    ATE panel's title and the heading; ``units``: the estimate's. Views: see the module
    docstring. RuntimeError (install hint) without matplotlib."""
    plt = require_matplotlib()
    data = plot_data(est_stamps, est_poses, gt_stamps, gt_poses, keyframe_mask, max_diff_ns,
                     offset_ns, align, units)
    if data.gt_xyz is not None:
        fig = plt.figure(figsize=(13, 10))
        grid = fig.add_gridspec(2, 2, height_ratios=(3, 2))
        top, side = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
        _draw_ate(fig.add_subplot(grid[1, :]), data)
    else:
        fig, (top, side) = plt.subplots(1, 2, figsize=(13, 6))
    try:
        _draw_view(top, data.top, data, data.top_est, data.top_gt)
        _draw_view(side, data.side, data, data.side_est, data.side_gt, stretch=True)
        top.legend(loc="best", fontsize=8)
        heading = title or "trajectory"
        if data.note:
            heading += f"\n{data.note}"
        elif data.gt_xyz is None:
            heading += (f"\n(no ground truth: the estimate in the first camera's frame, "
                        f"{data.units})")
        else:
            heading += f"\n(the estimate {data.alignment_label}, in the ground truth's world)"
        fig.suptitle(heading, fontsize=12)
        fig.tight_layout()
        fig.savefig(path, dpi=dpi, metadata={"Software": PNG_SOFTWARE})
    finally:
        plt.close(fig)
    return data

