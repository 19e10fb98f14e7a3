"""The fleet's output folder: a unit's folder is replaced in one step (geometry/atomic_dir.py)
by a later attempt's, and nothing of either attempt is left behind."""
import os

from lingbot_ros.tools.eval.fleet import OutputTree


def test_a_later_attempt_replaces_the_unit_folder_whole(tmp_path):
    tree = OutputTree(tmp_path / "out")
    tree.acquire()
    try:
        first = tree.new_staging("seq/all", "w0")
        (first / "poses.tum").write_text("first")
        (first / "only_first").write_text("x")
        final = tree.commit(first, "seq/all")
        assert final == tmp_path / "out" / "seq" / "all" and not first.exists()
        second = tree.new_staging("seq/all", "w1")
        (second / "poses.tum").write_text("second")
        inode = os.lstat(second).st_ino
        assert tree.commit(second, "seq/all") == final
        assert os.lstat(final).st_ino == inode  # the attempt's own folder, put in place
        assert sorted(p.name for p in final.iterdir()) == ["poses.tum"]
        assert (final / "poses.tum").read_text() == "second"
        state = tmp_path / "out" / ".fleet"
        assert not list((state / "staging").iterdir())
        assert not (state / "trash").exists() or not list((state / "trash").iterdir())
    finally:
        tree.release()
