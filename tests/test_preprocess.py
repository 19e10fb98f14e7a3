"""preprocess: output shapes, crop bookkeeping (K and pixels, checked against image content),
every encoding/dtype, and the error cases."""
import numpy as np
import pytest
import torch

from lingbot_ros.config import PreprocessConfig
from lingbot_ros.preprocess import ENCODINGS, CropInfo, compute_crop, parse_encoding, preprocess

FIXED = PreprocessConfig(width=504, height=378)


def rgb_pattern(h, w, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


# --- shapes ------------------------------------------------------------------------------

@pytest.mark.parametrize("hw,out", [
    ((480, 640), (392, 518)),  # 4:3 video (reference: 518x392)
    ((1080, 1920), (294, 518)),  # 16:9
    ((720, 1280), (294, 518)),
    ((378, 504), (392, 518)),
    ((1920, 1080), (518, 518)),  # portrait: 921 tall, centre-cropped to 518
    ((1, 1), (518, 518)),
    ((30, 4000), (14, 518)),  # a wide panorama: at least one patch row
])
def test_reference_rule_shapes(hw, out):
    img = rgb_pattern(*hw)
    x, crop = preprocess(img, "rgb8")
    assert x.shape == (3, *out) and x.dtype == torch.float32
    assert crop.output_hw == out == PreprocessConfig().output_size(*hw)
    assert out[0] % 14 == 0 and out[1] % 14 == 0
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0


def test_reference_rule_crop_is_centred_and_width_exact():
    crop = compute_crop((1920, 1080))
    assert crop.resized_hw == (round(1920 * 518 / 1080 / 14) * 14, 518)
    assert crop.crop_xy == (0, (crop.resized_hw[0] - 518) // 2)


@pytest.mark.parametrize("hw", [(480, 640), (1080, 1920), (1920, 1080), (378, 504), (100, 100),
                                (100, 1500)])
def test_fixed_size_resizes_to_cover_then_crops(hw):
    x, crop = preprocess(rgb_pattern(*hw), "rgb8", FIXED)
    assert x.shape == (3, 378, 504)
    rh, rw = crop.resized_hw
    assert rh >= 378 and rw >= 504 and (rh == 378 or rw == 504)
    sx, sy = crop.scale_xy
    assert abs(sx - sy) / sx < 0.02  # aspect kept up to integer rounding
    assert crop.crop_xy == ((rw - 504) // 2, (rh - 378) // 2)


def test_no_resize_at_model_resolution_is_exact():
    img = rgb_pattern(392, 518)
    x, crop = preprocess(img, "rgb8")
    assert crop.resized_hw == crop.input_hw and crop.crop_xy == (0, 0)
    assert torch.equal(x, torch.from_numpy(img).permute(2, 0, 1).float() / 255)


def test_close_to_pil_bicubic_like_the_reference():
    image_mod = pytest.importorskip("PIL.Image")
    img = rgb_pattern(120, 160, seed=3)
    img = np.asarray(image_mod.fromarray(img).resize((80, 60), image_mod.Resampling.BOX))
    img = np.ascontiguousarray(np.repeat(np.repeat(img, 8, 0), 8, 1))  # smooth-ish, 480x640
    x, crop = preprocess(img, "rgb8")
    ref = image_mod.fromarray(img).resize((518, 392), image_mod.Resampling.BICUBIC)
    ref = torch.from_numpy(np.array(ref)).permute(2, 0, 1).float() / 255
    assert (x - ref).abs().mean() < 2 / 255


# --- crop bookkeeping --------------------------------------------------------------------

@pytest.mark.parametrize("cfg", [PreprocessConfig(), FIXED])
@pytest.mark.parametrize("hw", [(480, 640), (1920, 1080), (300, 1000)])
def test_K_and_points_round_trip(cfg, hw):
    crop = compute_crop(hw, cfg)
    K = np.array([[500.0, 0, 310.2], [0, 505.0, 241.7], [0, 0, 1]])
    assert np.allclose(crop.K_to_original(crop.K_to_model(K)), K, atol=1e-12)
    uv = np.random.default_rng(0).uniform(0, 400, (10, 2))
    assert np.allclose(crop.points_to_original(crop.points_to_model(uv)), uv, atol=1e-10)
    # a 3-D point projected with the original K, mapped to the model image, equals the same
    # point projected with the mapped K
    pts = np.random.default_rng(1).uniform([-1, -1, 2], [1, 1, 5], (20, 3))
    proj = lambda k: (pts @ k.T)[:, :2] / pts[:, 2:]  # noqa: E731
    assert np.allclose(crop.points_to_model(proj(K)), proj(crop.K_to_model(K)), atol=1e-10)
    # torch in -> torch out, dtype kept, batched
    Kt = torch.tensor(np.stack([K, K]), dtype=torch.float32)
    out = crop.K_to_original(crop.K_to_model(Kt))
    assert out.dtype == torch.float32 and out.shape == (2, 3, 3)
    assert torch.allclose(out, Kt, atol=1e-3)


def blob_image(h, w, u0, v0, sigma=3.0):
    v, u = np.mgrid[0:h, 0:w]
    g = np.exp(-((u - u0) ** 2 + (v - v0) ** 2) / (2 * sigma ** 2))
    return (g * 255).astype(np.uint8)


def centroid(img: torch.Tensor):
    m = img[0].double()
    m = torch.where(m > 0.1 * m.max(), m, torch.zeros_like(m))
    v, u = torch.meshgrid(torch.arange(m.shape[0]), torch.arange(m.shape[1]), indexing="ij")
    return float((m * u).sum() / m.sum()), float((m * v).sum() / m.sum())


@pytest.mark.parametrize("cfg,hw,uv", [
    (PreprocessConfig(), (480, 640), (101.3, 377.8)),
    (PreprocessConfig(), (1280, 720), (333.4, 640.6)),  # portrait, cropped vertically
    (FIXED, (1080, 1920), (700.2, 600.9)),  # cropped horizontally
    (FIXED, (240, 320), (40.5, 200.25)),  # upscaled
])
def test_projected_point_lands_on_the_same_original_pixel(cfg, hw, uv):
    """The image content agrees with the bookkeeping: a blob drawn at an original pixel
    appears in the model image where points_to_model says, and back."""
    sigma = 6.0 if cfg.height is not None and hw[0] > 500 else 3.0
    img = blob_image(*hw, *uv, sigma=sigma)
    x, crop = preprocess(img, "mono8", cfg)
    found = np.array(centroid(x))
    expect = crop.points_to_model(np.array(uv))
    assert np.abs(found - expect).max() < 0.1
    assert np.abs(crop.points_to_original(found) - np.array(uv)).max() < 0.1 / min(crop.scale_xy)


def test_crop_info_is_frozen():
    crop = compute_crop((480, 640))
    assert isinstance(crop, CropInfo)
    with pytest.raises(Exception):
        crop.crop_xy = (1, 1)


# --- encodings and dtypes ----------------------------------------------------------------

BASE = rgb_pattern(392, 518, seed=5)  # model resolution: no resampling, exact comparisons
EXPECT = torch.from_numpy(BASE).permute(2, 0, 1).float() / 255


def encode(encoding):
    order, channels, dtype = ENCODINGS[encoding]
    rgb = BASE
    if order == "mono":
        img = rgb[..., 0]
    elif order.startswith("bgr"):
        img = rgb[..., ::-1]
    else:
        img = rgb
    if channels == 4:
        img = np.concatenate([img, np.full(img.shape[:2] + (1,), 255, np.uint8)], -1)
    if dtype == np.uint16:
        img = img.astype(np.uint16) * 257  # 8-bit value v -> 16-bit v * 257: same fraction
    return np.ascontiguousarray(img)


@pytest.mark.parametrize("encoding", sorted(k for k, v in ENCODINGS.items() if v[2] is not None))
def test_every_typed_encoding(encoding):
    x, _ = preprocess(encode(encoding), encoding)
    expect = EXPECT[:1].expand(3, -1, -1) if ENCODINGS[encoding][0] == "mono" else EXPECT
    assert torch.allclose(x, expect, atol=1e-6), encoding


@pytest.mark.parametrize("dtype,scale", [(np.uint8, 255), (np.uint16, 65535),
                                         (np.float32, 1.0), (np.float64, 1.0)])
@pytest.mark.parametrize("encoding", ["rgb", "bgr", "rgba", "bgra", "mono", "gray"])
def test_generic_encodings_take_the_dtype_from_the_array(encoding, dtype, scale):
    order, channels, _ = ENCODINGS[encoding]
    rgb = BASE.astype(np.float64) / 255
    if order == "mono":
        img = rgb[..., :1]
    elif order.startswith("bgr"):
        img = rgb[..., ::-1]
    else:
        img = rgb
    if channels == 4:
        img = np.concatenate([img, np.ones(img.shape[:2] + (1,))], -1)
    img = np.round(img * scale).astype(dtype) if scale != 1.0 else img.astype(dtype)
    x, _ = preprocess(img, encoding)
    expect = EXPECT[:1].expand(3, -1, -1) if order == "mono" else EXPECT
    assert torch.allclose(x, expect, atol=1e-4)


def test_mono_accepts_hw_and_hw1_and_replicates():
    g = BASE[..., 1]
    a, _ = preprocess(g, "mono8")
    b, _ = preprocess(g[..., None], "mono8")
    assert torch.equal(a, b) and torch.equal(a[0], a[2]) and a.shape[0] == 3


def test_alpha_is_composited_onto_white():
    rgba = np.zeros((392, 518, 4), np.uint8)
    rgba[..., 0] = 200
    rgba[:, :100, 3] = 0  # transparent -> white
    rgba[:, 100:200, 3] = 255  # opaque -> (200, 0, 0)
    rgba[:, 200:, 3] = 51  # 20 % -> 0.2 * c + 0.8
    x, _ = preprocess(rgba, "rgba8")
    assert torch.allclose(x[:, :, :100], torch.ones(1))
    assert torch.allclose(x[:, 0, 150], torch.tensor([200 / 255, 0, 0]))
    assert torch.allclose(x[:, 0, 300], torch.tensor([0.2 * 200 / 255 + 0.8, 0.8, 0.8]), atol=1e-6)
    bgra = np.ascontiguousarray(rgba[..., [2, 1, 0, 3]])
    assert torch.allclose(preprocess(bgra, "bgra8")[0], x)


def test_uint16_scaling_modes():
    ir = np.linspace(1000, 5000, 392 * 518).reshape(392, 518).astype(np.uint16)  # dark 12-bit IR
    x, _ = preprocess(ir, "mono16")
    assert abs(float(x.max()) - 5000 / 65535) < 1e-6  # dtype_max: stable across frames
    y, _ = preprocess(ir, "mono16", PreprocessConfig(uint16_scaling="per_image"))
    assert float(y.min()) == 0.0 and abs(float(y.max()) - 1.0) < 1e-6
    flat = np.full((392, 518), 7, np.uint16)  # constant image: no division by zero
    z, _ = preprocess(flat, "16UC1", PreprocessConfig(uint16_scaling="per_image"))
    assert torch.isfinite(z).all()


def test_big_endian_and_strided_and_readonly_inputs():
    img16 = encode("rgb16")
    big = img16.astype(">u2")
    assert torch.equal(preprocess(big, "rgb16")[0], preprocess(img16, "rgb16")[0])
    padded = np.zeros((392, 600, 3), np.uint8)
    padded[:, :518] = BASE
    view = padded[:, :518]  # row padding, like a message with step > width * 3
    view.flags.writeable = False
    assert torch.equal(preprocess(view, "rgb8")[0], EXPECT)


def test_float_inputs_are_clipped():
    img = BASE.astype(np.float32) / 255 * 1.5 - 0.25
    x, _ = preprocess(img, "rgb")
    assert float(x.min()) == 0.0 and float(x.max()) == 1.0


def test_encoding_names_are_case_insensitive():
    assert parse_encoding("RGB8") == parse_encoding("rgb8")
    assert parse_encoding("16UC1") == ENCODINGS["16uc1"]


# --- errors ------------------------------------------------------------------------------

@pytest.mark.parametrize("image,encoding,config,match", [
    (np.zeros(10, np.uint8), "mono8", None, "ndim=1"),
    (np.zeros((2, 4, 4, 3), np.uint8), "rgb8", None, "ndim=4"),
    (np.zeros((0, 10, 3), np.uint8), "rgb8", None, "zero size"),
    (np.zeros((10, 0), np.uint8), "mono8", None, "zero size"),
    (np.zeros((10, 10, 3), np.uint8), "yuv422", None, "unknown image encoding 'yuv422'"),
    (np.zeros((10, 10, 3), np.uint8), "rgba8", None, "has 4 channel"),
    (np.zeros((10, 10), np.uint8), "rgb8", None, "has 3 channel"),
    (np.zeros((10, 10, 3), np.uint16), "rgb8", None, "needs dtype uint8"),
    (np.zeros((10, 10, 3), np.uint8), "bgr16", None, "needs dtype uint16"),
    (np.zeros((10, 10, 3), np.int32), "rgb", None, "unsupported image dtype"),
    (np.full((10, 10, 3), np.nan, np.float32), "rgb", None, "non-finite"),
    (np.full((10, 10), np.inf), "mono", None, "non-finite"),
    (np.zeros((100, 100, 3), np.uint8), "rgb8", PreprocessConfig(max_input_pixels=9999),
     "exceeds max_input_pixels"),
    (np.zeros((7, 3000, 3), np.uint8), "rgb8", FIXED, "aspect ratio 3000x7 is too far"),
    (np.zeros((3000, 7), np.uint8), "mono8", None, "aspect ratio 7x3000 is too far"),
    ([[1, 2], [3, 4]], "mono8", None, "numpy array"),
])
def test_bad_inputs_raise_value_error_with_the_reason(image, encoding, config, match):
    with pytest.raises(ValueError, match=match):
        preprocess(image, encoding, config or PreprocessConfig())


@pytest.mark.parametrize("kwargs,match", [
    ({"width": 500}, "width must be a multiple of patch_size=14"),
    ({"height": 380}, "height must be a multiple"),
    ({"height": 0}, "height must be a positive integer"),
    ({"max_height": 20}, "max_height must be a multiple"),
    ({"patch_size": 0}, "patch_size must be a positive integer"),
    ({"interpolation": "lanczos"}, "interpolation must be one of"),
    ({"uint16_scaling": "auto"}, "uint16_scaling must be one of"),
    ({"max_input_pixels": -1}, "max_input_pixels must be a positive integer"),
    ({"antialias": 1}, "antialias must be a bool"),
])
def test_preprocess_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PreprocessConfig(**kwargs)


def test_bilinear_and_device_options():
    img = rgb_pattern(480, 640)
    x, _ = preprocess(img, "rgb8", PreprocessConfig(interpolation="bilinear"), device="cpu")
    y, _ = preprocess(img, "rgb8")
    assert x.shape == y.shape and (x - y).abs().mean() < 0.05
