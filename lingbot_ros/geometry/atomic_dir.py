"""Atomic folder replacement, shared by our marked folders (``marked_folder.py``: the stream
snapshots and the stored place maps) and the fleet's output folder
(``tools/eval/fleet/tree.py``); files are ``atomic_file.py``'s.

A folder is written complete under a temporary name beside its target, then put at the target
in one step, so a reader sees the old folder or the new one, never half of one:

    old = replace_dir(new, target, aside, replaces=True)   # an exchange (renameat2)
    fsync_dir(target.parent)                               # the caller's choice
    if old is not None:
        shutil.rmtree(old)                                 # the old folder, under new's name

``replaces`` is the caller's answer, from its own checks, to "is there a folder at the
target that I may replace?": with ``True`` that folder is swapped out by one
``renameat2(RENAME_EXCHANGE)`` (Linux >= 3.15, glibc >= 2.28; through ctypes), or, where the
exchange is not available, renamed to ``aside`` and the new one renamed in (two renames: a
kill between them leaves the old folder at ``aside`` only); with ``False`` the new folder is
renamed in by one ``rename``, which replaces nothing but an empty folder (a file, a link or a
full folder at the target makes it fail: ``OSError``).
What the target may be replaced for (our marker, our digest) is the caller's rule.
"""
from __future__ import annotations

import ctypes
import errno
import os
import secrets
import shutil
from pathlib import Path
from typing import Optional

__all__ = ["replace_dir", "exchange_supported", "fsync_dir"]

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _libc_renameat2():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                   ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_RENAMEAT2 = _libc_renameat2()


def _renameat2(src: Path, dst: Path, flags: int) -> bool:
    """``renameat2(src, dst, flags)``: True if done, False where the call (or the flag) is
    not available here; other errors raise ``OSError``."""
    if _RENAMEAT2 is None:
        return False
    rc = _RENAMEAT2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(dst))


def exchange_supported(folder: Path) -> bool:
    """Whether ``renameat2(RENAME_EXCHANGE)`` works in ``folder`` (tried on two scratch
    folders)."""
    a = Path(folder) / f".lingbot_xchg.{secrets.token_hex(6)}.a"
    b = a.with_suffix(".b")
    a.mkdir()
    try:
        b.mkdir()
        return _renameat2(a, b, _RENAME_EXCHANGE)
    finally:
        shutil.rmtree(a, ignore_errors=True)
        shutil.rmtree(b, ignore_errors=True)


def replace_dir(new: Path, target: Path, aside: Path, replaces: bool) -> Optional[Path]:
    """Put the complete folder ``new`` at ``target`` in one step (module docstring). Returns
    the folder that was at ``target``, now under another name (``new`` after an exchange,
    else ``aside``), for the caller to remove; None when nothing was replaced."""
    if replaces:
        if _renameat2(new, target, _RENAME_EXCHANGE):
            return new  # the old folder, under the new one's temporary name
        os.rename(target, aside)  # no exchange here
        os.rename(new, target)
        return aside
    os.rename(new, target)  # a folder over an empty folder only: a full one or a file refuses
    return None


def fsync_dir(path: Path) -> None:
    """fsync the folder ``path`` (its entries: a rename in it is durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
