"""Frame sources on generated folders and videos, including corrupt inputs (every bad frame
is skipped, counted by reason, and never stops the run), and open_source's dispatch. Bags:
test_bag_source.py."""
import logging

import cv2
import numpy as np
import pytest

from lingbot_ros.preprocess import preprocess
from lingbot_ros.tools.sources.bag import BagSource, list_image_topics
from lingbot_ros.tools.sources.files import ImageFolderSource, SourceFrame, VideoSource, open_source
from lingbot_ros.tools.synthetic.render import render_sequence
from lingbot_ros.tools.synthetic.writers import write_bag, write_image_folder, write_video


@pytest.fixture(scope="module")
def seq():
    return render_sequence(12, width=64, height=48)


def as_rgb(frame: SourceFrame) -> np.ndarray:
    """A yielded 3-channel frame -> RGB uint8 (for comparing with the rendered images)."""
    img, enc = frame.image, frame.encoding
    if enc.startswith("bgr"):
        img = img[..., 2::-1]
    elif enc.startswith("rgba"):
        img = img[..., :3]
    return img


# --- image folders -----------------------------------------------------------------------

def test_folder_yields_every_frame_in_order_with_fps_stamps(seq, tmp_path):
    out = write_image_folder(seq, tmp_path / "f")
    src = ImageFolderSource(out.path, fps=seq.fps)
    frames = list(src)
    assert len(frames) == len(seq) == len(src)
    assert [f.stamp_ns for f in frames] == seq.index_stamps_ns.tolist()
    assert all(isinstance(f.stamp_ns, int) for f in frames)
    assert frames[0].encoding == "bgr8"
    assert np.array_equal(as_rgb(frames[5]), seq.images[5])
    assert src.stats.yielded == len(seq) and src.stats.total_skipped == 0
    x, _ = preprocess(frames[0].image, frames[0].encoding)  # feeds preprocess directly
    assert x.shape == (3, 392, 518)
    assert len(list(src)) == len(seq) and src.stats.yielded == len(seq)  # re-iterable


def test_folder_natural_order_and_formats(tmp_path):
    img = np.random.default_rng(0).integers(0, 255, (8, 10, 3), np.uint8)
    for name, data in [("f10.png", img), ("f2.png", img[..., 0]),
                       ("f1.png", (img.astype(np.uint16) * 257)),
                       ("f3.png", np.dstack([img, np.full((8, 10), 255, np.uint8)])),
                       ("f4.jpg", img)]:
        assert cv2.imwrite(str(tmp_path / name), data)
    (tmp_path / "notes.txt").write_text("not an image")
    frames = list(ImageFolderSource(tmp_path, fps=10))
    assert [f.encoding for f in frames] == ["bgr16", "mono8", "bgra8", "bgr8", "bgr8"]
    assert [f.stamp_ns for f in frames] == [0, 100_000_000, 200_000_000, 300_000_000, 400_000_000]
    for f in frames:
        assert preprocess(f.image, f.encoding)[0].shape[0] == 3


def test_folder_corrupt_files_are_skipped_and_counted(seq, tmp_path, caplog):
    out = write_image_folder(seq, tmp_path / "f")
    files = sorted(out.path.iterdir())
    data = files[2].read_bytes()
    files[2].write_bytes(data[: len(data) // 2])  # truncated PNG
    files[4].write_bytes(b"this is not a png at all")  # garbage with an image extension
    jpg = out.path / "frame_000007.jpg"  # a truncated JPEG beside (sorts after the png)
    ok, buf = cv2.imencode(".jpg", seq.images[7])
    jpg.write_bytes(buf.tobytes()[:-200])
    src = ImageFolderSource(out.path, fps=seq.fps)
    with caplog.at_level(logging.WARNING, logger="lingbot_ros.frame_sources"):
        frames = list(src)
    assert len(frames) == len(seq) - 2
    assert src.stats.skipped == {"corrupt": 3}
    assert src.stats.yielded + src.stats.total_skipped == len(seq) + 1
    # the truncated file keeps its slot on the timeline: no stamp shifts
    assert [f.stamp_ns for f in frames[:3]] == seq.index_stamps_ns[[0, 1, 3]].tolist()
    assert any("truncated PNG" in m for m in src.stats.messages)
    assert any("truncated JPEG" in m for m in src.stats.messages)
    assert sum("skipped corrupt" in r.getMessage() for r in caplog.records) == 3
    assert "skipped corrupt 3" in src.stats.summary()


def test_folder_every_extension_decodes_and_bombs_are_skipped_undecoded(tmp_path, monkeypatch):
    """Every IMAGE_EXTENSIONS file decodes (the compressed decoder the node uses). A file whose
    header declares 16000 x 16000 is skipped as too_large before OpenCV sees it, and bytes in
    no format we read are skipped as corrupt, undecoded."""
    from lingbot_ros.tools.sources.files import IMAGE_EXTENSIONS
    from lingbot_ros.tools.sources.frame import MAX_IMAGE_PIXELS, SKIP_REASONS
    from tests.test_image_header import png_header, vp8l_constant
    img = np.random.default_rng(2).integers(0, 255, (8, 10, 3), np.uint8)
    for i, ext in enumerate(IMAGE_EXTENSIONS):
        data = img[..., 0] if ext == ".pgm" else img
        ok, buf = cv2.imencode(".ppm" if ext == ".pnm" else ext, data)
        (tmp_path / f"f{i:02d}{ext}").write_bytes(buf.tobytes())
    bomb = vp8l_constant(16000, 16000)  # 38 valid bytes that decode to 16000 x 16000
    (tmp_path / "f90.webp").write_bytes(bomb)
    (tmp_path / "f91.png").write_bytes(png_header(16000, 16000) + bytes(12) + b"IEND" + bytes(4))
    (tmp_path / "f92.jpg").write_bytes(b"no image format starts like this, 123 \xff\xd9")
    decoded = []
    real_imdecode = cv2.imdecode

    def imdecode(buf, flags):  # the real decoder, remembering what it was given
        decoded.append(bytes(buf))
        return real_imdecode(buf, flags)
    monkeypatch.setattr(cv2, "imdecode", imdecode)
    src = ImageFolderSource(tmp_path, fps=10)
    frames = list(src)
    assert len(frames) == len(IMAGE_EXTENSIONS) == len(decoded)
    assert bomb not in decoded
    for f in frames:
        assert f.image.shape[:2] == (8, 10)
        assert f.encoding == ("mono8" if f.image.ndim == 2 else "bgr8")
    assert src.stats.skipped == {"too_large": 2, "corrupt": 1}
    assert set(src.stats.skipped) <= set(SKIP_REASONS)
    text = " | ".join(src.stats.messages)
    assert text.count(f"declares 16000x16000, over max_pixels={MAX_IMAGE_PIXELS}") == 2
    assert "f92.jpg: unknown_format" in text


def test_bag_compressed_bomb_is_skipped_undecoded(monkeypatch):
    from types import SimpleNamespace

    from lingbot_ros.tools.sources.bag import image_from_compressed
    from lingbot_ros.tools.sources.frame import SkippedFrame
    from tests.test_image_header import vp8l_constant

    def imdecode(*args, **kwargs):
        raise AssertionError("cv2.imdecode was called")
    monkeypatch.setattr(cv2, "imdecode", imdecode)
    msg = SimpleNamespace(format="webp", data=np.frombuffer(vp8l_constant(16000, 16000),
                                                            np.uint8))
    with pytest.raises(SkippedFrame, match="declares 16000x16000") as err:
        image_from_compressed(msg)
    assert err.value.reason == "too_large"


def test_folder_stamps_from_file_names(tmp_path):
    img = np.zeros((4, 4, 3), np.uint8)
    for name in ("1305031102.175304.png", "1305031102.211214.png", "1305031102.2112140.png",
                 "garbage.png"):
        cv2.imwrite(str(tmp_path / name), img)
    src = ImageFolderSource(tmp_path, stamps="filename")
    frames = list(src)
    assert [f.stamp_ns for f in frames] == [1305031102175304000, 1305031102211214000]
    assert src.stats.skipped == {"non_monotonic_stamp": 1, "bad_stamp": 1}


def test_folder_stamps_from_nanosecond_names(tmp_path):
    """EuRoC names: an integer of 16+ digits is nanoseconds, exactly (no float on the way)."""
    img = np.zeros((4, 4, 3), np.uint8)
    for name in ("1403636579813555456.png", "1403636579763555584.png", "20.png"):
        cv2.imwrite(str(tmp_path / name), img)
    src = ImageFolderSource(tmp_path, stamps="filename")
    assert src.name_kind is None  # mixed names: "20" is neither kind
    assert [f.stamp_ns for f in src] == [20_000_000_000, 1403636579763555584,
                                         1403636579813555456]  # short integers: seconds
    (tmp_path / "20.png").unlink()
    auto = ImageFolderSource(tmp_path, stamps="auto")
    assert (auto.stamps, auto.name_kind) == ("filename", "nanoseconds")
    assert [f.stamp_ns for f in auto] == [1403636579763555584, 1403636579813555456]


def test_folder_filename_stamps_are_ordered_by_time_and_auto_falls_back_to_fps(tmp_path):
    img = np.zeros((4, 4, 3), np.uint8)
    for name in ("1.5.png", "1.25.png", "10.0.png"):  # natural order would be 1.5 < 1.25
        cv2.imwrite(str(tmp_path / name), img)
    src = ImageFolderSource(tmp_path, stamps="auto")
    assert (src.stamps, src.name_kind) == ("filename", "seconds")
    assert [f.stamp_ns for f in src] == [1_250_000_000, 1_500_000_000, 10_000_000_000]
    cv2.imwrite(str(tmp_path / "frame_1.png"), img)
    src = ImageFolderSource(tmp_path, fps=4, stamps="auto")
    assert src.stamps == "fps"
    assert [f.stamp_ns for f in src] == [0, 250_000_000, 500_000_000, 750_000_000]


def test_folder_open_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ImageFolderSource(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="no images"):
        ImageFolderSource(tmp_path)
    with pytest.raises(ValueError, match="fps"):
        ImageFolderSource(tmp_path, fps=0)
    with pytest.raises(ValueError, match="stamps"):
        ImageFolderSource(tmp_path, stamps="mtime")


# --- videos ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["v.avi", "v.mp4"])
def test_video_frames_and_stamps(seq, tmp_path, name):
    out = write_video(seq, tmp_path / name)
    src = VideoSource(out.path)
    frames = list(src)
    assert len(frames) == len(seq) and src.stats.total_skipped == 0
    assert [f.stamp_ns for f in frames] == seq.index_stamps_ns.tolist()
    assert frames[0].encoding == "bgr8" and frames[0].image.shape == (48, 64, 3)
    assert np.abs(as_rgb(frames[3]).astype(int) - seq.images[3]).mean() < 15


def test_truncated_and_corrupt_videos(seq, tmp_path):
    out = write_video(seq, tmp_path / "v.avi")
    data = out.path.read_bytes()
    cut = tmp_path / "cut.avi"
    cut.write_bytes(data[: len(data) // 2])
    src = VideoSource(cut)
    frames = list(src)  # no crash: what decodes is yielded, the rest is counted
    assert 0 < len(frames) < len(seq)
    assert src.stats.skipped["missing_frames"] == len(seq) - len(frames)
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00" * 1000)
    with pytest.raises(ValueError, match="cannot open video"):
        VideoSource(bad)
    with pytest.raises(FileNotFoundError):
        VideoSource(tmp_path / "missing.mp4")


def test_open_source_dispatch(seq, tmp_path):
    folder = write_image_folder(seq, tmp_path / "f").path
    video = write_video(seq, tmp_path / "v.avi").path
    bag = write_bag(seq, tmp_path / "b", camera_info_topic=None).path
    assert isinstance(open_source(folder, fps=seq.fps), ImageFolderSource)
    assert isinstance(open_source(video), VideoSource)
    b = open_source(bag)
    assert isinstance(b, BagSource) and b.topic == "/camera/image_raw"
    assert isinstance(open_source(next(bag.glob("*.db3"))), BagSource)  # the storage file
    with pytest.raises(FileNotFoundError):
        open_source(tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        list_image_topics(tmp_path / "missing_bag")


def test_strided_takes_every_nth_frame_from_the_first(tmp_path):
    from lingbot_ros.tools.sources.frame import Strided
    folder = tmp_path / "imgs"
    folder.mkdir()
    for i in range(7):
        cv2.imwrite(str(folder / f"{i:03d}.png"), np.full((4, 6, 3), 10 * i, np.uint8))
    source = open_source(folder, fps=10.0)
    strided = Strided(source, 3)
    frames = list(strided)
    assert len(strided) == 3 == len(frames)  # frames 0, 3, 6
    assert [int(f.image[0, 0, 0]) for f in frames] == [0, 30, 60]
    assert [f.stamp_ns for f in frames] == [0, 300_000_000, 600_000_000]
    assert strided.stats is source.stats and strided.stats.yielded == 7
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="stride must be an integer >= 1"):
            Strided(source, bad)
