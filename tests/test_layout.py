"""The package's shape, as docs/architecture.md states it: files cut by concept stay small
(a file over MAX_LINES is two concepts), and the front ends' folders stay rooms a newcomer
can take in at a glance (at most MAX_MODULES modules each; a bigger one is cut into rooms)."""
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "lingbot_ros"
MAX_LINES = 450
MAX_MODULES = 12
ROOMS = [d for top in ("ros", "tools") for d in [PKG / top, *sorted((PKG / top).rglob("*/"))]
         if d.is_dir() and (d / "__init__.py").is_file()]


def test_no_module_is_over_the_line_budget():
    over = {f.relative_to(PKG).as_posix(): n for f in sorted(PKG.rglob("*.py"))
            if (n := len(f.read_text().splitlines())) > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines (cut them by concept): {over}"


@pytest.mark.parametrize("room", ROOMS, ids=[d.relative_to(PKG).as_posix() for d in ROOMS])
def test_every_front_end_folder_is_a_small_room(room):
    modules = sorted(f.name for f in room.glob("*.py")
                     if f.name not in ("__init__.py", "__main__.py"))
    assert len(modules) <= MAX_MODULES, (room.relative_to(PKG).as_posix(), modules)


def test_the_rooms_are_found():
    names = {d.relative_to(PKG).as_posix() for d in ROOMS}
    assert {"ros", "tools", "ros/intake", "tools/offline"} <= names
