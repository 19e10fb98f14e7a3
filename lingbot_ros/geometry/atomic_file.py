"""Atomic file replacement, shared by the trajectory (TUM) and point map (PLY) writers.

A reader of the target (evo, a viewer, a tail of the folder) sees either the old file or the
new one, never a half-written one, and a save never writes through a link or into a FIFO
that happens to carry the target's name.
"""
from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path
from typing import Union

__all__ = ["PathLike", "write_atomic"]

PathLike = Union[str, os.PathLike]


def write_atomic(path: PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically: a new temporary file beside ``path`` (exclusive,
    not through a link), fsynced, then renamed over ``path``.

    An existing ``path`` must be a regular file: a symlink, FIFO, device or folder there is
    neither followed nor replaced (FileExistsError). On any failure (writing, renaming) no
    temporary file is left behind and ``path`` is as it was. A missing folder raises
    FileNotFoundError."""
    path = Path(path)
    view = memoryview(data).cast("B")
    tmp = path.with_name(f"{path.name}.{secrets.token_hex(6)}.tmp")
    flags = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_CLOEXEC", 0))
    fd = os.open(tmp, flags, 0o666)  # exclusive: nobody else's file is touched
    try:
        try:
            while view:  # os.write may write less than asked (a size limit, a signal)
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:  # checked last, just before the rename: the narrowest window
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and not stat.S_ISREG(mode):
            kind = ("a symlink" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode)
                    else "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                    else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "something else")
            raise FileExistsError(errno.EEXIST, f"it exists and is {kind}, not a regular "
                                  "file: not replaced", str(path))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
