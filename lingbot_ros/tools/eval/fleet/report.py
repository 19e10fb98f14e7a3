"""What the driver shows: a progress bar over work units with the frames per second across
all workers, and a summary per worker at the end (units, frames, FPS, retries)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional


@dataclass
class WorkerStats:
    """One worker's account, kept by the driver (the only writer). ``busy_s``: seconds its
    units took as the driver saw them; ``lost``: units it was running when its process
    died; ``failed``: attempts that ended in an error; ``pids``: each (re)start's process."""
    name: str
    node: str = ""
    pids: list = field(default_factory=list)
    units: int = 0
    frames: int = 0
    busy_s: float = 0.0
    failed: int = 0
    lost: int = 0

    @property
    def fps(self) -> Optional[float]:
        return self.frames / self.busy_s if self.busy_s > 0 else None

    def as_dict(self) -> dict:
        return {"worker": self.name, "node": self.node, "pids": self.pids, "units": self.units,
                "frames": self.frames, "busy_s": self.busy_s, "fps": self.fps,
                "failed_attempts": self.failed, "lost_to_worker_death": self.lost}


def worker_table(stats) -> str:
    """The per-worker summary, as Markdown."""
    lines = ["| worker | node | units | frames | FPS | retries (errors / worker died) |",
             "|---|---|---|---|---|---|"]
    for s in stats:
        fps = f"{s.fps:.1f}" if s.fps is not None else ""
        lines.append(f"| {s.name} | {s.node} | {s.units} | {s.frames} | {fps} | "
                     f"{s.failed} / {s.lost} |")
    return "\n".join(lines) + "\n"


class UnitProgress:
    """A bar over units; its postfix is the frames per second over all workers since the
    start (finished units' frames / wall time)."""

    def __init__(self, total: int, disabled: bool, done: int = 0):
        self.t0 = time.perf_counter()
        self.frames = 0
        try:
            from tqdm import tqdm
        except ImportError:
            self.bar = None
            return
        self.bar = tqdm(total=total, initial=done, unit="unit", disable=disabled,
                        dynamic_ncols=True, desc="work units")

    def unit_done(self, frames: int) -> None:
        self.frames += frames
        if self.bar is not None:
            wall = time.perf_counter() - self.t0
            self.bar.set_postfix_str(f"{self.frames / wall:.1f} frames/s" if wall > 0 else "")
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
