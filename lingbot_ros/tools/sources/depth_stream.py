"""Aligned sensor depth beside a frame source, for the metric scale (``--scale depth``).

A :class:`DepthStream` gives, for a colour frame's stamp, the depth image nearest in stamp
(:meth:`DepthStream.nearest`) as a :class:`DepthReading` ``(stamp_ns, image, encoding)``;
whether it is close enough is the scale estimator's decision (``scale.depth_max_dt_s``,
:class:`lingbot_ros.scale.DepthSource`), so a far one is counted there as ``out_of_sync``.

* :class:`DepthFileList` -- depth image files with their stamps (a dataset's index), decoded
  by a reader the dataset layout gives (:mod:`lingbot_ros.tools.sources.datasets.depth`);
* ``BagDepthStream`` (:mod:`lingbot_ros.tools.sources.bag`) -- a depth topic of a bag.

A depth image that cannot be read is skipped and counted by reason (``stats``), never fatal.
"""
from __future__ import annotations

import bisect
import logging
from collections import Counter
from pathlib import Path
from typing import Callable, NamedTuple, Optional, Sequence

import numpy as np

__all__ = ["DepthReading", "DepthStream", "DepthFileList"]

log = logging.getLogger("lingbot_ros.frame_sources")


class DepthReading(NamedTuple):
    stamp_ns: int
    image: np.ndarray  # (H, W)
    encoding: str  # 16UC1 / mono16 (mm) or 32FC1 (m)


class DepthStream:
    """Base: ``nearest(stamp_ns)`` -> the depth image nearest in stamp, or None (none at
    all, or the nearest could not be read: counted in ``stats`` by reason)."""

    description: str = "depth"

    def __init__(self) -> None:
        self.stats: Counter = Counter()

    def nearest(self, stamp_ns: int) -> Optional[DepthReading]:  # pragma: no cover - abstract
        raise NotImplementedError

    def skip(self, reason: str, message: str) -> None:
        self.stats[reason] += 1
        log.warning("depth skipped (%s): %s", reason, message)


class DepthFileList(DepthStream):
    """Depth image files with their stamps (sorted here); ``reader`` decodes one file to
    ``(image, encoding)``. The last image read is kept (a colour stream at the depth's rate
    asks for each once)."""

    def __init__(self, entries: Sequence[tuple[int, Path]],
                 reader: Callable[[Path], tuple[np.ndarray, str]], description: str) -> None:
        super().__init__()
        ordered = sorted((int(s), Path(p)) for s, p in entries)
        self.stamps = [s for s, _ in ordered]
        self.paths = [p for _, p in ordered]
        self._reader = reader
        self.description = description
        self._cached: Optional[tuple[int, Optional[DepthReading]]] = None

    def __len__(self) -> int:
        return len(self.stamps)

    def nearest(self, stamp_ns: int) -> Optional[DepthReading]:
        if not self.stamps:
            return None
        i = bisect.bisect_left(self.stamps, int(stamp_ns))
        near = [j for j in (i - 1, i) if 0 <= j < len(self.stamps)]
        j = min(near, key=lambda k: abs(self.stamps[k] - int(stamp_ns)))
        if self._cached is not None and self._cached[0] == j:
            return self._cached[1]
        path = self.paths[j]
        try:
            image, encoding = self._reader(path)
            reading: Optional[DepthReading] = DepthReading(self.stamps[j], image, encoding)
        except FileNotFoundError:
            self.skip("missing_file", f"{path} does not exist")
            reading = None
        except (OSError, ValueError) as err:
            self.skip("unreadable", str(err))
            reading = None
        self._cached = (j, reading)
        return reading
