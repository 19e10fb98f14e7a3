"""lingbot-ros-view's command line: its errors, where it listens, the missing extra."""
import logging
import socket
import sys

import pytest

from lingbot_ros.tools.view import cli
from lingbot_ros.tools.view.scene import SceneModel
from lingbot_ros.tools.view.server import INSTALL_HINT, ViewerUnavailable, require_viser


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_either_a_run_folder_or_ros(capsys):
    for argv in ([], ["run", "--ros"]):
        with pytest.raises(SystemExit) as exc:
            cli.parse_args(argv)
        assert exc.value.code == 2
    assert "give either RUN_DIR or --ros" in capsys.readouterr().err
    args = cli.parse_args(["run"])
    assert args.host == "127.0.0.1" and args.port == 8080  # loopback unless --host


def test_a_bad_run_folder_is_one_error_line(tmp_path, caplog):
    assert cli.main([str(tmp_path / "missing")]) == cli.EXIT_FAILED
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [f"RUN_DIR {tmp_path / 'missing'}: no such folder"]


def test_ros_needs_the_console_entry_point(caplog):
    assert cli.main(["--ros"]) == cli.EXIT_FAILED
    assert "--ros needs the lingbot-ros-view command" in caplog.text


def test_without_viser_it_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "viser", None)  # as if not installed
    with pytest.raises(ViewerUnavailable, match="pip install 'lingbot_ros\\[view\\]'"):
        require_viser()
    assert "viser" in INSTALL_HINT


def test_listening_beyond_loopback_warns(caplog):
    pytest.importorskip("viser", reason="the view extra (make test installs it)")
    from lingbot_ros.tools.view.server import Viewer
    viewer = Viewer(SceneModel(), host="127.0.0.1", port=free_port())
    viewer.close()
    assert "anyone who can reach" not in caplog.text
    viewer = Viewer(SceneModel(), host="0.0.0.0", port=free_port())
    try:
        assert viewer.url.startswith("http://127.0.0.1:")
    finally:
        viewer.close()
    assert "listens on 0.0.0.0: anyone who can reach this machine" in caplog.text
