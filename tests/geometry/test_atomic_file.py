"""The writers of trajectories and maps share one atomic write (``write_atomic``): a real
write error leaves the target as it was and no temporary file; a file the writer did not
write (no header of ours) is never replaced, and nothing is written to try."""
import subprocess
import sys
import types
from pathlib import Path

import pytest

# Each writer, called in a child process on sys.argv[1] with data larger than the limit.
WRITERS = {
    "write_tum": ("from lingbot_ros.geometry import write_tum\n"
                  "write_tum(sys.argv[1], range(100), np.tile(np.eye(4), (100, 1, 1)))\n"),
    "write_ply": ("from lingbot_ros.geometry import write_ply\n"
                  "write_ply(sys.argv[1], np.zeros((1000, 3)), np.zeros((1000, 3), np.uint8))\n"),
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_failed_write_leaves_the_target_and_no_temporary_file(tmp_path, writer):
    """EFBIG: the file size limit of a child process (it holds as root too)."""
    target = tmp_path / "out.file"
    # a file of ours first (the writer's code run here on a stand-in sys: the real argv stays)
    argv = types.SimpleNamespace(argv=[None, str(target)])
    exec(compile("import numpy as np\n" + WRITERS[writer], writer, "exec"), {"sys": argv})
    previous = target.read_bytes()
    call = "".join("    " + line + "\n" for line in WRITERS[writer].splitlines())
    code = ("import errno, resource, signal, sys\n"
            "import numpy as np\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (64, resource.RLIM_INFINITY))\n"
            "try:\n" + call +
            "except OSError as exc:\n"
            "    sys.exit(0 if exc.errno == errno.EFBIG else 3)\n"
            "sys.exit(2)\n")
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", code, str(target)], cwd=repo,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert target.read_bytes() == previous
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.file"]


@pytest.mark.parametrize("content", [b"", b"#", b"ssh-ed25519 AAAA user@host\n",
                                     b"# lingbot_ros trajectory (TUM)"])  # no line end
def test_a_file_without_our_header_is_never_replaced(tmp_path, content):
    from lingbot_ros.geometry import write_atomic
    ours = b"# lingbot_ros trajectory (TUM)\n"
    target = tmp_path / "authorized_keys"
    target.write_bytes(content)
    with pytest.raises(FileExistsError, match="not written by lingbot_ros") as err:
        write_atomic(target, ours + b"1 0 0 0 0 0 0 1\n", replaces=ours)
    assert str(target) in str(err.value)
    assert target.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["authorized_keys"]
    target.write_bytes(ours + b"old\n")  # ours: replaced
    write_atomic(target, ours + b"new\n", replaces=ours)
    assert target.read_bytes() == ours + b"new\n"
