"""Import boundaries (AST): data flows one way and heavy imports stay behind their doors.

- only lingbot_ros/ros/ imports rclpy or ROS message packages (and the bag replay tool, which
  publishes recorded bytes: tools/bag_player.py and its CLI tools/bag_replay.py);
- only lingbot_ros/attention/flashinfer_paged.py imports flashinfer, and only
  lingbot_ros/model/qk_norm_rope_triton.py imports triton;
- the cache bookkeeping modules import no torch or numpy;
- cache/ and attention/ never import model/, session/ or ros/; model/ never imports session/ or ros/;
- ros/ reaches the session layer through its package API (``lingbot_ros.session``) only;
- no import cycles between lingbot_ros modules, lazy (function-level) imports included.
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
        if rel in {"model/qk_norm_rope_triton.py", "model/add_norm_triton.py",
                   "attention/split_merge_triton.py"}:
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


def test_ros_uses_the_session_package_api_only():
    for f in files("ros"):
        for name in imported_modules(f):
            parts = name.split(".")
            if parts[:2] == ["lingbot_ros", "session"]:
                assert len(parts) == 2, (f.relative_to(PKG).as_posix(), name)


def test_the_session_package_exports_what_it_names():
    import lingbot_ros.session as session
    assert all(hasattr(session, name) for name in session.__all__)
    assert {"StreamingSession", "StreamRunner", "StepKind", "FrameResult", "FrameRejected",
            "open_session", "warm_up"} <= set(session.__all__)


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(f): f for f in files()}


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def lingbot_imports(path: Path) -> set[str]:
    """The lingbot_ros modules ``path`` imports: every import statement -- at module level,
    under ``if __name__ == "__main__"`` or inside a function -- except those under
    ``if TYPE_CHECKING:``. ``from pkg import name`` counts as importing ``pkg.name`` when that
    is a module, else ``pkg``; a name that is no module file resolves to its nearest package."""
    me = module_name(path)
    pkg = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
    found = set()

    def add(name: str) -> None:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != me:
            found.add(name)

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.orelse:
                    visit_one(stmt)
            else:
                visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(pkg[:len(pkg) - node.level + 1] + ([node.module] if node.module
                                                                     else []))
            else:
                base = node.module or ""
            for alias in node.names:
                add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
        visit(node)

    visit(ast.parse(path.read_text(), filename=str(path)))
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as one cycle
    through it: ``[a, b, ..., a]``."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return [_cycle_through(graph, component) for component in components]


def _cycle_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle from the component's first module back to itself (BFS inside it)."""
    start = min(component)
    parent, queue = {start: None}, [start]
    for v in queue:
        for w in sorted(graph[v] & component):
            if w == start:
                path = [v]
                while parent[path[-1]] is not None:
                    path.append(parent[path[-1]])
                return path[::-1] + [start]
            if w not in parent:
                parent[w] = v
                queue.append(w)
    raise AssertionError(f"no cycle in {component}")  # pragma: no cover


def test_import_cycle_finder_finds_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}}
    assert sorted(import_cycles(graph)) == [["a", "b", "c", "a"], ["e", "f", "e"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    graph = {name: lingbot_imports(path) for name, path in MODULES.items()}
    assert "lingbot_ros.ros.convert" in graph["lingbot_ros.ros.frame_worker"]  # the graph is built
    cycles = import_cycles(graph)
    assert not cycles, "import cycles (TYPE_CHECKING imports excluded):\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles)


TESTS = PKG.parent / "tests"


@pytest.mark.parametrize("root", [PKG, TESTS], ids=["lingbot_ros", "tests"])
def test_no_private_names_imported_across_modules(root):
    """A name shared between modules is public: no ``from .x import _helper`` anywhere."""
    for f in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(), filename=str(f))):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                private = [a.name for a in node.names
                           if a.name.startswith("_") and not a.name.startswith("__")]
                assert not private, (f.relative_to(root.parent).as_posix(), node.lineno, private)
