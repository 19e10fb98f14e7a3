"""The rules for every path a caller gives (a service request, a command-line argument):
confined to a root, regular files only, sizes checked before reading.

    root = FileRoot(Path("~/.ros/lingbot_ros").expanduser())   # files.root
    target = root.resolve("runs/a.tum")       # FileRefused (an OSError) says why not
    blob = read_regular(target, max_bytes=1 << 20)

A path from a caller is hostile: ``FileRoot.resolve`` refuses one that leaves the root
(``..``, an absolute path elsewhere, a symlink whose target is elsewhere) and names that are
not text (NUL, non-UTF-8, over the system's limits). ``read_regular`` opens without
following a final symlink and without blocking (a FIFO never freezes the caller), checks
what it opened is a regular file, and refuses one over ``max_bytes`` *before* reading it
(the refusal does not tell the file's size).

Standard library only, like the rest of ``geometry/``.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Optional, Union

__all__ = ["FileRefused", "FileRoot", "kind_of", "check_regular", "read_regular"]

PathLike = Union[str, os.PathLike]

# The longest path we accept from a caller (Linux's PATH_MAX is 4096; a name 255 bytes).
MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255


class FileRefused(OSError):
    """A caller's path broke a rule (outside the root, not a regular file, too large, not a
    name): ``str(exc)`` is the reason, fit for a service's answer."""

    def __init__(self, reason: str, path: Optional[PathLike] = None) -> None:
        super().__init__(errno.EPERM, reason)
        self.reason, self.path = reason, None if path is None else str(path)

    def __str__(self) -> str:
        return self.reason


def kind_of(mode: int) -> str:
    """'a regular file', 'a folder', 'a symlink', 'a FIFO', ... for ``st_mode``."""
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "something else"


def _check_name(given: str) -> None:
    if not given:
        raise FileRefused("no path given")
    if "\x00" in given:
        raise FileRefused("the path contains a NUL character")
    try:
        raw = given.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates (undecodable bytes from a command line)
        raise FileRefused("the path is not valid UTF-8") from None
    if len(raw) > MAX_PATH_BYTES:
        raise FileRefused(f"the path is {len(raw)} bytes long (at most {MAX_PATH_BYTES})")
    for part in Path(given).parts:
        if len(part.encode("utf-8")) > MAX_NAME_BYTES:
            raise FileRefused(f"a name in the path is over {MAX_NAME_BYTES} bytes")


class FileRoot:
    """Where a caller's paths may lead: relative paths resolve under ``root``; an absolute
    path, or a symlink, that resolves outside it is refused. ``root=None`` (``files.root:
    /``) confines nothing (names are still checked)."""

    def __init__(self, root: Optional[PathLike]) -> None:
        self.root = None if root is None else Path(os.path.realpath(root))

    @property
    def confined(self) -> bool:
        return self.root is not None and self.root != Path("/")

    def resolve(self, given: str) -> Path:
        """The absolute, symlink-free path ``given`` names (its last part may not exist
        yet), or ``FileRefused`` with the reason."""
        _check_name(given)
        path = Path(os.path.expanduser(given)) if given.startswith("~") else Path(given)
        if not path.is_absolute():
            path = (self.root or Path.cwd()) / path
        resolved = Path(os.path.realpath(path))  # every symlink followed, '..' removed
        if self.confined and resolved != self.root and self.root not in resolved.parents:
            raise FileRefused(f"{given!r} resolves to {resolved}, outside files.root "
                              f"{self.root}", given)
        return resolved


def check_regular(path: PathLike) -> os.stat_result:
    """The ``lstat`` of ``path`` if it is a regular file (not a symlink, FIFO, device or
    folder); ``FileRefused`` otherwise, ``FileNotFoundError`` if it does not exist."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise FileRefused(f"{path} is {kind_of(st.st_mode)}, not a regular file", path)
    return st


def read_regular(path: PathLike, max_bytes: int) -> bytes:
    """The whole of the regular file ``path``, at most ``max_bytes`` long: opened without
    following a final symlink and without blocking (O_NONBLOCK: a FIFO is refused, never
    waited on), then checked on the open descriptor before a byte is read.

    ``FileRefused`` for a symlink, FIFO, device, folder or a file over ``max_bytes``;
    ``FileNotFoundError`` and the other ``OSError`` as the system raises them."""
    flags = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
             | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW on a symlink
            raise FileRefused(f"{path} is a symlink, not a regular file", path) from None
        if exc.errno == errno.ENXIO:  # a FIFO with no writer, opened O_NONBLOCK for writing
            raise FileRefused(f"{path} is a FIFO, not a regular file", path) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused(f"{path} is {kind_of(st.st_mode)}, not a regular file", path)
        if st.st_size > max_bytes:
            raise FileRefused(f"{path} is larger than the {max_bytes} bytes allowed here",
                              path)
        chunks, left = [], st.st_size
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        if os.read(fd, 1):  # grew while being read: not what was checked
            raise FileRefused(f"{path} changed while it was read", path)
        return b"".join(chunks)
    finally:
        os.close(fd)
