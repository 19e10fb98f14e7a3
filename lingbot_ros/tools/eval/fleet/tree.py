"""The output folder of a fleet run: each unit's files appear at once, in one step.

``OUT/<sequence>/<policy>/`` is written as ``OUT/.fleet/staging/<unit>.<worker>.<token>/``
and put in place when complete by one rename (or one exchange with an earlier attempt's
folder: ``geometry/atomic_dir.py``), so a reader (or a resumed driver) never sees half a
unit. A second driver on the same folder is refused (a lock held while the run lasts).
"""
from __future__ import annotations

import fcntl
import os
import secrets
import shutil
from pathlib import Path

from ....geometry.atomic_dir import replace_dir

STATE_DIR = ".fleet"


class OutputBusy(RuntimeError):
    """Another driver holds the output folder."""


class OutputTree:
    """Paths and commits under one output folder (shared by the driver and every worker)."""

    def __init__(self, root):
        self.root = Path(root)
        self.state = self.root / STATE_DIR
        self._lock_fd = None

    def unit_dir(self, key: str) -> Path:
        return self.root / key

    def new_staging(self, key: str, worker: str) -> Path:
        """A fresh folder for one attempt of unit ``key``; its name says who writes it."""
        tag = "".join(c if c.isalnum() or c in "-_" else "-" for c in worker)
        path = (self.state / "staging" /
                f"{key.replace('/', '__')}.{tag}.{os.getpid()}.{secrets.token_hex(4)}")
        path.mkdir(parents=True)
        return path

    def commit(self, staging: Path, key: str) -> Path:
        """Put ``staging`` in place of the unit's folder in one step
        (``geometry/atomic_dir.replace_dir``): an earlier attempt's folder is exchanged out
        (or, without the exchange, moved aside to ``.fleet/trash`` first), then removed."""
        final = self.unit_dir(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        aside = self.state / "trash" / f"{staging.name}.old"
        replaces = final.exists()
        if replaces:
            aside.parent.mkdir(parents=True, exist_ok=True)
        old = replace_dir(staging, final, aside, replaces=replaces)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def discard(self, staging: Path) -> None:
        shutil.rmtree(staging, ignore_errors=True)

    def acquire(self) -> None:
        """Hold the folder for this driver; leftovers of a killed run's attempts (staging,
        trash) are removed, since no attempt can still be writing them."""
        self.state.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.state / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputBusy(f"{self.root} is being written by another lingbot-ros-eval "
                             "(its lock is held)") from None
        self._lock_fd = fd
        for leftover in ("staging", "trash"):
            shutil.rmtree(self.state / leftover, ignore_errors=True)

    def drop_snapshots(self) -> None:
        """A fresh run (no --resume): the unit snapshots an earlier run left are never
        continued; they go."""
        shutil.rmtree(self.state / "snapshots", ignore_errors=True)

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
