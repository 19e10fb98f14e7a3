"""No logging call site of lingbot_ros can choose its severity at run time.

rclpy keys a logging call by its call site (file, line, bytecode offset) and refuses a second
call there at another severity (``ValueError: Logger severity cannot be changed between
calls``), and likewise another name or other filter parameters: ``(log.info if ok else
log.error)(...)`` kills the thread that logs on its second call. So each severity gets its own
call site: ``if ok: log.info(...)`` / ``else: log.error(...)``.

This walks every module of the package and refuses what lets a site's severity change:

- a logger method that is not called where it is named: picked by a conditional expression,
  passed as an argument, stored in a variable or an attribute, returned;
- ``getattr(logger, <not a constant>)``;
- ``logger.log(...)`` whose severity is not a constant;
- a throttle or once filter whose parameter is not a constant (rclpy refuses a change of
  those between calls too).

A logger is a ``get_logger()``/``getLogger()``/``get_child()`` call or a name ending in
``log``/``logger`` (``self._log``, ``_log``, ``logger``, ``logging``).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "lingbot_ros"
LOG_METHODS = {"debug", "info", "warning", "warn", "error", "fatal", "critical", "exception"}
FILTER_KWARGS = {"throttle_duration_sec", "throttle_time_source_type", "skip_first", "once"}
LOGGER_FACTORIES = {"get_logger", "getLogger", "get_child", "getChild"}


def _name_of(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def is_logger(node: ast.AST) -> bool:
    """Whether an expression is (by its name) a logger."""
    if isinstance(node, ast.Call):
        return _name_of(node.func) in LOGGER_FACTORIES
    name = _name_of(node).lower()
    return name.endswith(("log", "logger")) or name == "logging"


def _constant(node: ast.AST) -> bool:
    """A value that cannot change between two calls of one site: a literal, a module
    constant (``WARN_EVERY_S``) or a dotted name such as ``LoggingSeverity.WARN``."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id.isupper()
    if isinstance(node, ast.Attribute):
        return _constant(node.value) or isinstance(node.value, ast.Name)
    return False


def violations(source: str, filename: str = "<string>") -> list[str]:
    """``file:line: what`` for each site of ``source`` whose severity may change at run time."""
    tree = ast.parse(source, filename)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []

    def say(node: ast.AST, what: str) -> None:
        found.append(f"{filename}:{node.lineno}: {what}")

    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in LOG_METHODS
                and isinstance(node.ctx, ast.Load) and is_logger(node.value)):
            parent = parents.get(node)
            if not (isinstance(parent, ast.Call) and parent.func is node):
                kind = ("chosen by a conditional expression" if isinstance(parent, ast.IfExp)
                        else "not called where it is named (passed, stored or returned)")
                say(node, f"logger method .{node.attr} {kind}: its call site's severity "
                          "can change at run time; call each severity from its own site")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if (_name_of(func) == "getattr" and isinstance(func, ast.Name) and len(node.args) >= 2
                and is_logger(node.args[0]) and not _constant(node.args[1])):
            say(node, "getattr(logger, <not a constant>): a severity chosen at run time")
        if isinstance(func, ast.Attribute) and is_logger(func.value):
            if func.attr == "log":  # rclpy log(message, severity), logging log(level, msg)
                candidates = node.args[:2] + [k.value for k in node.keywords
                                              if k.arg in ("severity", "level")]
                if not any(_constant(a) and not isinstance(a, ast.Constant)
                           or isinstance(a, ast.Constant) and isinstance(a.value, int)
                           for a in candidates):
                    say(node, "logger.log(...) with a severity computed at run time")
            for keyword in node.keywords:
                if keyword.arg in FILTER_KWARGS and not _constant(keyword.value):
                    say(node, f"{keyword.arg}= not a constant: rclpy refuses a change of a "
                              "filter's parameters between calls")
    return found


def package_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_package_has_modules_to_check():
    files = package_files()
    assert len(files) > 50 and PACKAGE / "ros" / "intake" / "worker.py" in files


def test_no_logging_site_of_the_package_chooses_its_severity_at_run_time():
    found = [v for path in package_files()
             for v in violations(path.read_text(), str(path.relative_to(PACKAGE.parent)))]
    assert found == [], "\n".join(found)


@pytest.mark.parametrize("source", [
    # services.py before 27198e3: one site, the severity chosen per call
    "(self.get_logger().info if ok else self.get_logger().error)(message)",
    "log = self._log.info if ok else self._log.warning\nlog(message)",
    # frame_worker.py before: a throttle helper called with the severity to use
    "self._throttled('rejected', 2.0, self._log.warning, message)",
    "StreamScale(config, warn=self.get_logger().warning)",
    "self._warn = warn or _log.warning",
    "def pick(self):\n    return self._logger.error",
    "getattr(self.get_logger(), level)(message)",
    "getattr(logger, 'info' if ok else 'error')(message)",
    "self.get_logger().log(message, severity)",
    "logging.log(logging.INFO if ok else logging.ERROR, message)",
    "self.get_logger().warning(message, throttle_duration_sec=period)",
])
def test_a_severity_chosen_at_run_time_is_refused(source):
    assert violations(source), source


@pytest.mark.parametrize("source", [
    "if ok:\n    self.get_logger().info(message)\nelse:\n    self.get_logger().error(message)",
    "self._log.warning(f'image rejected: {exc}')",
    "node.get_logger().warning('x', throttle_duration_sec=5.0)",
    "node.get_logger().warning('x', throttle_duration_sec=WARN_EVERY_S)",
    "getattr(self._log, 'info')(message)",
    "self.get_logger().log(message, LoggingSeverity.WARN)",
    "response.info = CacheInfo()\nitems = info.info\nfailed = result.error",
    "session.info()",
])
def test_a_severity_fixed_at_each_site_is_accepted(source):
    assert violations(source) == [], source
