"""Camera image (any size, aspect, channel order, 8/16 bit) -> the model's input tensor.

``preprocess(image, encoding, config)`` returns a float32 ``(3, H, W)`` RGB tensor in [0, 1]
and a frozen :class:`CropInfo` that records the resize and the crop, so intrinsics and pixel
coordinates map exactly between the model's resolution and the original image.

Pixel convention: OpenCV / ROS ``CameraInfo`` -- integer coordinates are pixel *centres*,
so the image spans [-0.5, W-0.5]. The resize is area-consistent (torch ``align_corners=False``,
like PIL): an original continuous coordinate ``u`` maps to ``sx * (u + 0.5) - 0.5 - crop_x``
in the model image. ``CropInfo.K_to_original`` / ``K_to_model`` apply exactly this map.

Channels: rgb/bgr/rgba/bgra/mono (ROS ``sensor_msgs/Image`` encodings, OpenCV's ``8UCn`` /
``16UCn`` which are BGR(A) like cv2, or generic names whose dtype comes from the array).
Mono is replicated to 3 channels; alpha is composited onto white (as the reference does with
RGBA PNGs). uint8 is divided by 255; uint16 by 65535 (``uint16_scaling='dtype_max'``) or
stretched per image (``'per_image'``, see :class:`~lingbot_ros.config.PreprocessConfig`);
float inputs are taken as already in [0, 1] (clipped) and must be finite.

No rclpy, no model import: ROS messages are turned into arrays by ``ros/``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import numpy as np
import torch
import torch.nn.functional as F

from . import image_decode
from .config import PreprocessConfig

__all__ = ["CropInfo", "ENCODINGS", "MAX_CROP_FACTOR", "compute_crop", "parse_encoding",
           "preprocess"]

# encoding (lower case) -> (channel order, channels, dtype or None = taken from the array).
# The ROS and OpenCV names (8UCn/16UCn: cv2 order, BGR / BGRA) are the raw image table's.
ENCODINGS: dict[str, tuple[str, int, Optional[np.dtype]]] = {
    **{name.lower(): (fmt.order, fmt.channels, np.dtype(fmt.dtype))
       for name, fmt in image_decode.ENCODINGS.items()},
    # generic: the dtype (uint8, uint16, float32, float64) comes from the array
    "rgb": ("rgb", 3, None), "bgr": ("bgr", 3, None), "rgba": ("rgba", 4, None),
    "bgra": ("bgra", 4, None), "mono": ("mono", 1, None), "gray": ("mono", 1, None),
    "grey": ("mono", 1, None),
}
# The resized image before the centre crop may be at most this many times the output area:
# an aspect ratio 16x away from the model's would otherwise allocate a huge intermediate.
MAX_CROP_FACTOR = 16
_DTYPES = (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.float32), np.dtype(np.float64))

ArrayOrTensor = Union[np.ndarray, torch.Tensor]


def parse_encoding(encoding: str) -> tuple[str, int, Optional[np.dtype]]:
    """``encoding`` -> (channel order, channels, dtype or None). ValueError if unknown."""
    if not isinstance(encoding, str):
        raise ValueError(f"encoding must be a string, got {encoding!r}")
    try:
        return ENCODINGS[encoding.strip().lower()]
    except KeyError:
        raise ValueError(f"unknown image encoding {encoding!r}; supported: "
                         f"{', '.join(sorted(ENCODINGS))}") from None


@dataclass(frozen=True)
class CropInfo:
    """How the model image was cut from the original: resize to ``resized_hw``, then crop
    ``output_hw`` at ``crop_xy`` (top-left, in resized pixels). All sizes are (H, W)."""

    input_hw: tuple[int, int]
    resized_hw: tuple[int, int]
    crop_xy: tuple[int, int]
    output_hw: tuple[int, int]

    @property
    def scale_xy(self) -> tuple[float, float]:
        """(sx, sy): model pixels per original pixel along x and y."""
        return self.resized_hw[1] / self.input_hw[1], self.resized_hw[0] / self.input_hw[0]

    def model_from_original(self) -> np.ndarray:
        """3x3 float64 affine A with ``[u_m, v_m, 1] = A @ [u_o, v_o, 1]`` (pixel centres)."""
        sx, sy = self.scale_xy
        x0, y0 = self.crop_xy
        return np.array([[sx, 0.0, 0.5 * sx - 0.5 - x0],
                         [0.0, sy, 0.5 * sy - 0.5 - y0],
                         [0.0, 0.0, 1.0]])

    def original_from_model(self) -> np.ndarray:
        """3x3 float64 inverse of :meth:`model_from_original`."""
        sx, sy = self.scale_xy
        x0, y0 = self.crop_xy
        return np.array([[1.0 / sx, 0.0, (x0 + 0.5) / sx - 0.5],
                         [0.0, 1.0 / sy, (y0 + 0.5) / sy - 0.5],
                         [0.0, 0.0, 1.0]])

    def K_to_original(self, K: ArrayOrTensor) -> ArrayOrTensor:
        """(..., 3, 3) intrinsics at model resolution -> the original image's intrinsics.

        numpy in -> float64 numpy out; a torch tensor keeps its dtype and device."""
        return _left_mul(self.original_from_model(), K)

    def K_to_model(self, K: ArrayOrTensor) -> ArrayOrTensor:
        """(..., 3, 3) intrinsics of the original image -> intrinsics at model resolution."""
        return _left_mul(self.model_from_original(), K)

    def points_to_original(self, uv: ArrayOrTensor) -> ArrayOrTensor:
        """(..., 2) model pixel coordinates -> original pixel coordinates."""
        return _affine_points(self.original_from_model(), uv)

    def points_to_model(self, uv: ArrayOrTensor) -> ArrayOrTensor:
        """(..., 2) original pixel coordinates -> model pixel coordinates."""
        return _affine_points(self.model_from_original(), uv)


def _left_mul(a: np.ndarray, k: ArrayOrTensor) -> ArrayOrTensor:
    if isinstance(k, torch.Tensor):
        return torch.as_tensor(a, dtype=k.dtype, device=k.device) @ k
    k = np.asarray(k, dtype=np.float64)
    if k.shape[-2:] != (3, 3):
        raise ValueError(f"K must have shape (..., 3, 3), got {k.shape}")
    return a @ k


def _affine_points(a: np.ndarray, uv: ArrayOrTensor) -> ArrayOrTensor:
    if isinstance(uv, torch.Tensor):
        at = torch.as_tensor(a, dtype=uv.dtype, device=uv.device)
        return uv @ at[:2, :2].T + at[:2, 2]
    uv = np.asarray(uv, dtype=np.float64)
    if uv.shape[-1] != 2:
        raise ValueError(f"points must have shape (..., 2), got {uv.shape}")
    return uv @ a[:2, :2].T + a[:2, 2]


def compute_crop(input_hw: tuple[int, int], config: PreprocessConfig = PreprocessConfig()
                 ) -> CropInfo:
    """The resize and crop ``preprocess`` applies to an image of ``input_hw`` (no pixels
    touched): lets a session size its cache (patches = H/14 * W/14) before the first frame."""
    h, w = (int(v) for v in input_hw)
    if h < 1 or w < 1:
        raise ValueError(f"image has zero size: {h}x{w}")
    out_h, out_w = config.output_size(h, w)
    if config.height is None:  # reference: width exact, height rounded to the patch grid
        rh = max(config.patch_size,
                 round(h * (config.width / w) / config.patch_size) * config.patch_size)
        rw = config.width
    else:  # resize to cover, then centre crop
        s = max(out_h / h, out_w / w)
        rh, rw = max(out_h, round(h * s)), max(out_w, round(w * s))
    if rh * rw > MAX_CROP_FACTOR * out_h * out_w:
        raise ValueError(f"image aspect ratio {w}x{h} is too far from the model input's "
                         f"{out_w}x{out_h}: the centre crop would keep less than "
                         f"1/{MAX_CROP_FACTOR} of it")
    return CropInfo(input_hw=(h, w), resized_hw=(rh, rw),
                    crop_xy=((rw - out_w) // 2, (rh - out_h) // 2), output_hw=(out_h, out_w))


def _validate(image, encoding: str, config: PreprocessConfig) -> tuple[np.ndarray, str]:
    if not isinstance(image, np.ndarray):
        raise ValueError(f"image must be a numpy array, got {type(image).__name__}")
    order, channels, want_dtype = parse_encoding(encoding)
    if image.ndim == 2:
        image = image[:, :, None]
    elif image.ndim != 3:
        raise ValueError(f"image must be HxW or HxWxC, got ndim={image.ndim} "
                         f"(shape {image.shape})")
    h, w, c = image.shape
    if h == 0 or w == 0 or c == 0:
        raise ValueError(f"image has zero size: shape {image.shape}")
    if h * w > config.max_input_pixels:
        raise ValueError(f"image of {h}x{w} = {h * w} pixels exceeds max_input_pixels="
                         f"{config.max_input_pixels}")
    if c != channels:
        raise ValueError(f"encoding {encoding!r} has {channels} channel(s) but the image has "
                         f"{c} (shape {image.shape})")
    dtype = image.dtype.newbyteorder("=")  # big-endian 16-bit arrays are accepted
    if want_dtype is not None and dtype != want_dtype:
        raise ValueError(f"encoding {encoding!r} needs dtype {want_dtype}, got {image.dtype}")
    if dtype not in _DTYPES:
        raise ValueError(f"unsupported image dtype {image.dtype}; use uint8, uint16, "
                         f"float32 or float64")
    if image.dtype != dtype:
        image = image.astype(dtype)  # byte-swap to native order
    if dtype.kind == "f" and not np.isfinite(image).all():
        raise ValueError("image contains non-finite values (NaN or inf)")
    return image, order


def preprocess(image: np.ndarray, encoding: str, config: PreprocessConfig = PreprocessConfig(),
               *, device: Union[str, torch.device, None] = None
               ) -> tuple[torch.Tensor, CropInfo]:
    """Image array -> (float32 ``(3, H, W)`` RGB tensor in [0, 1] on ``device``, CropInfo).

    ``image``: HxW or HxWxC numpy array (any strides, any byte order); ``encoding``: see
    :data:`ENCODINGS`. The conversion and resize run on ``device`` (default CPU), so passing
    the GPU moves only the raw 8/16-bit pixels across. Raises ValueError with the reason for
    a wrong ndim or channel count, zero size, unknown encoding, dtype mismatch, non-finite
    values, more than ``config.max_input_pixels`` pixels, or an aspect ratio so far from the
    model input's that the centre crop would keep less than 1/16 of the image.
    """
    image, order = _validate(image, encoding, config)
    crop = compute_crop(image.shape[:2], config)
    dtype = image.dtype
    # torch.from_numpy needs a writeable array; message buffers are often read-only views
    x = torch.from_numpy(np.require(image, requirements=["C", "W"]))
    if device is not None and torch.device(device).type == "cuda":
        # pinned + asynchronous: the upload does not wait for work already queued on the GPU
        x = x.pin_memory().to(device, non_blocking=True)
    elif device is not None:
        x = x.to(device)
    if dtype.kind == "u":
        x = x.to(torch.float32)
        if dtype == np.uint16 and config.uint16_scaling == "per_image":
            lo, hi = x.amin(), x.amax()
            x = (x - lo) / (hi - lo).clamp(min=1.0)
        else:
            x = x / float(np.iinfo(dtype).max)
    else:
        x = x.to(torch.float32).clamp(0.0, 1.0)
    if order in ("bgr", "bgra"):
        x = x[..., [2, 1, 0] + ([3] if order == "bgra" else [])]
    if order in ("rgba", "bgra"):  # composite onto white: rgb * a + (1 - a)
        alpha = x[..., 3:4]
        x = x[..., :3] * alpha + (1.0 - alpha)
    x = x.permute(2, 0, 1).unsqueeze(0)  # (1, C, h, w); mono stays 1 channel until the end
    rh, rw = crop.resized_hw
    if (rh, rw) != tuple(image.shape[:2]):
        x = F.interpolate(x, size=(rh, rw), mode=config.interpolation, align_corners=False,
                          antialias=config.antialias)
    (oh, ow), (x0, y0) = crop.output_hw, crop.crop_xy
    x = x[0, :, y0:y0 + oh, x0:x0 + ow].clamp(0.0, 1.0)
    if x.shape[0] == 1:
        x = x.expand(3, -1, -1)
    return x.contiguous(), crop
