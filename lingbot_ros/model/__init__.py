"""LingBot-Map's streaming GCT network: weights and math, no per-stream state.

Public API: ``GCTConfig`` (+ sub-configs), ``GCTModel`` (a stateless step: caches, plans and
kernel choices come in a ``StepContext``), ``StepOutputs``, ``record_intermediates`` / ``TAP_KEYS``,
``load_model`` / ``load_weights`` / ``read_state_dict``, ``CheckpointError``,
``check_device`` / ``DeviceError`` (is the device usable by this torch), the pose
helpers ``pose_to_c2w`` / ``pose_to_intrinsics``, and ``FusedKernels`` (which fused kernels a
stream's calls use), ``Slices`` / ``run_to_end`` (a step's forward cut into slices,
``GCTModel.forward_slices``). See docs/model.md.
"""
from .config import AggregatorConfig, CameraHeadConfig, DinoConfig, DPTConfig, GCTConfig
from .device import DeviceError, check_device
from .fused_kernels import UNFUSED, FusedKernels
from .gct import GCTModel
from .loader import CheckpointError, check_state_dict, load_model, load_weights, read_state_dict
from .pose import pose_to_c2w, pose_to_intrinsics, quaternion_to_matrix
from .step import Slices, StepContext, StepOutputs, run_to_end
from .taps import TAP_KEYS, record_intermediates

__all__ = ["AggregatorConfig", "CameraHeadConfig", "DinoConfig", "DPTConfig", "GCTConfig",
           "GCTModel", "CheckpointError", "DeviceError", "check_device", "check_state_dict", "load_model", "load_weights",
           "read_state_dict", "pose_to_c2w", "pose_to_intrinsics", "quaternion_to_matrix",
           "Slices", "StepContext", "StepOutputs", "run_to_end", "TAP_KEYS", "record_intermediates", "FusedKernels", "UNFUSED"]
