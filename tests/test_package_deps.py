"""What a ROS install needs, declared: every third-party module that lingbot_ros/ and launch/
import is a package.xml dependency (ROS packages, Python packages with rosdep keys) or in
requirements.txt (what rosdep cannot provide), requirements.txt agrees with setup.py, and the
installed RViz config (config/lingbot_ros.rviz) is what use_rviz:=true opens.

Modules imported only lazily (inside a function, or under ``try: ... except ImportError``)
may be optional: those are listed, each with its reason, in OPTIONAL."""
from __future__ import annotations

import ast
import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SOURCES = sorted((REPO / "lingbot_ros").rglob("*.py")) + sorted((REPO / "launch").glob("*.py"))

# Import name -> how a ROS install gets it: a rosdep key of package.xml ("python3-..."), or
# "requirements.txt:<distribution>" (no reliable rosdep key). ROS packages are not listed:
# they are imported under their package name, which must be an exec_depend.
PYTHON_PACKAGES = {
    "numpy": "python3-numpy",
    "cv2": "python3-opencv",
    "yaml": "python3-yaml",
    "tqdm": "python3-tqdm",
    "torch": "requirements.txt:torch",
    "safetensors": "requirements.txt:safetensors",
    "rosbags": "requirements.txt:rosbags",
}
# Optional: imported lazily, the code works (or says what to install) without them.
OPTIONAL = {
    "flashinfer": "CUDA attention backend; setup.py's gpu extra, commented in requirements.txt",
    "triton": "fused q/k-norm + RoPE kernel on CUDA; comes with CUDA builds of torch",
    "matplotlib": "trajectory plots of the offline tools (--plot); setup.py's viz extra",
    "cv_bridge": "optional image decoding through cv_bridge, only on request",
    "gtsam": "the loop-closure pose graph (loop.enable); pip install --no-deps gtsam==4.3.0, "
             "commented in requirements.txt (its metadata asks for pytest>=9)",
    "ray": "lingbot-ros-eval --ray (tools/eval/fleet/cluster.py); setup.py's fleet extra",
    "viser": "lingbot-ros-view, lingbot-ros-offline --view (tools/view/server.py); setup.py's "
             "view extra, commented in requirements.txt",
    "websockets": "the viewer's browser driver (tools/view/browser.py); comes with viser",
}
# Our modules that import an OPTIONAL module at their top: they must themselves be imported
# lazily (inside functions, or under try/except ImportError) wherever they are imported.
OPTIONAL_AT_TOP = {"lingbot_ros.model.qk_norm_rope_triton",  # the Triton kernels (triton)
                   "lingbot_ros.model.add_norm_triton",
                   "lingbot_ros.attention.split_merge_triton",
                   "lingbot_ros.model.fp8_quant_triton",
                   "lingbot_ros.loop.pose_graph"}  # the pose graph (gtsam)
# Not dependencies on purpose: a robot needs no GUI (launch use_rviz:=true says to install it).
NOT_DEPENDENCIES = {"rviz2"}


@dataclass(frozen=True)
class Import:
    module: str       # absolute dotted name of what is imported
    source: Path      # the importing file
    lazy: bool        # inside a function body or a try with an ImportError handler
    line: int

    @property
    def top(self) -> str:
        return self.module.split(".")[0]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(getattr(n, "id", None) in ("ImportError", "ModuleNotFoundError", "Exception")
               for n in names)


def _imports_of(path: Path) -> list[Import]:
    tree = ast.parse(path.read_text(), str(path))
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend(Import(a.name, path, lazy, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module
            else:  # relative: resolved against the importing package
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            # 'from pkg import name' may import the submodule pkg.name: keep both.
            found.append(Import(base, path, lazy, node.lineno))
            found.extend(Import(f"{base}.{a.name}", path, lazy, node.lineno)
                         for a in node.names if a.name != "*")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            lazy = True
        if isinstance(node, ast.Try):
            guarded = lazy or any(_catches_import_error(h) for h in node.handlers)
            for child in node.body:
                visit(child, guarded)
            for child in node.handlers + node.orelse + node.finalbody:
                visit(child, lazy)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, lazy)

    visit(tree, False)
    return found


@pytest.fixture(scope="module")
def imports() -> list[Import]:
    assert SOURCES, "no sources found"
    return [i for path in SOURCES for i in _imports_of(path)]


def _third_party(imports: list[Import]) -> dict[str, list[Import]]:
    by_top: dict[str, list[Import]] = {}
    for i in imports:
        if i.top in sys.stdlib_module_names or i.top in ("__future__", "lingbot_ros"):
            continue
        by_top.setdefault(i.top, []).append(i)
    return by_top


@pytest.fixture(scope="module")
def exec_depends() -> set[str]:
    root = ET.parse(REPO / "package.xml").getroot()
    return {e.text.strip() for e in root if e.tag in ("exec_depend", "depend")}


def _requirement(line: str) -> tuple[str, str]:
    """'name>=1,<2' -> ('name', '<2,>=1'): the name normalised, the bounds sorted."""
    match = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([^;#]*?)\s*"
                         r"(;.*)?", line)
    assert match, f"not a requirement: {line!r}"
    name = re.sub(r"[-_.]+", "-", match.group(1)).lower()
    spec = ",".join(sorted(s.replace(" ", "") for s in match.group(3).split(",") if s.strip()))
    return name, spec


def _requirements_txt() -> tuple[dict[str, str], dict[str, str]]:
    """requirements.txt: {name: bounds} of its requirements, and of its commented ones
    ('# name>=x' lines: the optional extras it mentions)."""
    active, commented = {}, {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        text = line.strip()
        if not text:
            continue
        if text.startswith("#"):
            text = text.lstrip("#").strip()
            if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*\s*(==|>=|<=|~=|<|>)[^\s]*", text):
                commented.update([_requirement(text)])
            continue
        assert not text.startswith("-"), f"plain requirements only: {line!r}"
        active.update([_requirement(text)])
    return active, commented


@pytest.fixture(scope="module")
def setup_kwargs() -> dict:
    """The keyword arguments setup.py passes to setuptools.setup (run in the repo root)."""
    import os

    import setuptools
    captured: dict = {}
    saved_setup, saved_cwd = setuptools.setup, os.getcwd()
    setuptools.setup = lambda **kwargs: captured.update(kwargs)
    try:
        os.chdir(REPO)
        exec(compile((REPO / "setup.py").read_text(), "setup.py", "exec"),
             {"__name__": "__main__", "__file__": str(REPO / "setup.py")})
    finally:
        setuptools.setup = saved_setup
        os.chdir(saved_cwd)
    assert captured, "setup.py did not call setup()"
    return captured


# --- imports are declared ------------------------------------------------------------------

def test_every_third_party_import_is_declared(imports, exec_depends):
    requirements, _ = _requirements_txt()
    undeclared = []
    for top, uses in sorted(_third_party(imports).items()):
        where = f"{uses[0].source.relative_to(REPO)}:{uses[0].line}"
        if top in OPTIONAL:
            continue
        source = PYTHON_PACKAGES.get(top)
        if source is None:  # a ROS package, imported under its name
            if top not in exec_depends:
                undeclared.append(f"{top} ({where}): add <exec_depend>{top}</exec_depend>, or "
                                  f"map it in PYTHON_PACKAGES if it is a Python package")
        elif source.startswith("requirements.txt:"):
            if source.split(":", 1)[1] not in requirements:
                undeclared.append(f"{top} ({where}): not in requirements.txt")
        elif source not in exec_depends:
            undeclared.append(f"{top} ({where}): add <exec_depend>{source}</exec_depend>")
    assert not undeclared, "\n".join(undeclared)


def test_optional_modules_are_imported_lazily_only(imports, exec_depends):
    """An OPTIONAL module is imported inside functions or try/except ImportError only, or at the
    top of one of OPTIONAL_AT_TOP, which are themselves imported only lazily."""
    third_party = _third_party(imports)
    eager = []
    for name in OPTIONAL:
        assert name in third_party, f"{name} is in OPTIONAL but imported nowhere: remove it"
        assert name not in exec_depends and name not in PYTHON_PACKAGES, \
            f"{name} is declared: remove it from OPTIONAL"
        eager += [f"{name} at {i.source.relative_to(REPO)}:{i.line}" for i in third_party[name]
                  if not i.lazy and _module_name(i.source) not in OPTIONAL_AT_TOP]
    for module in OPTIONAL_AT_TOP:
        uses = [i for i in imports if i.module == module]
        assert uses, f"{module} is imported nowhere: remove it from OPTIONAL_AT_TOP"
        eager += [f"{module} at {i.source.relative_to(REPO)}:{i.line}" for i in uses
                  if not i.lazy]
    assert not eager, f"optional modules imported eagerly: {eager}"


def test_the_import_scan_sees_the_known_imports(imports):
    """The scan itself: relative imports resolved, lazy and eager imports told apart."""
    modules = {(i.module, i.source.name, i.lazy) for i in imports}
    assert ("rclpy.lifecycle", "node.py", False) in modules
    assert ("safetensors.torch", "loader.py", True) in modules
    assert ("flashinfer", "flashinfer_paged.py", True) in modules
    assert ("lingbot_ros.model.qk_norm_rope_triton", "qk_fused.py", True) in modules
    assert ("launch_ros.actions", "lingbot_ros.launch.py", False) in modules


def test_declared_python_packages_are_used(imports, exec_depends):
    """No stale declaration: each python3-* key of package.xml and each requirement is
    imported somewhere (under a name PYTHON_PACKAGES maps to it)."""
    used = {PYTHON_PACKAGES[t] for t in _third_party(imports) if t in PYTHON_PACKAGES}
    keys = {d for d in exec_depends if d.startswith("python3-")}
    assert keys <= used, f"unused rosdep keys: {sorted(keys - used)}"
    requirements, _ = _requirements_txt()
    stale = {f"requirements.txt:{r}" for r in requirements} - used
    assert not stale, f"unused requirements: {sorted(stale)}"


def test_no_gui_dependency(exec_depends):
    assert not exec_depends & NOT_DEPENDENCIES, "rviz2 stays optional (launch use_rviz:=true)"


# --- requirements.txt and setup.py ----------------------------------------------------------

def test_requirements_match_setup_py(setup_kwargs):
    declared = dict(_requirement(r) for r in setup_kwargs["install_requires"])
    for extra in setup_kwargs.get("extras_require", {}).values():
        declared.update(_requirement(r) for r in extra)
    requirements, commented = _requirements_txt()
    assert {"torch", "safetensors", "rosbags"} <= set(requirements)
    assert "flashinfer-python" in commented, "the CUDA extra, as a comment"
    for name, spec in {**requirements, **commented}.items():
        assert name in declared, f"{name} is in requirements.txt, not in setup.py"
        assert spec == declared[name], f"{name}: requirements.txt {spec!r}, setup.py " \
                                       f"{declared[name]!r}"
    gpu = dict(_requirement(r) for r in setup_kwargs["extras_require"]["gpu"])
    assert gpu["flashinfer-python"] == commented["flashinfer-python"]


def test_requirement_parser():
    assert _requirement("rosbags>=0.11,<0.12") == ("rosbags", "<0.12,>=0.11")
    assert _requirement("Flashinfer_Python >= 0.6") == ("flashinfer-python", ">=0.6")
    assert _requirement("tqdm") == ("tqdm", "")


# --- the RViz config --------------------------------------------------------------------------

RVIZ = REPO / "config" / "lingbot_ros.rviz"
# class -> (topic, durability, enabled) of the displays use_rviz:=true shows
RVIZ_DISPLAYS = {
    "rviz_default_plugins/TF": (None, None, True),
    "rviz_default_plugins/Path": ("/lingbot_ros/path", "Transient Local", True),
    "rviz_default_plugins/Pose": ("/lingbot_ros/pose", None, True),
    "rviz_default_plugins/PointCloud2": ("/lingbot_ros/map_points", "Transient Local", False),
    "rviz_default_plugins/Image": ("/lingbot_ros/depth", None, True),
    "rviz_default_plugins/Odometry": ("/lingbot_ros/odometry", None, False),
}


def test_rviz_config_shows_the_node_outputs():
    config = yaml.safe_load(RVIZ.read_text())
    assert {"Panels", "Visualization Manager", "Window Geometry"} <= set(config)
    manager = config["Visualization Manager"]
    assert manager["Global Options"]["Fixed Frame"] == "map"
    displays = {d["Class"]: d for d in manager["Displays"]}
    assert len(displays) == len(manager["Displays"]), "one display per class"
    for cls, (topic, durability, enabled) in RVIZ_DISPLAYS.items():
        assert cls in displays, f"no {cls} display"
        display = displays[cls]
        assert display["Enabled"] is enabled and display["Value"] is enabled, cls
        assert display.get("Name"), cls
        if topic is not None:
            assert display["Topic"]["Value"] == topic, cls
            assert display["Topic"]["Reliability Policy"] in ("Reliable", "Best Effort"), cls
        if durability is not None:
            assert display["Topic"]["Durability Policy"] == durability, cls
    assert all(d["Class"].startswith(("rviz_default_plugins/", "rviz_common/"))
               for d in manager["Displays"] + config["Panels"])


def test_rviz_config_is_installed(setup_kwargs):
    installed = {dest: files for dest, files in setup_kwargs["data_files"]}
    assert "config/lingbot_ros.rviz" in installed["share/lingbot_ros/config"]
    assert "config/lingbot_ros.yaml" in installed["share/lingbot_ros/config"]
