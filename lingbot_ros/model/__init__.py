"""LingBot-Map's streaming GCT network: weights and math, no per-stream state.

Public API: ``GCTConfig`` (+ sub-configs), ``GCTModel`` (a stateless step: caches, plans and
kernel choices are arguments), ``StepOutputs``, ``record_intermediates`` / ``TAP_KEYS``,
``load_model`` / ``load_weights`` / ``read_state_dict``, ``CheckpointError``, the pose
helpers ``pose_to_c2w`` / ``pose_to_intrinsics``, and ``FusedKernels`` (which fused kernels a
stream's calls use). See docs/model.md.
"""
from .config import AggregatorConfig, CameraHeadConfig, DinoConfig, DPTConfig, GCTConfig
from .fused_kernels import UNFUSED, FusedKernels
from .gct import GCTModel
from .loader import CheckpointError, check_state_dict, load_model, load_weights, read_state_dict
from .pose import pose_to_c2w, pose_to_intrinsics, quaternion_to_matrix
from .step import StepOutputs
from .taps import TAP_KEYS, record_intermediates

__all__ = ["AggregatorConfig", "CameraHeadConfig", "DinoConfig", "DPTConfig", "GCTConfig",
           "GCTModel", "CheckpointError", "check_state_dict", "load_model", "load_weights",
           "read_state_dict", "pose_to_c2w", "pose_to_intrinsics", "quaternion_to_matrix",
           "StepOutputs", "TAP_KEYS", "record_intermediates", "FusedKernels", "UNFUSED"]
