"""Every image under exactly one counter: ``received`` = ``processed`` + every ``dropped_*``,
``rejected_*`` and ``failed_*`` (docs/node.md, Counters), read from the node's counters
(/diagnostics) or a ``TelemetrySnapshot``."""
from __future__ import annotations

from typing import Mapping

FATES = ("dropped_", "rejected_", "failed_")


def fates(counters: Mapping[str, object]) -> dict[str, int]:
    """The counters that end an image: ``processed`` and the dropped/rejected/failed ones."""
    return {k: int(v) for k, v in counters.items()
            if k == "processed" or k.startswith(FATES)}


def unaccounted(counters: Mapping[str, object]) -> int:
    """Images received and under no counter yet (0 once every image has its fate)."""
    return int(counters.get("received", 0)) - sum(fates(counters).values())


def wait_every_image_counted(probe, received: int, timeout: float = 30.0) -> dict[str, int]:
    """Until /diagnostics counts ``received`` images, each under one counter; returns the
    fates. (Counters only grow: once the sum is reached it stays.)"""
    def settled():
        diag = probe.last_diag()
        ok = int(diag.get("received", 0)) == received and unaccounted(diag) == 0
        return fates(diag) if ok else None

    return probe.wait_until(settled, timeout, lambda: (
        f"{received} images received, each under one counter (last: received "
        f"{probe.last_diag().get('received')}, fates {fates(probe.last_diag())})"))
