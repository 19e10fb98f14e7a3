"""The depth source: crop like preprocessing, units, masks, robust ratio, counted rejections."""
from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from lingbot_ros.config import PreprocessConfig
from lingbot_ros.preprocess import compute_crop
from lingbot_ros.scale import (DepthBuffer, DepthSource, Rejection, ScaleConfig, ScaleEstimator,
                               ScaleSample, crop_depth, depth_sample, sensor_depth_m)

from .synth import ns

CFG = ScaleConfig(source="depth")
CROPS = {
    "reference_640x480": compute_crop((480, 640)),  # 518x392, no crop
    "fixed_640x480": compute_crop((480, 640), PreprocessConfig(width=518, height=378)),
    "fixed_1280x720": compute_crop((720, 1280), PreprocessConfig(width=518, height=378)),
    "tall_400x900": compute_crop((900, 400)),  # reference rule with a max_height crop
}


def scene_m(hw, rng) -> np.ndarray:
    """A smooth metric depth image (0.5 .. 6 m) of size hw."""
    h, w = hw
    y, x = np.mgrid[0:h, 0:w]
    return (0.5 + 2.5 * (1 + np.sin(x / 37.0) * np.cos(y / 23.0)) + 0.1 * rng.random(hw)) \
        .astype(np.float32)


def model_depth(sensor_m, crop, k, rng, noise=0.01):
    """What the model predicts: the sensor depth on the model's pixels / k, with noise."""
    pred = crop_depth(sensor_m, crop) / k
    return (pred * rng.normal(1.0, noise, pred.shape)).astype(np.float32)


@pytest.mark.parametrize("name", sorted(CROPS))
def test_crop_matches_the_preprocessing_geometry(name):
    """Each model pixel takes the original pixel nearest to where CropInfo maps it."""
    crop = CROPS[name]
    h, w = crop.input_hw
    index = (np.arange(h)[:, None] * w + np.arange(w)[None, :]).astype(np.float64)
    out = crop_depth(index, crop)
    assert out.shape == tuple(crop.output_hw)
    oh, ow = crop.output_hw
    uv = np.stack(np.meshgrid(np.arange(ow), np.arange(oh)), -1).astype(float)
    orig = crop.points_to_original(uv)  # (oh, ow, 2) continuous original coordinates
    row, col = np.divmod(out, w)
    # nearest (ties either way), clamped at the border
    assert (np.abs(col - np.clip(orig[..., 0], 0, w - 1)) <= 0.5 + 1e-9).all()
    assert (np.abs(row - np.clip(orig[..., 1], 0, h - 1)) <= 0.5 + 1e-9).all()


def test_nearest_neighbour_keeps_holes_holes():
    crop = CROPS["fixed_640x480"]
    img = np.full(crop.input_hw, 2000, np.uint16)
    img[:, ::2] = 0  # every other column a hole
    out = crop_depth(img, crop)
    assert set(np.unique(out)) <= {0, 2000}  # never a blend


@pytest.mark.parametrize("k", [0.05, 1.0, 3.7, 120.0])
@pytest.mark.parametrize("encoding", ["16UC1", "32FC1", "mono16"])
@pytest.mark.parametrize("name", ["fixed_640x480", "fixed_1280x720", "reference_640x480"])
def test_recovers_k_with_noise_holes_and_outliers(k, encoding, name):
    rng = np.random.default_rng(7)
    crop = CROPS[name]
    truth = scene_m(crop.input_hw, rng)
    pred = model_depth(truth, crop, k, rng, noise=0.03)
    sensor = truth.copy()
    holes = rng.random(sensor.shape) < 0.25
    outliers = rng.random(sensor.shape) < 0.1
    sensor[outliers] *= rng.uniform(0.2, 3.0, int(outliers.sum()))
    if encoding == "32FC1":
        sensor[holes] = rng.choice([0.0, np.nan, np.inf], int(holes.sum()))
        image = sensor
    else:
        sensor[holes] = 0.0
        image = np.round(sensor * 1000).astype(np.uint16)
    conf = np.where(rng.random(pred.shape) < 0.1, 1.0, 3.0).astype(np.float32)
    pred[conf < 1.5] *= 50  # low-confidence garbage, masked
    s = depth_sample(ns(1.0), image, encoding, pred, conf, crop, CFG)
    assert isinstance(s, ScaleSample), s
    assert s.stamp_ns == ns(1.0)
    assert s.metres_per_unit == pytest.approx(k, rel=0.01)
    assert s.support >= CFG.min_pixels


def test_depth_unit_override_and_big_endian():
    rng = np.random.default_rng(3)
    crop = CROPS["fixed_640x480"]
    truth = scene_m(crop.input_hw, rng)
    pred = model_depth(truth, crop, 2.0, rng)
    tenth_mm = np.round(truth * 1e4).astype(">u2")  # 0.1 mm units, big-endian
    cfg = ScaleConfig(source="depth", depth_unit_m=1e-4, depth_max_m=6.5)
    s = depth_sample(0, tenth_mm, "16UC1", pred, None, crop, cfg)
    assert s.metres_per_unit == pytest.approx(2.0, rel=0.01)
    np.testing.assert_allclose(sensor_depth_m(tenth_mm, "16UC1", 1e-4), truth, atol=1e-4)
    with pytest.raises(ValueError, match="not one of"):  # names exact, as image_decode's
        sensor_depth_m(tenth_mm, "16uc1", 1e-4)
    mm_as_float = (truth * 1000).astype(np.float32)
    cfg = ScaleConfig(source="depth", depth_unit_m=1e-3)
    assert depth_sample(0, mm_as_float, "32FC1", pred, None, crop, cfg).metres_per_unit \
        == pytest.approx(2.0, rel=0.01)


def test_estimator_locks_at_k_from_depth_frames():
    rng = np.random.default_rng(11)
    crop = CROPS["fixed_640x480"]
    src = DepthSource(CFG)
    est = ScaleEstimator(CFG)
    for i in range(CFG.min_samples):
        truth = scene_m(crop.input_hw, rng)
        pred = model_depth(truth, crop, 0.42, rng, noise=0.05)
        t = i / 30
        src.push_depth(ns(t + 0.004), np.round(truth * 1000).astype(np.uint16), "16UC1")
        e = est.add(src.sample(ns(t), pred, None, crop))
    assert e.locked and e.metres_per_unit == pytest.approx(0.42, rel=0.01)


def test_buffer_matches_exact_or_nearest_within_max_dt():
    buf = DepthBuffer(max_dt_s=0.02)
    r = buf.match(ns(1.0))
    assert (r.reason, r.stamp_ns) == ("no_depth", ns(1.0))
    img = np.zeros((2, 2), np.uint16)
    for t in (1.0, 1.033, 1.066):
        buf.push(ns(t), img, "16UC1")
    assert buf.match(ns(1.033)).stamp_ns == ns(1.033)
    assert buf.match(ns(1.05)).stamp_ns == ns(1.066)  # 16 ms away
    assert buf.match(ns(1.04)).stamp_ns == ns(1.033)
    r = buf.match(ns(1.2))
    assert isinstance(r, Rejection) and r.reason == "out_of_sync" and r.stamp_ns == ns(1.2)
    # max_dt_s in seconds, compared in exact ns (also at an epoch stamp)
    epoch = 1_700_000_000_123_456_789
    buf.push(epoch, img, "16UC1")
    assert buf.match(epoch + 20_000_000).stamp_ns == epoch
    assert buf.match(epoch - 20_000_000).stamp_ns == epoch
    assert buf.match(epoch + 20_000_001).reason == "out_of_sync"


def test_a_pinned_frame_keeps_its_depth_however_late_its_result_comes():
    """The node pins a frame's depth when it hands the frame in; its result may come after
    more depth images than the buffer holds (a slow machine) and still finds it."""
    rng = np.random.default_rng(5)
    crop = CROPS["fixed_640x480"]
    truth = scene_m(crop.input_hw, rng)
    pred = model_depth(truth, crop, 0.5, rng)
    mm = np.round(truth * 1000).astype(np.uint16)
    late, pinned = DepthSource(CFG, capacity=4), DepthSource(CFG, capacity=4)
    for src in (late, pinned):
        src.push_depth(0, mm, "16UC1")
    pinned.pin(0)
    pinned.pin(ns(5.0))  # no depth near 5 s yet: nothing pinned, sample looks again
    for i in range(1, 10):  # 9 newer depth images arrive while the frame is computed
        for src in (late, pinned):
            src.push_depth(ns(i / 30), mm, "16UC1")
    assert late.sample(0, pred, None, crop).reason == "out_of_sync"
    s = pinned.sample(0, pred, None, crop)
    assert s.metres_per_unit == pytest.approx(0.5, rel=0.01) and s.stamp_ns == 0
    assert pinned.sample(0, pred, None, crop).reason == "out_of_sync"  # used once
    pinned.push_depth(ns(5.0), mm, "16UC1")
    s = pinned.sample(ns(5.0), pred, None, crop)
    assert s.metres_per_unit == pytest.approx(0.5, rel=0.01) and s.stamp_ns == ns(5.0)


def good_frame(rng=np.random.default_rng(0)):
    crop = CROPS["fixed_640x480"]
    truth = scene_m(crop.input_hw, rng)
    return crop, np.round(truth * 1000).astype(np.uint16), model_depth(truth, crop, 2.0, rng)


def test_each_bad_input_gives_its_reason():
    crop, image, pred = good_frame()
    conf = np.full(pred.shape, 3.0, np.float32)
    cases = {
        "wrong_encoding": depth_sample(0, image, "rgb8", pred, conf, crop, CFG),
        "wrong_encoding ": depth_sample(0, image.astype(np.float32), "16UC1", pred, conf,
                                        crop, CFG),
        "wrong_size": depth_sample(0, image[:-2], "16UC1", pred, conf, crop, CFG),
        "wrong_size ": depth_sample(0, image, "16UC1", pred[:-1], conf, crop, CFG),
        "all_invalid": depth_sample(0, np.zeros_like(image), "16UC1", pred, conf, crop, CFG),
        "non_finite": depth_sample(0, image, "16UC1", np.where(pred > 1.5, np.nan, pred), conf,
                                   crop, CFG),
        "too_few_pixels": depth_sample(0, image, "16UC1", pred, np.ones_like(conf), crop, CFG),
    }
    for reason, r in cases.items():
        assert isinstance(r, Rejection) and r.reason == reason.strip(), (reason, r)
    est = ScaleEstimator(CFG)
    for r in cases.values():
        est.add(r)
    assert est.estimate.rejection_count("wrong_encoding") == 2
    assert est.estimate.samples == 0 and est.estimate.output_factor is None


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["16UC1", "32FC1", "mono16", "bgr8", "", "32FC3"]),
       st.sampled_from([np.uint16, np.float32, np.float64, np.uint8, np.int32]),
       st.integers(0, 3), st.integers(0, 3),
       st.sampled_from([0.0, np.nan, np.inf, -1.0, 1e-30, 1e30, 2.0]))
def test_garbage_never_raises(encoding, dtype, dh, dw, fill):
    crop, image, pred = good_frame()
    h, w = crop.input_hw
    img = np.zeros((h - dh, w - dw), dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        img[::3] = np.array(fill).astype(dtype) if np.isfinite(fill) or dtype in (
            np.float32, np.float64) else 0
        bad_pred = pred.copy()
        bad_pred[::5] = fill
    for p in (pred, bad_pred):
        r = depth_sample(0, img, encoding, p, None, crop, CFG)
        assert isinstance(r, (Rejection, ScaleSample))


@settings(max_examples=25, deadline=None)
@given(st.floats(0.01, 100.0), st.floats(0.0, 0.03), st.floats(0.0, 0.97),
       st.floats(0.0, 0.2), st.sampled_from(["16UC1", "32FC1"]), st.integers(0, 2**31))
def test_property_recovers_k_within_1_percent_or_refuses(k, noise, holes, outliers, encoding,
                                                        seed):
    rng = np.random.default_rng(seed)
    crop = CROPS["fixed_640x480"]
    truth = scene_m(crop.input_hw, rng)
    pred = model_depth(truth, crop, k, rng, noise=noise)
    sensor = truth.copy()
    bad = rng.random(sensor.shape) < outliers
    sensor[bad] *= rng.uniform(0.2, 3.0, int(bad.sum()))
    sensor[rng.random(sensor.shape) < holes] = 0.0
    image = sensor if encoding == "32FC1" else np.round(sensor * 1000).astype(np.uint16)
    r = depth_sample(0, image, encoding, pred, None, crop, CFG)
    if isinstance(r, ScaleSample):
        assert r.metres_per_unit == pytest.approx(k, rel=0.01)
    else:
        assert r.reason == "too_few_pixels"
