"""The node's file policy: every path a caller gives (a service request, ``session.resume_from``,
``session.save_on_shutdown``) is confined to ``files.root`` (docs/node.md, Files).

    files = open_files_root(settings.files_root)   # created; FileRefused says why not
    settings, notes = check_snapshot_paths(settings, files)   # at configure, before any frame
    target = write_target(files, request.path)     # ~/save_trajectory, ~/save_map, ~/save_session
    folder = files.resolve(request.path)           # ~/load_session

``files.root`` "" is ``$ROS_HOME/lingbot_ros`` (``ROS_HOME`` defaults to ``~/.ros``); "/"
confines nothing (the node WARNs at configure), and relative paths are then the node's working
directory's. The writers add their own rule: an existing file is replaced only if it is one of
ours (``write_atomic(replaces=...)``), a snapshot folder only if it is a snapshot.

No rclpy here: the rules are plain functions of the settings and the file system.
At configure the leftovers of a killed save to ``session.save_on_shutdown`` are removed
(``sweep_stale``: our marker, no save holding them).
"""
from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ...geometry.file_rules import FileRefused, FileRoot, kind_of
from ...session import sweep_stale

if TYPE_CHECKING:
    from ..params.declare import Settings

__all__ = ["DEFAULT_ROOT_NAME", "default_files_root", "open_files_root", "write_target",
           "check_snapshot_paths", "unconfined_warning"]

DEFAULT_ROOT_NAME = "lingbot_ros"  # under $ROS_HOME


def default_files_root(environ=os.environ) -> Path:
    """``$ROS_HOME/lingbot_ros``; ``ROS_HOME`` unset or empty is ``~/.ros``, as for ROS's
    own logs."""
    ros_home = environ.get("ROS_HOME") or os.path.join(os.path.expanduser("~"), ".ros")
    return Path(os.path.expanduser(ros_home)) / DEFAULT_ROOT_NAME


def open_files_root(setting: str, environ=os.environ) -> FileRoot:
    """The ``FileRoot`` of ``files.root`` (created, with its parents, if missing): "" is
    ``default_files_root()``, "/" confines nothing. ``FileRefused`` (the reason) when it
    cannot be created or is not a folder."""
    if setting == "/":
        return FileRoot(None)  # relative paths: the node's working directory's
    root = Path(os.path.expanduser(setting)) if setting else default_files_root(environ)
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise FileRefused(f"files.root {str(root)!r} cannot be created: "
                          f"{exc.strerror or exc}") from None
    if not root.is_dir():
        raise FileRefused(f"files.root {str(root)!r} is not a folder")
    return FileRoot(root)


def unconfined_warning(files: FileRoot) -> Optional[str]:
    """The WARN for ``files.root: /`` (None when confined)."""
    if files.confined:
        return None
    return ("files.root is '/': the file services (~/save_trajectory, ~/save_map, "
            "~/save_session, ~/load_session, ~/load_map, ~/localize_in_map) take any path "
            "the node's user can reach, from any peer on the DDS network (docs/node.md, "
            "Files); set files.root to a folder to confine them")


def _literal(files: FileRoot, given: str) -> Path:
    """``given`` as an absolute path, no link followed (``~`` expanded; relative: under the
    root, or the working directory when unconfined)."""
    path = Path(os.path.expanduser(given)) if given.startswith("~") else Path(given)
    if not path.is_absolute():
        path = (files.root or Path.cwd()) / path
    return path


def write_target(files: FileRoot, given: str) -> Path:
    """The absolute path a save request names: its folder resolved (every link followed,
    confined to the root, existing), its last name kept as given, *not* followed, so the
    writer sees what is there (a symlink, a FIFO: refused, never written through).

    ``FileRefused`` for a path outside the root (``..``, absolute, a link out of it), a name
    that is not text, or one that names a folder (``""``, ``/``, ``..``, a trailing ``/``);
    ``FileNotFoundError`` when its folder does not exist."""
    files.resolve(given)  # the names, and where every link of it leads: the root's rules
    if Path(given).name in ("", ".", "..") or given.endswith(("/", "/.")):
        raise FileRefused(f"{given!r} names a folder, not a file", given)
    literal = _literal(files, given)
    folder = files.resolve(str(literal.parent))
    if not folder.is_dir():
        raise FileNotFoundError(2, f"its folder {folder} does not exist", given)
    return folder / literal.name


def _snapshot_at(path: Path) -> Optional[str]:
    """None if ``path`` is a folder, else what it is ("nothing", "a regular file"...)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "nothing"
    return None if stat.S_ISDIR(mode) else kind_of(mode)


def check_snapshot_paths(settings: Settings, files: FileRoot) -> tuple[Settings, list[str]]:
    """``settings`` with ``session.resume_from`` and ``session.save_on_shutdown`` resolved
    under ``files`` (absolute, links followed), and the notes to log at INFO; ValueError
    (naming the parameter, with the reason) for a path outside the root, a ``resume_from``
    with no snapshot folder there (with ``session.resume_if_present`` nothing there starts
    a new stream instead: a note says so), or a ``save_on_shutdown`` whose folder does not
    exist or cannot be written; the temporary folders a killed save to ``save_on_shutdown``
    left are removed (a note each). Called at configure, before the model is loaded."""
    notes: list[str] = []
    resume, save = settings.resume_from, settings.save_on_shutdown
    if resume:
        try:
            resume_path = files.resolve(resume)
            found = _snapshot_at(resume_path)
        except OSError as exc:
            raise ValueError(f"parameter 'session.resume_from': {_reason(exc)}") from None
        if found == "nothing" and settings.resume_if_present:
            notes.append(f"session.resume_from: no snapshot at {resume_path} yet (a first "
                         "start): a new stream (session.resume_if_present)")
            resume = ""
        elif found is not None:
            hint = (" (a first start? set session.resume_if_present: true to start a new "
                    "stream while nothing is there)" if found == "nothing" else "")
            raise ValueError(f"parameter 'session.resume_from': {found} at {resume_path}, "
                             f"not a snapshot folder{hint}")
        else:
            resume = str(resume_path)
    if save:
        try:
            target = write_target(files, save)
            found = _snapshot_at(target)
        except OSError as exc:
            raise ValueError(f"parameter 'session.save_on_shutdown': {_reason(exc)}") from None
        if found not in (None, "nothing"):
            raise ValueError(f"parameter 'session.save_on_shutdown': {target} is {found}, "
                             "not a snapshot folder: it would not be replaced")
        if not os.access(target.parent, os.W_OK | os.X_OK):
            raise ValueError(f"parameter 'session.save_on_shutdown': its folder "
                             f"{target.parent} is not writable by the node")
        save = str(target)
        for folder in sweep_stale(target):  # a save killed midway (ours: marker, no lock)
            notes.append(f"session.save_on_shutdown: removed {folder}, left by a save that "
                         "did not finish")
    return dataclasses.replace(settings, resume_from=resume, save_on_shutdown=save), notes


def _reason(exc: OSError) -> str:
    if isinstance(exc, FileRefused):
        return str(exc)
    text = exc.strerror or str(exc)
    return f"{text}: {exc.filename}" if exc.filename and str(exc.filename) not in text \
        else text
