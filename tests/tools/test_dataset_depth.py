"""The aligned sensor depth the dataset readers give (``Dataset.depth``) for ``--scale depth``:
TUM RGB-D (16-bit PNG, 5000 per metre, associated by stamp), 7-Scenes (millimetres, 65535
invalid), the synthetic writers (TUM depth/ + depth.txt, a 16UC1 topic in bags)."""
import cv2
import numpy as np
import pytest

from lingbot_ros.geometry import format_stamp
from lingbot_ros.tools.sources.bag import DEFAULT_DEPTH_TOPIC, BagSource
from lingbot_ros.tools.sources.datasets import open_dataset
from lingbot_ros.tools.synthetic.render import render_sequence
from lingbot_ros.tools.synthetic.writers import depth_to_u16, write_bag, write_tum_rgbd
from tests.tools.dataset_layouts import write_seven_scenes, write_tum_rgbd as tum_layout


def test_tum_depth_is_5000_per_metre_associated_by_nearest_stamp(tmp_path):
    root = tum_layout(tmp_path / "fr1", ["1305031102.175304", "1305031102.211214"])
    raw = np.array([[0, 5000, 10000, 65535], [2500, 1, 7500, 0]], np.uint16)
    (root / "depth").mkdir()
    lines = ["# depth maps", "# timestamp filename"]
    for stamp, scale in (("1305031102.160407", 1), ("1305031102.226738", 2)):
        assert cv2.imwrite(str(root / "depth" / f"{stamp}.png"), raw // scale)
        lines.append(f"{stamp} depth/{stamp}.png")
    lines.append("1305031102.300000 depth/missing.png")
    (root / "depth.txt").write_text("\n".join(lines) + "\n")
    ds = open_dataset(root)
    assert ds.depth is not None and "3 depth images" in ds.description
    first = ds.depth.nearest(1305031102175304000)
    assert first.stamp_ns == 1305031102160407000 and first.encoding == "32FC1"
    expect = raw.astype(np.float32) / 5000
    expect[raw == 0] = np.nan  # no reading
    np.testing.assert_array_equal(first.image, expect)
    second = ds.depth.nearest(1305031102211214000)  # 15.5 ms after, 50.8 ms before
    assert second.stamp_ns == 1305031102226738000
    np.testing.assert_array_equal(second.image[0, 1:3], [0.5, 1.0])
    assert ds.depth.nearest(1305031102290000000) is None  # a missing file: counted, no crash
    assert ds.depth.stats["missing_file"] == 1


def test_tum_without_depth_entries_has_no_depth(tmp_path):
    root = tum_layout(tmp_path / "fr1", ["1305031102.175304"])  # an empty depth.txt
    assert open_dataset(root).depth is None


def test_seven_scenes_depth_is_millimetres_with_65535_invalid(tmp_path):
    seq = write_seven_scenes(tmp_path / "chess" / "seq-01", {0: np.eye(4), 1: np.eye(4)})
    raw = np.array([[1000, 65535], [0, 2345]], np.uint16)
    assert cv2.imwrite(str(seq / "frame-000001.depth.png"), raw)
    ds = open_dataset(seq)
    assert ds.depth is not None
    reading = ds.depth.nearest(round(1e9 / 30))
    assert reading.stamp_ns == round(1e9 / 30) and reading.encoding == "32FC1"
    np.testing.assert_array_equal(reading.image,
                                  np.array([[1.0, np.nan], [np.nan, 2.345]], np.float32))
    np.testing.assert_allclose(ds.depth.nearest(0).image, 1.0, rtol=1e-6)  # 1000 mm


def test_a_bad_depth_file_is_skipped_and_counted(tmp_path):
    seq = write_seven_scenes(tmp_path / "seq-01", {0: np.eye(4)})
    cv2.imwrite(str(seq / "frame-000000.depth.png"), np.zeros((4, 4, 3), np.uint8))
    ds = open_dataset(seq)
    assert ds.depth.nearest(0) is None and ds.depth.stats["unreadable"] == 1


def test_synthetic_tum_rgbd_writes_the_rendered_metric_depth(tmp_path):
    seq = render_sequence(3, 40, 30)
    ds = open_dataset(write_tum_rgbd(seq, tmp_path / "tum").path)
    for i, stamp in enumerate((seq.stamps_ns // 1000) * 1000):
        reading = ds.depth.nearest(int(stamp))
        assert reading.stamp_ns == stamp  # the colour image's stamp
        np.testing.assert_allclose(reading.image, seq.depths[i], atol=0.5 / 5000 + 1e-6)
    text = (tmp_path / "tum" / "depth.txt").read_text()
    assert f"{format_stamp(int(seq.stamps_ns[1]))[:-3]} depth/" in text


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_synthetic_bags_carry_a_16uc1_aligned_depth_topic(tmp_path, storage):
    seq = render_sequence(3, 40, 30)
    bag = write_bag(seq, tmp_path / "bag", storage=storage).path
    assert BagSource(bag).topic == "/camera/image_raw"  # the depth topic is never picked
    ds = open_dataset(bag)
    assert ds.depth is not None and DEFAULT_DEPTH_TOPIC in ds.description
    for i, stamp in enumerate(seq.stamps_ns):
        reading = ds.depth.nearest(int(stamp))
        assert reading.stamp_ns == stamp and reading.encoding == "16UC1"
        np.testing.assert_array_equal(reading.image, depth_to_u16(seq.depths[i], 1000.0))
    assert ds.depth.nearest(int(seq.stamps_ns[-1]) + 10**9).stamp_ns == seq.stamps_ns[-1]
    with pytest.raises(ValueError, match="no depth Image topic"):
        open_dataset(bag, depth_topic="/nope")
    no_depth = write_bag(seq, tmp_path / "plain", storage=storage, depth_topic=None).path
    assert open_dataset(no_depth).depth is None


def test_depth_topic_applies_to_bags_only(tmp_path):
    root = tum_layout(tmp_path / "fr1", ["1305031102.175304"])
    with pytest.raises(ValueError, match="bags only"):
        open_dataset(root, depth_topic="/camera/depth")


def test_depth_to_u16_marks_no_reading_as_zero():
    d = np.array([np.nan, np.inf, -1.0, 0.0, 1.2344, 70.0])
    np.testing.assert_array_equal(depth_to_u16(d, 1000.0), [0, 0, 0, 0, 1234, 0])
