"""A plain folder of images (``--format folder``): any layout not published with an index,
or one camera's image folder of a dataset given directly (TUM's ``rgb/``, EuRoC's
``cam0/data/``).

Stamps (:class:`lingbot_ros.tools.sources.files.ImageFolderSource`): ``'filename'`` reads
each name as a time -- seconds with a decimal point (TUM ``1305031102.175304.png``) or an
integer of 16+ digits as nanoseconds (EuRoC ``1403636579763555584.png``); ``'fps'`` stamps
the i-th image (natural order) ``round(i * 1e9 / fps)``; ``'auto'`` is ``'filename'`` when
every name is such a time, else ``'fps'``. No ground truth.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..files import IMAGE_EXTENSIONS, ImageFolderSource
from .common import Dataset, count

__all__ = ["NAME", "LOOKS_FOR", "locate", "missing", "open_folder"]

NAME = "folder"
LOOKS_FOR = "image files"


def locate(path: Path) -> Optional[Path]:
    if path.is_dir() and any(p.suffix.lower() in IMAGE_EXTENSIONS and p.is_file()
                             for p in path.iterdir()):
        return path
    return None


def missing(path: Path) -> str:
    if not path.is_dir():
        return f"{path} is not a folder"
    return f"no image files ({', '.join(IMAGE_EXTENSIONS)}) in {path}"


def open_folder(path: Path, *, stamps: str = "auto", fps: float = 30.0,
                topic: Optional[str] = None) -> Dataset:
    source = ImageFolderSource(path, fps=fps, stamps=stamps)
    how = (f"stamps from file names ({source.name_kind or 'seconds'})"
           if source.stamps == "filename" else f"stamps at {source.fps:g} fps")
    desc = f"image folder {path.resolve().name}: {count(len(source), 'image')}, {how}"
    return Dataset(source, None, NAME, desc, path)
