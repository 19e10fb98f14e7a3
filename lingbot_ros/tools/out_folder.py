"""The check every tool with an ``--out`` runs BEFORE its work: can the outputs be written,
and would they replace only files we wrote?

    check_out_folder(args.out, [OurFile("trajectory.tum", TUM_BEGINS), ...])

Refused (:class:`OutRefused`, an ``OSError`` whose ``str()`` is the one-line reason) when

- ``--out`` exists and is not a folder (a file, a FIFO, a dangling link), or cannot be
  created (a path under a regular file, ``/proc``, a read-only file system);
- the folder (or, when it does not exist yet, the nearest existing one above it) is not
  writable: a temporary file is created and removed there, so this holds for root too;
- an output the run will write exists and is not a regular file (a symlink, FIFO, folder or
  device is never replaced), or is a regular file that does not begin with the header our
  writer gives it (a file we did not write is never replaced).

Only regular files are opened, without following a link or blocking on a FIFO, and only
their first bytes are read. Nothing is created: a refused run leaves the disk as it was.
"""
from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Union

from ..geometry.atomic_file import check_replaceable, write_atomic
from ..geometry.file_rules import FileRefused, FileRoot, kind_of

__all__ = ["OurFile", "OurFolder", "OutRefused", "check_out_folder", "check_out_file",
           "check_our_folder", "json_report_begins", "write_json_report", "HEAD_BYTES"]

HEAD_BYTES = 4096  # what is read of an existing output to tell whether we wrote it


class OutRefused(FileRefused):
    """An output folder or file the run must not use; ``str(exc)`` is the reason."""


@dataclass(frozen=True)
class OurFile:
    """One file a tool writes: ``name`` (relative to the output folder, ``/`` between
    parts), how our writer begins it (``begins``), and optionally ``mark``: bytes our writer
    puts within the first :data:`HEAD_BYTES` (a PNG's ``Software`` text)."""
    name: str
    begins: bytes
    mark: bytes = b""


@dataclass(frozen=True)
class OurFolder:
    """A folder a tool writes inside a unit's folder (``lingbot-ros-eval --save-maps``'s
    ``place_map``): ``name``, and ``check(path)``, which answers for an existing folder
    whether it is one of ours (returns) or not (raises ``FileExistsError`` or ``ValueError``
    with the reason: e.g. ``loop/map_folder.check_replaceable``)."""
    name: str
    check: Callable[[Path], object]


def _head(path: Path) -> bytes:
    """The first bytes of the regular file ``path`` (not through a link, never blocking)."""
    flags = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
             | getattr(os, "O_CLOEXEC", 0))
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OutRefused(f"{path} is {kind_of(st.st_mode)}, not a regular file", path)
        return os.read(fd, HEAD_BYTES)
    finally:
        os.close(fd)


def _probe_writable(folder: Path, what: str, given) -> None:
    """Create and remove a temporary file in ``folder``: the one test that holds for root
    (permission bits do not stop root; a read-only mount or /proc does)."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".lingbot_ros_probe.", dir=folder)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise OutRefused(f"{what} {given}: cannot write in {folder}: "
                         f"{exc.strerror or exc}", given) from None


def _resolve(given, what: str) -> Path:
    try:
        return FileRoot(None).resolve(str(given))  # names checked; links followed
    except FileRefused as exc:
        raise OutRefused(f"{what} {given!r}: {exc}", given) from None


def _folder(given, what: str, folder: Optional[Path] = None) -> Path:
    """The output folder's absolute path once checked: a folder we can write in, or absent
    below a folder we can write in. ``folder``: the folder of the file ``given``."""
    of_file = folder is not None
    folder = folder or _resolve(given, what)
    probe = folder
    while True:
        try:
            st = os.stat(probe)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):  # ENOTDIR: a file above it
                probe = probe.parent
                continue
            raise OutRefused(f"{what} {given}: {exc.strerror or exc}", given) from None
        if not stat.S_ISDIR(st.st_mode):
            if probe == folder and not of_file:
                raise OutRefused(f"{what} {given} is {kind_of(st.st_mode)}, not a folder",
                                 given)
            raise OutRefused(f"{what} {given}: cannot be created: {probe} is "
                             f"{kind_of(st.st_mode)}, not a folder", given)
        break
    _probe_writable(probe, what, given)
    return folder


def _check_file(path: Path, spec: OurFile, what: str, given) -> None:
    """The writers' own rule (:func:`~lingbot_ros.geometry.atomic_file.check_replaceable`:
    absent, or a regular file beginning with their header), and ``spec.mark`` besides."""
    try:
        check_replaceable(path, spec.begins)
        if spec.mark and os.path.lexists(path) and spec.mark not in _head(path):
            raise FileExistsError(errno.EEXIST, "it exists and was not written by lingbot_ros "
                                  f"(no {spec.mark!r} in its header): not replaced")
    except FileExistsError as exc:
        raise OutRefused(f"{what} {given}: {spec.name}: {exc.strerror}; move it away or "
                         f"choose another {what}", given) from None
    except OSError as exc:  # unreadable: permissions, a file swapped meanwhile
        raise OutRefused(f"{what} {given}: {spec.name} cannot be checked: "
                         f"{exc.strerror or exc}", given) from None


def check_out_folder(given, files: Iterable[OurFile], what: str = "--out") -> Path:
    """Check the output folder ``given`` and each of ``files`` in it before a run (see the
    module docstring); returns the folder's absolute path. ``what`` names the option in the
    messages. Raises :class:`OutRefused` with the reason."""
    folder = _folder(given, what)
    for spec in files:
        path = folder / spec.name
        for parent in reversed(path.relative_to(folder).parents[:-1]):
            try:
                mode = os.lstat(folder / parent).st_mode
            except FileNotFoundError:
                break
            if not stat.S_ISDIR(mode):
                raise OutRefused(f"{what} {given}: {parent} is {kind_of(mode)}, not a "
                                 "folder", given)
        _check_file(path, spec, what, given)
    return folder


def check_out_file(given, begins: bytes, what: str = "--out") -> Path:
    """An ``--out`` that names one file (a JSON report): its folder can be written in (or
    created), and the file is absent or a regular file beginning with ``begins``. Returns
    its absolute path; OutRefused otherwise."""
    path = _resolve(given, what)
    _folder(given, what, path.parent)
    _check_file(path, OurFile(path.name, begins), what, given)
    return path


def json_report_begins(tool: str) -> bytes:
    """How :func:`write_json_report` begins ``tool``'s report: how it is known as ours."""
    return b'{\n  "written_by": "' + tool.encode() + b'"'


def write_json_report(path, tool: str, report: dict) -> Path:
    """``report`` as JSON (indent 2), ``"written_by": tool`` first, written atomically."""
    text = json.dumps({"written_by": tool, **report}, indent=2, default=str) + "\n"
    return write_atomic(path, text.encode(), replaces=json_report_begins(tool))


def _check_subfolder(path: Path, spec: OurFolder, sub: str, what: str, given) -> None:
    """``sub/spec.name`` must be a folder (not a link) that ``spec.check`` calls ours."""
    name = f"{sub}/{spec.name}"
    try:
        mode = os.lstat(path).st_mode
    except OSError as exc:  # removed meanwhile, unreadable
        raise OutRefused(f"{what} {given}: {name} cannot be checked: "
                         f"{exc.strerror or exc}", given) from None
    if not stat.S_ISDIR(mode):
        raise OutRefused(f"{what} {given}: {name} is {kind_of(mode)}, not a folder: it is "
                         "never replaced", given)
    try:
        spec.check(path)
    except (FileExistsError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise OutRefused(f"{what} {given}: {name}: {reason}; move it away or choose "
                         f"another {what}", given) from None
    except OSError as exc:
        raise OutRefused(f"{what} {given}: {name} cannot be checked: "
                         f"{exc.strerror or exc}", given) from None


def check_our_folder(given, sub: str, files: Mapping[str, Union[OurFile, OurFolder]],
                     what: str = "--out") -> None:
    """A folder ``sub`` of the output folder that the run replaces WHOLE (a unit's folder of
    ``lingbot-ros-eval``): absent, or a folder (not a link) holding only ``files`` (by name),
    each ours: an :class:`OurFile` a regular file beginning as ours, an :class:`OurFolder` a
    folder its ``check`` accepts. Call after :func:`check_out_folder`."""
    folder = FileRoot(None).resolve(str(given)) / sub
    try:
        mode = os.lstat(folder).st_mode
    except FileNotFoundError:
        return
    except NotADirectoryError:
        raise OutRefused(f"{what} {given}: {sub} cannot be created: a folder above it is a "
                         "file", given) from None
    if not stat.S_ISDIR(mode):
        raise OutRefused(f"{what} {given}: {sub} is {kind_of(mode)}, not a folder: it is "
                         "never replaced", given)
    for entry in sorted(os.listdir(folder)):
        spec = files.get(entry)
        if spec is None:
            raise OutRefused(f"{what} {given}: {sub}/{entry} was not written by lingbot_ros "
                             f"and {sub} would be replaced whole; move it away or choose "
                             f"another {what}", given)
        if isinstance(spec, OurFolder):
            _check_subfolder(folder / entry, spec, sub, what, given)
            continue
        _check_file(folder / entry, OurFile(f"{sub}/{entry}", spec.begins, spec.mark),
                    what, given)
