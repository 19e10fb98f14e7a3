"""Atomic file replacement, shared by the trajectory (TUM) and point map (PLY) writers.

A reader of the target (evo, a viewer, a tail of the folder) sees either the old file or the
new one, never a half-written one; a save never writes through a link or into a FIFO that
happens to carry the target's name; and, given the writer's header (``replaces``), it never
replaces a file that writer did not write (a params file, ``authorized_keys``...).
"""
from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path
from typing import Optional, Union

from .file_rules import kind_of

__all__ = ["PathLike", "write_atomic", "write_new_file", "check_replaceable"]

PathLike = Union[str, os.PathLike]


def _starts_with(path: Path, prefix: bytes) -> bool:
    """Whether the regular file ``path`` starts with ``prefix``: opened without following a
    link or blocking (a FIFO swapped in meanwhile is refused), only ``len(prefix)`` bytes
    read."""
    flags = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
             | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        head = b""
        while len(head) < len(prefix):
            chunk = os.read(fd, len(prefix) - len(head))
            if not chunk:
                break
            head += chunk
        return head == prefix
    finally:
        os.close(fd)


def check_replaceable(path: PathLike, replaces: Optional[bytes] = None) -> None:
    """FileExistsError (the reason in ``strerror``) unless ``path`` is absent or a regular
    file that may be replaced: one starting with ``replaces`` (a writer's own header) when
    given. A symlink, FIFO, device or folder is never replaced nor followed."""
    path = Path(path)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise FileExistsError(errno.EEXIST, f"it exists and is {kind_of(mode)}, not a regular "
                              "file: not replaced", str(path))
    if replaces is not None and not _starts_with(path, replaces):
        first = replaces.split(b"\n", 1)[0].decode("ascii", "replace")
        raise FileExistsError(errno.EEXIST, f"it exists and was not written by lingbot_ros "
                              f"(its first line is not {first!r}): not replaced", str(path))


def write_atomic(path: PathLike, data: bytes, replaces: Optional[bytes] = None) -> Path:
    """Write ``data`` to ``path`` atomically: a new temporary file beside ``path`` (exclusive,
    not through a link), fsynced, then renamed over ``path``.

    An existing ``path`` must be a regular file: a symlink, FIFO, device or folder there is
    neither followed nor replaced (FileExistsError). With ``replaces`` (the writer's header,
    which ``data`` starts with), an existing file is replaced only if it starts with it too:
    a file the writer did not write is never replaced (FileExistsError, checked before a byte
    is written and again just before the rename). On any failure (writing, renaming) no
    temporary file is left behind and ``path`` is as it was. A missing folder raises
    FileNotFoundError."""
    path = Path(path)
    if replaces is not None and not bytes(data[:len(replaces)]) == replaces:
        raise ValueError("the data does not start with the header it replaces by")
    check_replaceable(path, replaces)  # a refusal writes nothing
    tmp = path.with_name(f"{path.name}.{secrets.token_hex(6)}.tmp")
    write_new_file(tmp, data, 0o666)  # exclusive: nobody else's file is touched
    try:
        # again last, just before the rename: the narrowest window
        check_replaceable(path, replaces)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def write_new_file(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to the new file ``path`` (exclusive: never an existing file, never
    through a link) and fsync it; on a failure after it was created it is removed again."""
    view = memoryview(data).cast("B")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        try:
            while view:  # os.write may write less than asked (a size limit, a signal)
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        try:
            os.unlink(path)
        except OSError:
            pass
        raise
