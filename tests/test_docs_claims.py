"""Numbers the docs state about the code, measured on the code.

``map.max_points`` bounds the map's memory; its description (the parameter table, hence
``ros2 param describe``), config/lingbot_ros.yaml and docs/node.md say how many bytes a point
the map holds. A full map holds exactly that many (``VoxelMap.nbytes``: xyz float32, rgb,
the sorted int64 voxel key), so a change of the map's storage has to change the docs too.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from lingbot_ros.geometry import VoxelMap
from lingbot_ros.ros.params.table import PARAMS

REPO = Path(__file__).resolve().parents[1]
BYTES_A_POINT = re.compile(r"(\d+) bytes (?:held )?a point")


def full_map_bytes_a_point(max_points: int = 4096) -> float:
    voxel = 0.05
    grid = np.stack(np.meshgrid(*(np.arange(16),) * 3, indexing="ij"), -1).reshape(-1, 3)
    xyz = ((grid[:max_points] + 0.5) * voxel).astype(np.float32)  # one point a voxel
    rgb = np.zeros((len(xyz), 3), np.uint8)
    voxel_map = VoxelMap(voxel, max_points)
    voxel_map.add(xyz, rgb)
    assert voxel_map.num_points == max_points and voxel_map.coarsenings == 0
    return voxel_map.nbytes / max_points


def test_the_map_holds_the_bytes_a_point_its_parameter_states():
    row = next(p for p in PARAMS if p.name == "map.max_points")
    yaml_line = next(line for line in (REPO / "config" / "lingbot_ros.yaml").read_text()
                     .splitlines() if line.strip().startswith("map.max_points:"))
    docs_row = next(line for line in (REPO / "docs" / "node.md").read_text().splitlines()
                    if line.startswith("| `map.max_points` |"))
    stated = {where: [int(n) for n in BYTES_A_POINT.findall(text)]
              for where, text in (("table", row.description), ("yaml", yaml_line),
                                  ("node.md", docs_row))}
    measured = full_map_bytes_a_point()
    assert stated == {where: [measured] for where in stated}
