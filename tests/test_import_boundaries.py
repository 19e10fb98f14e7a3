"""Import boundaries, read from docs/architecture.md so that the document and the code cannot
drift apart:

- every row of its package table: the module (or files) in the first column does not import
  what its "does not import" column names (the grammar is stated under the table; an entry
  this test cannot read fails it). torch, numpy and rclpy are checked transitively, through
  every lingbot_ros module the file imports, and torch also at run time (a fresh interpreter);
- its "Only ... imports X" invariant line: rclpy, flashinfer and triton stay behind their doors;
- no import cycles between lingbot_ros modules, lazy (function-level) imports included;
- no private names imported across modules.

Only imports that run count: an import under ``if TYPE_CHECKING:`` is a type hint.
"""
import ast
import fnmatch
import re
import subprocess
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "lingbot_ros"
DOC = ROOT / "docs" / "architecture.md"
TESTS = ROOT / "tests"

# "rclpy" in the document stands for rclpy and every ROS package.
ROS_MODULES = {"rclpy", "sensor_msgs", "geometry_msgs", "nav_msgs", "std_msgs", "std_srvs",
               "tf2_ros", "tf2_msgs", "cv_bridge", "diagnostic_msgs", "lingbot_ros_interfaces",
               "rosgraph_msgs", "builtin_interfaces", "rosidl_runtime_py", "rosbag2_py",
               "lifecycle_msgs", "rcl_interfaces", "visualization_msgs", "rclpy_message_converter"}
THIRD_PARTY = {"torch", "numpy", "rclpy", "flashinfer", "triton"}
TRANSITIVE = {"torch", "numpy", "rclpy"}  # flashinfer and triton are optional doors


# --- the modules and their imports -------------------------------------------------------

def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def files(sub: str = "") -> list[Path]:
    return sorted((PKG / sub).rglob("*.py"))


MODULES = {module_name(f): f for f in files()}


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def runtime_imports(path: Path) -> set[str]:
    """Absolute dotted names ``path`` imports when it runs: every import statement -- at module
    level, under ``if __name__ == "__main__"`` or inside a function -- except those under
    ``if TYPE_CHECKING:``. Relative imports are resolved; ``from pkg import name`` gives
    ``pkg.name`` when that is a lingbot_ros module, else ``pkg``."""
    me = module_name(path)
    pkg = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
    found = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.orelse:
                    visit_one(stmt)
            else:
                visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            if node.level:
                base = ".".join(pkg[:len(pkg) - node.level + 1] + ([node.module] if node.module
                                                                     else []))
            else:
                base = node.module or ""
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
        visit(node)

    visit(ast.parse(path.read_text(), filename=str(path)))
    return found


def lingbot_module(name: str) -> Optional[str]:
    """The lingbot_ros module a dotted name lives in (its nearest module file), or None."""
    if name.split(".")[0] != "lingbot_ros":
        return None
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def lingbot_imports(path: Path) -> set[str]:
    """The lingbot_ros modules ``path`` imports when it runs (see :func:`runtime_imports`)."""
    me = module_name(path)
    return {m for m in map(lingbot_module, runtime_imports(path)) if m and m != me}


@lru_cache(maxsize=None)
def imports_of(module: str) -> frozenset:
    return frozenset(runtime_imports(MODULES[module]))


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def reached(module: str) -> set[str]:
    """``module`` and every lingbot_ros module loading it loads, lazily or not: what it
    imports, and the packages (``__init__``) those live in -- except its own package chain,
    which a rule on a file of that package does not answer for."""
    own = set(_ancestors(module))
    seen, todo = {module}, [module]
    while todo:
        for name in imports_of(todo.pop()):
            target = lingbot_module(name)
            if target is None:
                continue
            for m in [target] + _ancestors(target):
                if m in MODULES and m not in seen and m not in own:
                    seen.add(m)
                    todo.append(m)
    return seen


def tops(names) -> set[str]:
    return {n.split(".")[0] for n in names}


def third_party_top(name: str) -> str:
    """rclpy for every ROS package, else the top-level name."""
    top = name.split(".")[0]
    return "rclpy" if top in ROS_MODULES else top


# --- the document's rules ----------------------------------------------------------------

@dataclass
class Ban:
    """One entry of the "does not import" column."""
    name: str  # 'torch', 'session', 'lingbot_ros', ...
    internals: bool = False  # 'X internals': X's submodules, not its __init__ API
    only_in: Optional[set[str]] = None  # relative paths the ban is narrowed to
    except_in: set[str] = field(default_factory=set)  # relative paths exempt from it

    @property
    def third_party(self) -> bool:
        return self.name in THIRD_PARTY


@dataclass
class Row:
    subjects: list[str]  # 'geometry/', 'config.py', 'ros/tf/tree.py', ...
    bans: list[Ban]

    @property
    def id(self) -> str:
        return self.subjects[0] + ("+" if len(self.subjects) > 1 else "")

    def files(self) -> list[str]:
        out = []
        for s in self.subjects:
            out += ([f.relative_to(PKG).as_posix() for f in files(s)] if s.endswith("/")
                    else [s])
        return sorted(set(out))


def _split_top(text: str, sep: str = ",") -> list[str]:
    """``text`` split at ``sep`` outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return parts + [cur]


def _resolve(row_dir: str, rel: str) -> str:
    """A file named in a row: relative to the row's folder, else to lingbot_ros/."""
    for cand in (row_dir + rel, rel):
        if (PKG / cand).is_file():
            return cand
    raise ValueError(f"{rel!r} names no file of lingbot_ros (nor of {row_dir or '.'})")


def parse_ban(entry: str, row_dir: str) -> Ban:
    m = re.fullmatch(r"\s*([A-Za-z_][\w/]*?)/?(\s+internals)?\s*(?:\((only in|except)\s+(.+)\))?\s*",
                     entry)
    if not m:
        raise ValueError(f"cannot read the entry {entry!r}")
    name, internals, how, listed = m.groups()
    ban = Ban(name, internals=bool(internals))
    if name not in THIRD_PARTY and name != "lingbot_ros" and not (
            (PKG / name).is_dir() or (PKG / f"{name}.py").is_file()):
        raise ValueError(f"{name!r} in {entry!r} is neither a part of lingbot_ros nor one of "
                         f"{sorted(THIRD_PARTY)}")
    if internals and not (PKG / name).is_dir():
        raise ValueError(f"'{name} internals': {name} is no package")
    if how:
        paths = re.findall(r"`([^`]+)`", listed)
        if not paths:
            raise ValueError(f"{entry!r}: name the files in backticks")
        resolved = {_resolve(row_dir, p) for p in paths}
        if how == "only in":
            ban.only_in = resolved
        else:
            ban.except_in = resolved
    return ban


def parse_table(text: str) -> list[Row]:
    """The rows of the table whose header is ``| module | owns | does not import |``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if re.fullmatch(r"\|\s*module\s*\|\s*owns\s*\|\s*does not import\s*\|", line))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in _split_top(line.strip().strip("|"), "|")]
        if len(cells) != 3:
            raise ValueError(f"a table row needs 3 cells: {line!r}")
        subjects = re.findall(r"`([^`]+)`", cells[0])
        for s in subjects:
            if not (PKG / s).exists():
                raise ValueError(f"{s!r} (first column) is not in lingbot_ros/")
        row_dir = subjects[0] if subjects[0].endswith("/") else ""
        bans = [parse_ban(e, row_dir) for e in _split_top(cells[2]) if e.strip()]
        rows.append(Row(subjects, bans))
    return rows


@dataclass
class Door:
    """'Only `A` (and `B`) import(s) X': nothing else imports X directly."""
    name: str
    allowed: list[str]  # paths ('ros/') or patterns ('*_triton.py')

    def allows(self, rel: str) -> bool:
        return any(rel.startswith(p) if p.endswith("/") else
                   fnmatch.fnmatch(rel if "/" in p else rel.rsplit("/", 1)[-1], p)
                   for p in self.allowed)


def parse_doors(text: str) -> list[Door]:
    """The invariant bullet that starts with "Only": its clauses, split at ';'."""
    bullets = re.split(r"\n(?=- )", text)
    bullet = next(b for b in bullets if b.startswith("- Only "))
    doors = []
    for clause in " ".join(bullet[2:].split()).split(";"):
        m = re.fullmatch(r"\s*only (.+?) imports? (\w+)\b.*", clause, re.IGNORECASE)
        if not m or m.group(2) not in THIRD_PARTY:
            raise ValueError(f"cannot read the invariant {clause!r}")
        allowed = re.findall(r"`([^`]+)`", m.group(1))
        if not allowed:
            raise ValueError(f"{clause!r}: name the allowed files in backticks")
        doors.append(Door(m.group(2), allowed))
    return doors


DOC_TEXT = DOC.read_text()
ROWS = parse_table(DOC_TEXT)
DOORS = parse_doors(DOC_TEXT)


# --- checking ----------------------------------------------------------------------------

def row_module(subject: str) -> str:
    return "lingbot_ros." + subject.rstrip("/").removesuffix(".py").replace("/", ".")


def violations(row: Row, imports=imports_of, reach=reached) -> list[str]:
    """Every import of a file of ``row`` that one of its bans forbids, as readable lines.
    ``imports(module)``: the dotted names a module imports; ``reach(module)``: the modules
    loading it loads (both replaceable to test this checker on a made-up graph)."""
    inside = {row_module(s) for s in row.subjects}
    found = []
    for rel in row.files():
        me = module_name(PKG / rel)
        for ban in row.bans:
            if (ban.only_in is not None and rel not in ban.only_in) or rel in ban.except_in:
                continue
            if ban.third_party:
                sources = reach(me) if ban.name in TRANSITIVE else {me}
                for src in sorted(sources):
                    hits = {n for n in imports(src) if third_party_top(n) == ban.name}
                    if hits:
                        via = "" if src == me else f" via {src}"
                        found.append(f"{rel} imports {ban.name}{via}: {sorted(hits)}")
                continue
            for name in sorted(imports(me)):
                target = lingbot_module(name)
                if target is None:
                    continue
                if ban.name == "lingbot_ros":
                    bad = not any(target == m or target.startswith(m + ".") for m in inside)
                else:
                    part = f"lingbot_ros.{ban.name}"
                    bad = (target.startswith(part + ".") if ban.internals
                           else target == part or target.startswith(part + "."))
                if bad:
                    found.append(f"{rel} imports {target} (banned: {ban.name}"
                                 f"{' internals' if ban.internals else ''})")
    return found


def test_the_document_has_the_rules_this_test_reads():
    subjects = {s for row in ROWS for s in row.subjects}
    assert {"config.py", "geometry/", "cache/", "attention/", "model/", "session/", "ros/",
            "tools/"} <= subjects
    assert all(row.bans for row in ROWS), [row.id for row in ROWS if not row.bans]
    assert {d.name for d in DOORS} == {"rclpy", "flashinfer", "triton"}
    geometry = next(row for row in ROWS if row.subjects == ["geometry/"])
    assert {b.name for b in geometry.bans} >= {"torch", "rclpy", "lingbot_ros"}


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_every_row_of_the_table_holds(row):
    found = violations(row)
    assert not found, "docs/architecture.md's table is broken:\n" + "\n".join(found)


@pytest.mark.parametrize("door", DOORS, ids=[d.name for d in DOORS])
def test_only_the_named_doors_import_their_library(door):
    found = []
    for f in files():
        rel = f.relative_to(PKG).as_posix()
        if door.allows(rel):
            continue
        hits = {n for n in runtime_imports(f) if third_party_top(n) == door.name}
        if hits:
            found.append(f"{rel}: {sorted(hits)}")
    assert not found, f"only {door.allowed} may import {door.name}:\n" + "\n".join(found)


TORCH_FREE_ROWS = [row for row in ROWS
                   if any(b.name == "torch" and b.only_in is None and not b.except_in
                          for b in row.bans)]


@pytest.mark.parametrize("row", TORCH_FREE_ROWS, ids=[row.id for row in TORCH_FREE_ROWS])
def test_torch_free_modules_load_without_torch(row):
    """At run time: importing every module of the row (packages' ``__init__`` included) in a
    fresh interpreter loads no torch."""
    modules = sorted({module_name(PKG / rel) for rel in row.files()})
    code = ("import importlib, sys\n"
            f"for m in {modules!r}:\n"
            "    importlib.import_module(m)\n"
            "    assert 'torch' not in sys.modules, m + ' loads torch'\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_the_checker_finds_what_the_rules_forbid():
    """On a made-up graph: a direct and a transitive torch import, a banned package, a
    package's internals against its API, the row's own files and the narrowing."""
    graph = {"lingbot_ros.geometry.a": {"numpy", "lingbot_ros.geometry.b"},
             "lingbot_ros.geometry.b": {"lingbot_ros.cache.errors"},
             "lingbot_ros.cache.errors": {"torch.nn"}}
    reach = {"lingbot_ros.geometry.a": {"lingbot_ros.geometry.a", "lingbot_ros.geometry.b",
                                        "lingbot_ros.cache.errors"}}
    row = Row(["geometry/"], [Ban("torch"), Ban("lingbot_ros")])
    row.files = lambda: ["geometry/a.py"]
    found = violations(row, lambda m: graph.get(m, set()), lambda m: reach[m])
    assert found == ["geometry/a.py imports torch via lingbot_ros.cache.errors: ['torch.nn']"]
    row.files = lambda: ["geometry/b.py"]
    found = violations(row, lambda m: graph.get(m, set()), lambda m: {m})
    assert found == ["geometry/b.py imports lingbot_ros.cache.errors (banned: lingbot_ros)"]
    internals = Row(["ros/"], [Ban("cache", internals=True)])
    internals.files = lambda: ["ros/x.py"]
    api = {"lingbot_ros.ros.x": {"lingbot_ros.cache"}}
    assert violations(internals, lambda m: api.get(m, set()), lambda m: {m}) == []
    api = {"lingbot_ros.ros.x": {"lingbot_ros.cache.page_table"}}
    assert violations(internals, lambda m: api.get(m, set()), lambda m: {m}) == [
        "ros/x.py imports lingbot_ros.cache.page_table (banned: cache internals)"]
    narrowed = Row(["cache/"], [Ban("torch", only_in={"cache/page_pool.py"})])
    narrowed.files = lambda: ["cache/storage.py"]
    assert violations(narrowed, lambda m: {"torch"}, lambda m: {m}) == []


def test_the_document_grammar_refuses_what_it_cannot_read():
    with pytest.raises(ValueError, match="neither a part of lingbot_ros"):
        parse_ban("tensorflow", "")
    with pytest.raises(ValueError, match="cannot read"):
        parse_ban("torch (mostly)", "")
    with pytest.raises(ValueError, match="names no file"):
        parse_ban("torch (only in `nowhere.py`)", "cache/")
    assert parse_ban("torch (only in `page_pool.py`)", "cache/").only_in == {"cache/page_pool.py"}
    assert parse_ban("ros (except `tools/replay/player.py`)", "tools/").except_in == {
        "tools/replay/player.py"}
    assert parse_ban("session internals", "").internals


# --- the package APIs, cycles and private names ------------------------------------------

@pytest.mark.parametrize("package", ["lingbot_ros.session", "lingbot_ros.geometry"])
def test_packages_export_what_they_name(package):
    import importlib
    mod = importlib.import_module(package)
    assert all(hasattr(mod, name) for name in mod.__all__)


def test_the_session_package_exports_its_api():
    import lingbot_ros.session as session
    assert {"StreamingSession", "StreamRunner", "StepKind", "FrameResult", "FrameRejected",
            "open_session", "warm_up"} <= set(session.__all__)


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
    # the graph is built
    assert "lingbot_ros.ros.intake.convert" in graph["lingbot_ros.ros.intake.worker"]
    cycles = import_cycles(graph)
    assert not cycles, "import cycles (TYPE_CHECKING imports excluded):\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles)


@pytest.mark.parametrize("root", [PKG, TESTS], ids=["lingbot_ros", "tests"])
def test_no_private_names_imported_across_modules(root):
    """A name shared between modules is public: no ``from .x import _helper`` anywhere."""
    for f in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(), filename=str(f))):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                private = [a.name for a in node.names
                           if a.name.startswith("_") and not a.name.startswith("__")]
                assert not private, (f.relative_to(root.parent).as_posix(), node.lineno, private)
# --- the floors: a part imports only parts on lower floors, never one beside it ------------

@dataclass
class Floors:
    """One "- `scope/`: `a`, `b` → `c` → ..." line of the document: the scope's parts (its
    subpackages and modules), ground floor first."""
    scope: str  # '' for lingbot_ros/ itself, else 'ros/', 'tools/', ...
    floors: list[list[str]]  # parts as written: 'geometry/', 'config.py'

    def floor_of(self, part: str) -> Optional[int]:
        return next((i for i, f in enumerate(self.floors) if part in f), None)

    def part_of(self, rel: str) -> Optional[str]:
        """The part of the scope a file (relative to lingbot_ros/) lies in; None outside the
        scope and for the scope's own ``__init__.py`` (its API)."""
        if not rel.startswith(self.scope):
            return None
        rest = rel[len(self.scope):]
        if rest == "__init__.py":
            return None
        head, sep, _ = rest.partition("/")
        return head + "/" if sep else head


def parse_floors(text: str) -> list[Floors]:
    start = text.index("tests/test_import_boundaries.py reads these floors")
    out = []
    for line in text[start:].splitlines()[1:]:
        if not line.startswith("- `"):
            if out:
                break
            continue
        m = re.fullmatch(r"- `([\w/]+)`: (.+)", line.strip())
        if not m:
            raise ValueError(f"cannot read the floors line {line!r}")
        scope = "" if m.group(1) == "lingbot_ros/" else m.group(1)
        floors = [re.findall(r"`([^`]+)`", f) for f in m.group(2).split("→")]
        if not all(floors):
            raise ValueError(f"an empty floor in {line!r}")
        out.append(Floors(scope, floors))
    return out


FLOORS = parse_floors(DOC_TEXT)


def floor_violations(fl: Floors, imports=None) -> list[str]:
    """Every import from one part of the scope to a part on the same floor (sideways) or
    above; every part of the scope that no floor names."""
    graph = imports or {module_name(f): lingbot_imports(f) for f in files()}
    found = []
    for name in sorted(graph):
        rel = MODULES[name].relative_to(PKG).as_posix() if name in MODULES else name
        mine = fl.part_of(rel)
        if mine is None:
            continue
        if fl.floor_of(mine) is None:
            found.append(f"{fl.scope}{mine} is on no floor")
            continue
        for target in sorted(graph[name]):
            trel = (MODULES[target].relative_to(PKG).as_posix() if target in MODULES
                    else target)
            theirs = fl.part_of(trel)
            if theirs is None or theirs == mine or fl.floor_of(theirs) is None:
                continue
            if fl.floor_of(theirs) >= fl.floor_of(mine):
                how = "beside it" if fl.floor_of(theirs) == fl.floor_of(mine) else "above it"
                found.append(f"{rel} imports {target}: {fl.scope}{theirs} is {how}")
    return sorted(set(found))


def test_the_document_states_the_floors():
    scopes = {fl.scope for fl in FLOORS}
    assert {"", "ros/", "tools/"} <= scopes
    top = next(fl for fl in FLOORS if fl.scope == "")
    assert top.floor_of("geometry/") == 0 and top.floor_of("ros/") == top.floor_of("tools/")


@pytest.mark.parametrize("fl", FLOORS, ids=[fl.scope or "lingbot_ros/" for fl in FLOORS])
def test_every_part_is_on_a_floor_and_imports_only_downward(fl):
    found = floor_violations(fl)
    assert not found, "docs/architecture.md's floors are broken:\n" + "\n".join(found)


def test_the_floor_checker_finds_sideways_and_upward_imports():
    fl = Floors("ros/", [["params/"], ["tf/", "outputs/"], ["node.py"]])
    graph = {"ros/tf/a.py": {"ros/outputs/b.py", "ros/params/c.py"},
             "ros/outputs/b.py": {"ros/node.py"}, "ros/params/c.py": set(),
             "ros/node.py": {"ros/tf/a.py"}, "ros/new/d.py": set()}
    assert floor_violations(fl, graph) == [
        "ros/new/ is on no floor",
        "ros/outputs/b.py imports ros/node.py: ros/node.py is above it",
        "ros/tf/a.py imports ros/outputs/b.py: ros/outputs/ is beside it"]
