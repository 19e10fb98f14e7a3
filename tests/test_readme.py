"""The README is read in five minutes: what it promises a newcomer, checked on the text.

* The Quick start is exactly the two commands, ``make demo`` then ``make test``, and names the
  viewer command the demo prints for its run.
* A reader who knows ROS but not this project finds the launch command and the metres choice
  (``scale.source``, every source the code has) on the first two screens; the launch
  command's arguments are the launch file's own.
* Its sections come in the issue's order; its lines stay readable; it stays short.
* Every link of the README and the docs index to a page (and a heading in it) exists, and
  every launch argument is documented in docs/ros.md's Launch section (moved there from the
  README), so the deeper pages cannot drift from the short one.

The one speed figure and its headline are tests/test_docs_claims.py's; paths named in any doc
are tests/test_docs_paths.py's.
"""
from __future__ import annotations

import re
from pathlib import Path

from lingbot_ros.scale import SOURCES

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS_INDEX = REPO / "docs" / "README.md"
SCREEN = 40  # lines a screen shows
SECTIONS = ["Quick start", "On a robot", "Without ROS", "Evaluate", "Features", "Links"]
LAUNCH_FILE = REPO / "launch" / "lingbot_ros.launch.py"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def code_lines(section: str) -> list[str]:
    """The commands of a section's shell blocks (```bash, ```sh or unlabelled; not a
    ```text block of output): comments dropped, continuation lines joined."""
    blocks = re.findall(r"^```(?:bash|sh|)\n(.*?)^```", section, flags=re.M | re.S)
    text = "\n".join(blocks).replace("\\\n", " ")
    return [line.split("  #")[0].strip() for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def launch_arguments() -> set[str]:
    return set(re.findall(r'DeclareLaunchArgument\("(\w+)"', LAUNCH_FILE.read_text()))


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_the_quick_start_is_the_two_commands_and_the_view_command_the_demo_prints(
        monkeypatch):
    quick = sections(README.read_text())["Quick start"]
    assert "fresh Debian 12 / Python 3.11" in quick
    assert code_lines(quick) == ["make demo", "make test"]
    monkeypatch.chdir(REPO)  # make demo runs there, with the demo's default --out
    from lingbot_ros.tools.view.cli import view_command
    printed = view_command(REPO / "demo_out").split()
    assert printed[-2].endswith("lingbot-ros-view") and printed[-1] == "demo_out"
    assert "lingbot-ros-view demo_out" in quick


def test_a_ros_reader_finds_the_launch_command_and_the_metres_choice_on_two_screens():
    first = README.read_text().splitlines()[:2 * SCREEN]
    launch = [n for n, line in enumerate(first)
              if line.startswith("ros2 launch lingbot_ros lingbot_ros.launch.py")]
    assert launch, f"no `ros2 launch` line in the README's first {2 * SCREEN} lines"
    metres = [n for n, line in enumerate(first) if "scale.source" in line]
    assert metres, f"the metres choice (scale.source) is not in the first {2 * SCREEN} lines"
    choice = "\n".join(first[metres[0]:])
    missing = [name for name in SOURCES if f"`{name}`" not in choice]
    assert not missing, f"the README's metres choice does not name {missing}"


def test_the_launch_command_uses_the_launch_files_own_arguments():
    robot = sections(README.read_text())["On a robot"]
    command = next(line for line in code_lines(robot) if line.startswith("ros2 launch"))
    used = set(re.findall(r"(\w+):=", command))
    assert used and used <= launch_arguments(), used - launch_arguments()
    assert "scale_source" in used


def test_every_launch_argument_is_documented_in_ros_md():
    launch = sections((REPO / "docs" / "ros.md").read_text()).get("Launch")
    assert launch is not None, "docs/ros.md has no '## Launch' section"
    missing = sorted(a for a in launch_arguments() if f"`{a}`" not in launch)
    assert not missing, f"docs/ros.md's Launch section does not name {missing}"


def test_the_readme_is_short_in_order_and_readable():
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines: move detail into docs/"
    assert [s for s in sections(text) if s in SECTIONS] == SECTIONS
    assert list(sections(text)) == SECTIONS, list(sections(text))
    long = [n for n, line in enumerate(lines, 1) if len(line) > 100]
    assert not long, f"README.md lines over 100 columns: {long}"
    first = "\n".join(lines[:SCREEN])
    assert "docs/img/viewer.png" in first and "scripts/viewer_screenshot.py" in first


def test_the_readmes_links_lead_to_pages_and_headings():
    problems = []
    for doc in (README, DOCS_INDEX):
        for target in LINK.findall(doc.read_text()):
            if re.match(r"\w+:", target):
                continue  # an absolute URL
            path, _, anchor = target.partition("#")
            page = (doc.parent / path).resolve() if path else doc
            if not page.exists():
                problems.append(f"{doc.name}: {target}: no such file")
                continue
            if anchor and page.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", page.read_text(), flags=re.M)
                if anchor not in {slug(h) for h in headings}:
                    problems.append(f"{doc.name}: {target}: no such heading")
    assert problems == []


def test_the_docs_index_lists_every_page():
    index = DOCS_INDEX.read_text()
    pages = sorted(p.name for p in (REPO / "docs").glob("*.md") if p != DOCS_INDEX)
    missing = [name for name in pages if f"]({name})" not in index]
    assert not missing, f"docs/README.md does not list {missing}"
