"""A truncated rosbag2 (sqlite3 and mcap, as the repo's writer makes them, then cut as a
killed recorder leaves them) is read up to the cut by tools/sources/bag_salvage.py: the more of the
file is left, the more whole messages, each the one written, never a broken one."""
import numpy as np
import pytest

from lingbot_ros.tools.sources.bag import BagDepthStream, BagSource
from lingbot_ros.tools.sources.bag_salvage import salvage
from lingbot_ros.tools.synthetic.render import render_sequence
from lingbot_ros.tools.synthetic.writers import write_bag


@pytest.fixture(scope="module")
def seq():
    return render_sequence(12, 64, 48)


def cut_copy(bag, tmp_path, fraction):
    out = tmp_path / f"cut_{round(fraction * 100)}"
    out.mkdir()
    for p in bag.iterdir():
        data = p.read_bytes()
        if p.suffix in (".db3", ".mcap"):
            data = data[:int(len(data) * fraction)]
        (out / p.name).write_bytes(data)
    return out


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_more_file_gives_more_whole_messages_each_as_written(tmp_path, seq, storage):
    bag = write_bag(seq, tmp_path / "bag", storage=storage).path
    whole = salvage(bag)
    assert whole.cut is None and whole.topics()["/camera/image_raw"][1] == len(seq)
    counts = []
    for fraction in (0.3, 0.55, 0.8):
        cut = salvage(cut_copy(bag, tmp_path, fraction))
        assert cut.cut and storage.replace("3", "").upper()[:4] in cut.cut.upper()
        source = BagSource(cut.files[0].parent)
        frames = list(source)
        assert source.ended_early and "truncated" in source.ended_early
        assert source.truncated and len(source) == len(frames)
        for frame in frames:  # each the one written: its stamp names its image
            i = int(np.searchsorted(seq.stamps_ns, frame.stamp_ns))
            np.testing.assert_array_equal(frame.image, seq.images[i])
        counts.append(len(frames))
    assert counts == sorted(counts) and counts[-1] > 0 and counts[-1] < len(seq), counts


def test_the_depth_of_a_truncated_bag_is_read_beside_its_colour(tmp_path, seq):
    bag = cut_copy(write_bag(seq, tmp_path / "bag", storage="sqlite3").path, tmp_path, 0.7)
    depth = BagDepthStream(bag, "/camera/aligned_depth_to_color/image_raw")
    frames = list(BagSource(bag))
    found = [depth.nearest(f.stamp_ns) for f in frames]
    assert sum(r is not None and r.stamp_ns == f.stamp_ns for r, f in zip(found, frames)) >= \
        len(frames) - 1


def test_a_file_that_is_no_bag_at_all_is_one_clear_error(tmp_path):
    bag = tmp_path / "rec.mcap"
    bag.write_bytes(b"not an mcap file, only text")
    with pytest.raises(ValueError, match="cannot be read"):
        BagSource(bag)
