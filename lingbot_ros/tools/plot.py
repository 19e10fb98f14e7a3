"""Trajectory plot (PNG): a top view and a side view, with ground truth when given."""
from __future__ import annotations

from typing import Optional

import numpy as np


def plot_trajectory(path, centres: np.ndarray, gt_centres: Optional[np.ndarray] = None,
                    title: str = "") -> None:
    """Camera centres (N, 3) in the first camera's optical frame (x right, y down, z forward).

    Needs matplotlib (``pip install matplotlib``); raises RuntimeError saying so otherwise.
    """
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError("the trajectory plot needs matplotlib: pip install matplotlib") from exc
    fig, (top, side) = plt.subplots(1, 2, figsize=(11, 5))
    for ax, (i, j), labels in ((top, (0, 2), ("x (right)", "z (forward)")),
                               (side, (2, 1), ("z (forward)", "y (down)"))):
        if gt_centres is not None and len(gt_centres):
            ax.plot(gt_centres[:, i], gt_centres[:, j], "-", color="0.6", label="ground truth")
        ax.plot(centres[:, i], centres[:, j], "-", color="tab:blue", label="estimate")
        if len(centres):
            ax.plot(centres[0, i], centres[0, j], "o", color="tab:green", label="start")
        ax.set_xlabel(labels[0])
        ax.set_ylabel(labels[1])
        ax.set_aspect("equal", adjustable="datalim")
        ax.grid(True, alpha=0.3)
    side.invert_yaxis()  # y points down in the optical frame
    top.legend(loc="best")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
