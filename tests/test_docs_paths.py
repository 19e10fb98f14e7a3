"""Every file and module the docs name exists: README.md, docs/*.md, msg/, srv/ and
config/lingbot_ros.yaml may not point a reader at a path or a dotted name that moved.

Checked, in any line (prose, tables, code blocks):

* repository paths: ``lingbot_ros/...``, ``tests/...``, ``scripts/...``, ``docs/...``,
  ``config/...``, ``launch/...``, ``msg/...``, ``srv/...`` (``lingbot_ros/x`` may also be the
  repository itself, as a colcon workspace's ``src/lingbot_ros``);
* package paths: ``ros/...``, ``tools/...``, ``session/...`` and the other subpackages, under
  ``lingbot_ros/`` (a module may be named without its ``.py``);
* dotted names ``lingbot_ros.a.b[.name]``: a module, or a name the module defines or imports
  (a name the package writes as a string, a logger's or a file marker's, is not a module);
* a file named on its own (``file.py``): some file of the repository has that name.

Glob patterns (``*_triton.py``) and placeholders (``<name>``) are not paths.
"""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "lingbot_ros"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
        *sorted((REPO / "msg").glob("*.msg")), *sorted((REPO / "srv").glob("*.srv")),
        REPO / "config" / "lingbot_ros.yaml"]

_NOT_BEFORE = r"(?<![\w/.*<-])"  # not inside a longer path, a glob or a placeholder
_NOT_AFTER = r"(?![\w*<>{-])"
REPO_PATH = re.compile(_NOT_BEFORE + r"((?:lingbot_ros|tests|scripts|docs|config|launch|msg|srv)"
                       r"/[\w./-]*\w)" + _NOT_AFTER)
SUBPACKAGES = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
PACKAGE_PATH = re.compile(_NOT_BEFORE + r"((?:" + "|".join(SUBPACKAGES) + r")/[\w./-]*\w)"
                          + _NOT_AFTER)
DOTTED = re.compile(r"(?<![\w.])lingbot_ros(?:\.\w+)+(?![\w*])")
FILE_NAME = re.compile(_NOT_BEFORE + r"(\w+\.py)\b")
NOT_MODULES = re.compile(r"lingbot_ros\.(yaml|rviz|launch\.py)$")  # files named lingbot_ros.*


def _names_in_strings() -> set[str]:
    """``lingbot_ros.x`` names the package writes as strings, not modules: logger names
    (``getLogger("lingbot_ros.frame_sources")``), file markers (``lingbot_ros.stream_snapshot``)."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        names.update(re.findall(r"[\"'](lingbot_ros\.[\w.]+)", path.read_text()))
    return names


def _module_file(parts: list[str]) -> Path | None:
    base = REPO.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _dotted_problem(name: str, strings: set[str]) -> str | None:
    """None when ``name`` is a module, or a module and a name it defines or imports."""
    if name in strings or NOT_MODULES.search(name):
        return None
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        module = _module_file(parts[:n])
        if module is None:
            continue
        rest = parts[n:]
        if not rest:
            return None
        if len(rest) == 1 and re.search(rf"\b{re.escape(rest[0])}\b", module.read_text()):
            return None  # a function, class or constant of the module (or re-exported)
        return f"{'.'.join(parts[:n])} has no {'.'.join(rest)}"
    return "no such module"


def _repo_path_exists(path: str) -> bool:
    if (REPO / path).exists():
        return True
    # `src/lingbot_ros/...` in a colcon workspace is this repository
    return path.startswith("lingbot_ros/") and (REPO / path.split("/", 1)[1]).exists()


def _package_path_exists(path: str) -> bool:
    return (PACKAGE / path).exists() or (PACKAGE / (path + ".py")).exists()


def stale_references(docs: list[Path]) -> list[str]:
    """``file:line: what is missing``, for every reference in ``docs`` to nothing."""
    strings = _names_in_strings()
    file_names = {p.name for p in REPO.rglob("*.py") if ".venv" not in p.parts}
    problems = []
    for doc in docs:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            where = f"{doc.name}:{number}"
            for m in REPO_PATH.finditer(line):
                if not _repo_path_exists(m.group(1).rstrip(".")):
                    problems.append(f"{where}: no file {m.group(1)}")
            for m in PACKAGE_PATH.finditer(line):
                if line[:m.start()].endswith("tests/"):
                    continue
                if not _package_path_exists(m.group(1).rstrip(".")):
                    problems.append(f"{where}: no lingbot_ros/{m.group(1)}")
            for m in DOTTED.finditer(line):
                problem = _dotted_problem(m.group(0), strings)
                if problem:
                    problems.append(f"{where}: {m.group(0)}: {problem}")
            for m in FILE_NAME.finditer(line):
                if m.group(1) not in file_names:
                    problems.append(f"{where}: no file named {m.group(1)}")
    return problems


def test_every_path_and_module_the_docs_name_exists():
    assert stale_references(DOCS) == []


def test_the_check_finds_moved_files_a_missing_module_and_a_missing_name(tmp_path):
    doc = tmp_path / "moved.md"
    doc.write_text("See `lingbot_ros/ros/frame_worker.py`, `ros/tf_tree.py`, "
                   "`lingbot_ros.tools.offline_scale`, `lingbot_ros.session.NoSuchThing`, "
                   "`bag_source.py`; but `lingbot_ros/ros/node.py`, `ros/intake/worker`, "
                   "`lingbot_ros.session.StreamingSession`, logger `lingbot_ros.frame_sources`, "
                   "`*_triton.py`, `lingbot_ros.yaml` and `tests/ros/unit/test_params.py` "
                   "are fine.\n")
    assert stale_references([doc]) == [
        "moved.md:1: no file lingbot_ros/ros/frame_worker.py",
        "moved.md:1: no lingbot_ros/ros/tf_tree.py",
        "moved.md:1: lingbot_ros.tools.offline_scale: lingbot_ros.tools has no offline_scale",
        "moved.md:1: lingbot_ros.session.NoSuchThing: lingbot_ros.session has no NoSuchThing",
        "moved.md:1: no file named bag_source.py"]
