"""Typed, frozen configuration objects, validated once with clear errors.

Stdlib only: this module is imported by every layer, including the pure-Python cache
bookkeeping, so it must not pull in torch or rclpy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

DTYPES = ("float32", "bfloat16", "float16")
BYTES_PER_ELEMENT = {"float32": 4, "bfloat16": 2, "float16": 2}


def is_positive_int(value) -> bool:
    """An int >= 1 (bools are not counts)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_positive_int(name: str, value) -> None:
    """Raise ValueError("<name> must be a positive integer, ...") unless ``is_positive_int``."""
    if not is_positive_int(value):
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_non_negative_int(name: str, value) -> None:
    """Raise ValueError("<name> must be an integer >= 0, ...") unless ``value`` is an int >= 0
    (bools are refused)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """Shape and retention policy of the paged KV cache of the global-attention layers.

    Defaults are the released model at 378x504 (27 x 36 = 972 patches per frame) with the
    reference's window of 64 frames and 8 pinned scale frames.
    """

    num_layers: int = 24  # global-attention layers sharing one page table
    num_heads: int = 16  # KV heads per layer
    head_dim: int = 64  # channels per head
    page_size: int = 972  # tokens per page == patch tokens per frame, exactly (no padding)
    num_special: int = 6  # special tokens per frame: camera, 4 registers, scale
    scale_frames: int = 8  # the first N committed frames keep their patch page forever
    window: int = 64  # the last N frames (the current one included) keep their patch page
    max_special_frames: Optional[int] = None  # None: keep every frame's specials (reference)
    special_chunk_frames: int = 1024  # unbounded specials: initial capacity and growth step, frames
    max_cache_bytes: Optional[int] = None  # byte budget for the whole pool; None: no cap
    dtype: str = "float32"  # storage dtype: float32 | bfloat16 | float16
    device: str = "cpu"  # torch device string of the storage

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_heads", "head_dim", "page_size", "num_special",
                     "window", "special_chunk_frames"):
            check_positive_int(name, getattr(self, name))
        check_non_negative_int("scale_frames", self.scale_frames)
        if self.max_special_frames is not None:
            check_positive_int("max_special_frames", self.max_special_frames)
        if self.max_cache_bytes is not None:
            check_positive_int("max_cache_bytes", self.max_cache_bytes)
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if not isinstance(self.device, str) or not self.device:
            raise ValueError(f"device must be a torch device string such as 'cpu' or 'cuda:0', "
                             f"got {self.device!r}")

    @property
    def tokens_per_frame(self) -> int:
        """Tokens one frame writes: its specials, then its patches."""
        return self.num_special + self.page_size

    @property
    def bytes_per_page(self) -> int:
        """Bytes one page takes over all layers (K and V)."""
        return (self.num_layers * 2 * self.page_size * self.num_heads * self.head_dim
                * BYTES_PER_ELEMENT[self.dtype])


# --- Preprocessing (image -> model input) ------------------------------------------------

INTERPOLATIONS = ("bicubic", "bilinear")
UINT16_SCALINGS = ("dtype_max", "per_image")


@dataclass(frozen=True, slots=True)
class PreprocessConfig:
    """How an input image becomes the model's (3, H, W) float32 RGB tensor in [0, 1].

    Two size rules (both keep H and W multiples of ``patch_size``):

    * ``height=None`` -- the reference demo's rule: width becomes ``width`` (518), height
      ``round(h * width / w / patch) * patch`` (at least one patch), and a result taller than
      ``max_height`` is centre-cropped to ``max_height``. 640x480 -> 518x392.
    * ``height=H`` -- a fixed H x W: resize to cover (the smaller scale that fills both
      sides), then centre-crop. ``PreprocessConfig(width=504, height=378)`` is the
      reference profiler's 378x504.

    ``uint16_scaling``: ``dtype_max`` divides 16-bit images by 65535 (stable across frames;
    the default), ``per_image`` stretches each image's min..max to 0..1 (for dark 10/12-bit
    IR or greyscale cameras packed in 16 bits; it flickers if exposure changes).
    """

    patch_size: int = 14
    width: int = 518  # model input width, a multiple of patch_size
    height: Optional[int] = None  # None: reference rule (height from aspect); int: fixed H x W
    max_height: int = 518  # reference rule only: taller results are centre-cropped to this
    max_input_pixels: int = 50_000_000  # larger inputs are refused (a corrupt header, not a camera)
    interpolation: str = "bicubic"  # bicubic (reference, PIL-like) | bilinear
    antialias: bool = True  # antialiased downscaling (PIL's bicubic is antialiased)
    uint16_scaling: str = "dtype_max"  # dtype_max | per_image

    def __post_init__(self) -> None:
        for name in ("patch_size", "width", "max_height", "max_input_pixels"):
            check_positive_int(name, getattr(self, name))
        if self.height is not None:
            check_positive_int("height", self.height)
        for name in ("width", "height", "max_height"):
            value = getattr(self, name)
            if value is not None and value % self.patch_size:
                raise ValueError(f"{name} must be a multiple of patch_size={self.patch_size}, "
                                 f"got {value}")
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(f"interpolation must be one of {INTERPOLATIONS}, "
                             f"got {self.interpolation!r}")
        if not isinstance(self.antialias, bool):
            raise ValueError(f"antialias must be a bool, got {self.antialias!r}")
        if self.uint16_scaling not in UINT16_SCALINGS:
            raise ValueError(f"uint16_scaling must be one of {UINT16_SCALINGS}, "
                             f"got {self.uint16_scaling!r}")

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """(H, W) of the model input for an input image of ``height`` x ``width``."""
        check_positive_int("height", height)
        check_positive_int("width", width)
        if self.height is not None:
            return self.height, self.width
        resized = max(self.patch_size,
                      round(height * (self.width / width) / self.patch_size) * self.patch_size)
        return min(resized, self.max_height), self.width


# --- Keyframe policy (which streaming frames stay in the KV cache) -------------------------

KEYFRAME_POLICIES = ("all", "every_n", "flow")


@dataclass(frozen=True, slots=True)
class KeyframeConfig:
    """Which streaming (post scale-phase) frames are committed to the cache.

    * ``all``: every frame (the reference's streaming default below 320 frames).
    * ``every_n``: the first streaming frame, then each frame ``n`` frames after the last
      keyframe (the reference's ``keyframe_interval``).
    * ``flow``: the first streaming frame, then any frame whose camera-motion-induced mean
      pixel flow to the last keyframe exceeds ``flow_threshold`` pixels (model resolution),
      or that is ``max_gap`` frames after the last keyframe (the reference's v2 flow mode,
      ``max_non_keyframe_gap``=30).
    """

    policy: str = "all"
    n: int = 2  # every_n: keyframe interval in frames (1 would be the same as "all")
    flow_threshold: float = 10.0  # flow: pixels at model resolution
    max_gap: int = 30  # flow: a keyframe at least every max_gap frames
    flow_stride: int = 8  # flow: depth subsampling stride (pixels)

    def __post_init__(self) -> None:
        if self.policy not in KEYFRAME_POLICIES:
            raise ValueError(f"policy must be one of {KEYFRAME_POLICIES}, got {self.policy!r}")
        for name in ("n", "max_gap", "flow_stride"):
            check_positive_int(name, getattr(self, name))
        thr = self.flow_threshold
        if (not isinstance(thr, (int, float)) or isinstance(thr, bool) or thr != thr
                or thr < 0 or thr == float("inf")):
            raise ValueError(f"flow_threshold must be a finite number >= 0 (pixels), got {thr!r}")


# --- Streaming session (one camera stream) ---------------------------------------------------

# The allowed values of each setting, used by the configs below, the ROS parameter table
# (ros/params/table.py), the attention backends and the fused-kernel switch (model/qk_fused.py).
MODEL_PRESETS = ("tiny", "official")  # network sizes (model/presets.py builds them)
PRECISIONS = ("auto", "fp32", "bf16")  # model precision: auto = bf16 aggregator on CUDA
MLP_PRECISIONS = ("aggregator", "fp8")  # aggregator MLP GEMMs; fp8: e4m3 (performance.md)
HEAD_PRECISIONS = ("fp32", "bf16")  # camera head; bf16 missed the 1e-2 pose bound (performance.md)
ATTENTION_BACKENDS = ("auto", "torch_ref", "flashinfer")
FLASHINFER_VARIANTS = ("auto", "fa2", "fa3")
FUSED_KERNEL_MODES = ("auto", "on", "off")
FUSED_KERNEL_NAMES = ("qk_rope", "add_norm", "kv_write", "split_merge")  # model.FusedKernels
MAX_KV_SPLITS = 8  # flashinfer split-KV parts per attention call: 1..MAX_KV_SPLITS
ROLLOVER_MODES = ("blocking", "sliced")  # how a rollover's anchor step runs (SessionConfig)
#: Keyframes a segment may go on for while its successor's anchor step is built in slices
#: (``rollover_mode: sliced``); the caches hold that many more, and a build not done by
#: then is finished at once.
ROLLOVER_SLACK_KEYFRAMES = 64
STAMP_BACKWARDS_POLICIES = ("reset", "drop")  # a stamp not after the previous frame's


def check_kv_splits(value) -> None:
    """Raise ValueError("kv_splits must be an integer in [1, MAX_KV_SPLITS], ...") unless
    ``value`` is an int in that range (bools are refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_KV_SPLITS:
        raise ValueError(f"kv_splits must be an integer in [1, {MAX_KV_SPLITS}], got {value!r}")


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """One stream: anchors, window, trajectory memory, rollover, keyframes, outputs, device.

    ``rollover_keyframes``: after this many keyframes in a segment (anchors included) a new
    segment starts on the last ``num_scale_frames`` keyframes, aligned by Sim(3). 320 is the
    number of views the model was trained with; ``None`` never rolls over (the reference:
    memory, latency and the RoPE time index then grow with the stream).
    ``rollover_mode``: ``blocking`` runs the new segment's anchor step (all anchors together,
    ~4 frames of GPU time at the released size) before the next frame; ``sliced`` builds it
    beside the stream, ``rollover_slices_per_frame`` slices (a block each) queued behind each
    streaming frame, while the segment goes on; the next frame after the build starts the
    new segment. Sliced spreads the stall of a rollover over the frames (a camera's slack),
    so a node at camera rate drops nothing at rollovers; the segment then ends a few dozen
    keyframes later than ``rollover_keyframes`` (at most ``ROLLOVER_SLACK_KEYFRAMES``).

    Time and size policy (a looped bag, a restarted player, a camera switching modes):
    ``on_stamp_backwards``: a stamp not after the previous frame's ``reset``s the stream (the
    frame starts the new one) or is ``drop``ped and counted; a forward jump of more than
    ``max_gap_s`` seconds resets (``None``: never); a new model input size that persists for
    ``size_change_frames`` consecutive frames resets the stream on it (the frames before are
    rejected ``size_changed``).
    """

    num_scale_frames: int = 8  # anchor frames, run together first (start-up latency, frames)
    window: int = 64  # frames whose full tokens stay visible, current included
    max_special_frames: Optional[int] = None  # trajectory memory within a window; None: all
    max_cache_bytes: Optional[int] = None  # KV pool byte budget; None: device memory
    rollover_keyframes: Optional[int] = 320  # keyframes per segment; None: one endless segment
    rollover_mode: str = "blocking"  # blocking | sliced (the anchor step beside the stream)
    rollover_slices_per_frame: int = 2  # sliced: anchor-step slices queued per streaming frame
    keyframes: KeyframeConfig = KeyframeConfig()
    preprocess: PreprocessConfig = PreprocessConfig()
    with_depth: bool = True  # run the depth head on every frame (else only when needed)
    return_depth: bool = True  # copy depth, confidence and the model image into results
    return_features: bool = False  # copy each frame's DINO patch tokens into results (loop)
    attention_backend: str = "auto"  # auto (flashinfer on CUDA if installed) | torch_ref | flashinfer
    flashinfer_variant: str = "auto"  # auto (fa3 on Hopper, else fa2) | fa2 | fa3
    cuda_graphs: bool = True  # replay streaming steps as CUDA graphs (CUDA + flashinfer only)
    kv_splits: int = 4  # flashinfer split-KV parts per attention call (at most num_scale_frames + 2)
    fused_kernels: str = "auto"  # fused Triton kernels (q/k norm + RoPE, residual + LayerNorm, K/V write, split-KV merge): auto (CUDA + bf16) | on | off
    fused_kernels_off: tuple = ()  # single fused kernels left off, to measure each alone: qk_rope, add_norm, kv_write, split_merge
    device: str = "cpu"  # torch device of the model and caches
    on_stamp_backwards: str = "reset"  # reset | drop
    max_gap_s: Optional[float] = 10.0  # a forward stamp jump over this resets; None: never
    size_change_frames: int = 3  # consecutive frames of a new size that restart the stream

    def __post_init__(self) -> None:
        check_positive_int("num_scale_frames", self.num_scale_frames)
        if self.on_stamp_backwards not in STAMP_BACKWARDS_POLICIES:
            raise ValueError(f"on_stamp_backwards must be one of {STAMP_BACKWARDS_POLICIES}, "
                             f"got {self.on_stamp_backwards!r}")
        gap = self.max_gap_s
        if gap is not None and (isinstance(gap, bool) or not isinstance(gap, (int, float))
                                or not 0 < gap < float("inf")):
            raise ValueError(f"max_gap_s must be a positive number of seconds or None, got "
                             f"{gap!r}")
        check_positive_int("size_change_frames", self.size_change_frames)
        check_positive_int("window", self.window)
        if self.max_special_frames is not None:
            check_positive_int("max_special_frames", self.max_special_frames)
            if self.max_special_frames < self.num_scale_frames:
                raise ValueError(f"max_special_frames ({self.max_special_frames}) must be at "
                                 f"least num_scale_frames ({self.num_scale_frames})")
        if self.max_cache_bytes is not None:
            check_positive_int("max_cache_bytes", self.max_cache_bytes)
        if self.rollover_keyframes is not None:
            check_positive_int("rollover_keyframes", self.rollover_keyframes)
            if self.rollover_keyframes <= self.num_scale_frames:
                raise ValueError(f"rollover_keyframes ({self.rollover_keyframes}) must exceed "
                                 f"num_scale_frames ({self.num_scale_frames}): a window starts "
                                 "with that many anchors")
        if self.rollover_mode not in ROLLOVER_MODES:
            raise ValueError(f"rollover_mode must be one of {ROLLOVER_MODES}, "
                             f"got {self.rollover_mode!r}")
        check_positive_int("rollover_slices_per_frame", self.rollover_slices_per_frame)
        if not isinstance(self.keyframes, KeyframeConfig):
            raise ValueError("keyframes must be a KeyframeConfig")
        if not isinstance(self.preprocess, PreprocessConfig):
            raise ValueError("preprocess must be a PreprocessConfig")
        for name in ("with_depth", "return_depth", "return_features", "cuda_graphs"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.attention_backend not in ATTENTION_BACKENDS:
            raise ValueError(f"attention_backend must be one of {ATTENTION_BACKENDS}, "
                             f"got {self.attention_backend!r}")
        if self.flashinfer_variant not in FLASHINFER_VARIANTS:
            raise ValueError(f"flashinfer_variant must be one of {FLASHINFER_VARIANTS}, "
                             f"got {self.flashinfer_variant!r}")
        if self.fused_kernels not in FUSED_KERNEL_MODES:
            raise ValueError(f"fused_kernels must be one of {FUSED_KERNEL_MODES}, "
                             f"got {self.fused_kernels!r}")
        unknown = sorted(set(self.fused_kernels_off) - set(FUSED_KERNEL_NAMES))
        if unknown:
            raise ValueError(f"fused_kernels_off: unknown kernel(s) {unknown}; choose from "
                             f"{FUSED_KERNEL_NAMES}")
        if not isinstance(self.device, str) or not self.device:
            raise ValueError(f"device must be a torch device string, got {self.device!r}")
        check_kv_splits(self.kv_splits)

    def cache_extra(self) -> dict:
        """CacheConfig fields beyond the model's shapes: retention and pool sizing."""
        chunk = (self.segment_capacity() if self.rollover_keyframes is not None
                 and self.max_special_frames is None else 1024)  # one window never grows
        return {"max_special_frames": self.max_special_frames, "max_cache_bytes":
                self.max_cache_bytes, "special_chunk_frames": chunk}

    def graph_kv_splits(self) -> int:
        """Split-KV parts a graphed step can always use: it sees at least the anchor pages,
        its own page and one special page."""
        return min(self.kv_splits, self.num_scale_frames + 2)

    def camera_chunk_frames(self) -> int:
        """Camera-head cache capacity step: one window's keyframes when rolling over."""
        return self.segment_capacity() if self.rollover_keyframes is not None else 256

    def segment_capacity(self) -> int:
        """Frames one segment's caches hold without growing: its keyframes, the step in
        flight, and with ``rollover_mode: sliced`` the keyframes taken while the next
        segment is built (``ROLLOVER_SLACK_KEYFRAMES``). Needs ``rollover_keyframes``."""
        slack = ROLLOVER_SLACK_KEYFRAMES if self.rollover_mode == "sliced" else 0
        return self.rollover_keyframes + 1 + slack
