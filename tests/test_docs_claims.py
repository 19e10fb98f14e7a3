"""Numbers the docs state about the code, measured on the code.

``map.max_points`` bounds the map's memory; its description (the parameter table, hence
``ros2 param describe``), config/lingbot_ros.yaml and docs/node.md say how many bytes a point
the map holds. A full map holds exactly that many (``VoxelMap.nbytes``: xyz float32, rgb,
the sorted int64 voxel key), so a change of the map's storage has to change the docs too.

The headline speed has one home: the "Headline" table of docs/performance.md (FPS, GPU, date,
command), backed by a row of a dated section of that file. The README quotes it exactly once,
with its date and GPU and a link to it; no other FPS figure appears in the README or in the
other docs (they link to the headline instead), so the figures cannot disagree again.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from lingbot_ros.geometry import VoxelMap
from lingbot_ros.ros.params.table import PARAMS

REPO = Path(__file__).resolve().parents[1]
BYTES_A_POINT = re.compile(r"(\d+) bytes (?:held )?a point")
PERFORMANCE = REPO / "docs" / "performance.md"
README = REPO / "README.md"
# "35.4 FPS", "**35.4** FPS", "1,000 FPS"; not "p99, FPS"
FPS_FIGURE = re.compile(r"(?<![\w.,])(\d+(?:,\d{3})*(?:\.\d+)?)(?:\*\*)?[ \n]FPS\b")
HEADLINE_LINK = "docs/performance.md#headline"


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


def sections(text: str) -> dict[str, str]:
    """'## Title' -> the section's text (up to the next '## ')."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def headline() -> dict[str, str]:
    """The one row of docs/performance.md's Headline table: fps, gpu, date, command."""
    section = sections(PERFORMANCE.read_text()).get("Headline")
    assert section is not None, "docs/performance.md has no '## Headline' section"
    rows = [[c.strip().strip("*`") for c in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith("|")]
    assert rows[0] == ["FPS", "GPU", "date", "command"] and len(rows) == 3, rows
    row = dict(zip(("fps", "gpu", "date", "command"), rows[2]))
    assert re.fullmatch(r"\d+\.\d", row["fps"]), row
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", row["date"]), row
    assert row["command"].startswith("lingbot-ros-bench "), row
    return row


def test_the_headline_is_a_measured_row_of_performance_md():
    row = headline()
    text = PERFORMANCE.read_text()
    dated = [title for title, body in sections(text).items()
             if row["date"] in title and f"**{row['fps']} FPS**" in body]
    assert dated, (f"no section of docs/performance.md dated {row['date']} measures "
                   f"**{row['fps']} FPS**")
    ratio = re.search(r"\*\*([\d.]+)×\*\* the public reference's\s+([\d.]+) FPS",
                      sections(text)["Headline"])
    assert ratio, "the Headline section states the ratio to the reference"
    assert float(ratio.group(1)) == round(float(row["fps"]) / float(ratio.group(2)), 1)


def test_the_readme_quotes_the_headline_once_with_its_date_and_gpu():
    row = headline()
    text = README.read_text()
    figures = [(m.group(1), m.start()) for m in FPS_FIGURE.finditer(text)]
    assert [fps for fps, _ in figures] == [row["fps"]], (
        f"README.md quotes the speed once, as {row['fps']} FPS (docs/performance.md's "
        f"Headline); it has {[fps for fps, _ in figures]}: link to {HEADLINE_LINK} instead")
    quote = text[figures[0][1]:figures[0][1] + 200]
    gpu_model = row["gpu"].split()[-1]  # "one NVIDIA H200" -> "H200"
    for what in (row["date"], gpu_model, HEADLINE_LINK):
        assert what in quote, f"README.md's speed quote lacks {what!r}: {quote!r}"


def test_no_other_doc_quotes_a_speed_figure():
    fps = headline()["fps"]
    for path in sorted((REPO / "docs").glob("*.md")):
        if path == PERFORMANCE:
            continue
        other = {m.group(1) for m in FPS_FIGURE.finditer(path.read_text())} - {fps}
        assert not other, (f"{path.relative_to(REPO)} quotes {sorted(other)} FPS: link to "
                           f"performance.md#headline (or move the figure into performance.md)")
