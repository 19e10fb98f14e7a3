"""Import boundaries (AST): data flows one way and heavy imports stay behind their doors.

- only lingbot_ros/ros/ imports rclpy or ROS message packages (and the bag replay tool, which
  publishes recorded bytes: tools/bag_player.py and its CLI tools/bag_replay.py);
- only lingbot_ros/attention/flashinfer_paged.py imports flashinfer, and only
  lingbot_ros/model/qk_norm_rope_triton.py imports triton;
- the cache bookkeeping modules import no torch or numpy;
- cache/ and attention/ never import model/, session/ or ros/; model/ never imports session/ or ros/.
"""
import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "lingbot_ros"
ROS_MODULES = {"rclpy", "sensor_msgs", "geometry_msgs", "nav_msgs", "std_msgs", "std_srvs",
               "tf2_ros", "tf2_msgs", "cv_bridge", "diagnostic_msgs", "lingbot_ros_interfaces",
               "rosgraph_msgs", "builtin_interfaces", "rosidl_runtime_py"}
ROS_TOOLS = {"tools/bag_player.py", "tools/bag_replay.py"}  # the replay tool: player and CLI
PURE_BOOKKEEPING = ["cache/errors.py", "cache/page_pool.py", "cache/patch_stream.py",
                    "cache/special_stream.py", "cache/page_table.py", "config.py"]


def imported_modules(path: Path) -> set[str]:
    """Absolute top-level names and package-relative paths ('lingbot_ros.x.y') imported."""
    tree = ast.parse(path.read_text(), filename=str(path))
    rel_pkg = path.relative_to(PKG.parent).with_suffix("").parts[:-1]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(rel_pkg[:len(rel_pkg) - node.level + 1])
                mod = ".".join(base + ([node.module] if node.module else []))
                names.add(mod)
                if not node.module:
                    names.update(f"{mod}.{a.name}" for a in node.names)
            else:
                names.add(node.module)
    return names


def files(sub: str = ""):
    return sorted((PKG / sub).rglob("*.py"))


def tops(names):
    return {n.split(".")[0] for n in names}


def test_only_ros_layer_imports_ros():
    for f in files():
        rel = f.relative_to(PKG).as_posix()
        if rel.startswith("ros/") or rel in ROS_TOOLS:
            continue
        assert not tops(imported_modules(f)) & ROS_MODULES, rel


def test_only_the_flashinfer_backend_imports_flashinfer():
    for f in files():
        rel = f.relative_to(PKG).as_posix()
        if rel == "attention/flashinfer_paged.py":
            continue
        assert "flashinfer" not in tops(imported_modules(f)), rel


def test_only_the_triton_kernel_module_imports_triton():
    for f in files():
        rel = f.relative_to(PKG).as_posix()
        if rel == "model/qk_norm_rope_triton.py":
            continue
        assert "triton" not in tops(imported_modules(f)), rel


@pytest.mark.parametrize("rel", PURE_BOOKKEEPING)
def test_bookkeeping_is_pure_python(rel):
    assert not tops(imported_modules(PKG / rel)) & {"torch", "numpy"}, rel


def test_lower_layers_do_not_import_upper_layers():
    rules = {"cache": ("model", "session", "ros", "attention"),
             "attention": ("model", "session", "ros"),
             "model": ("session", "ros"), "session": ("ros",),
             "ros": ("model", "cache", "attention")}  # the node talks to the session only
    for layer, banned in rules.items():
        for f in files(layer):
            for name in imported_modules(f):
                parts = name.split(".")
                if parts[0] == "lingbot_ros" and len(parts) > 1:
                    assert parts[1] not in banned, (f.relative_to(PKG).as_posix(), name)
