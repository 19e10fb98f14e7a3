"""Checkpoint loading: official ``.pt`` files and ``.safetensors``, strict, all-or-nothing.

    model = load_model("lingbot-map.pt", device="cuda")          # builds the right network
    load_weights(model, "model.safetensors")                     # into an existing one

``.pt`` files are read with ``torch.load(weights_only=True)``, which cannot run code from the
file. A checkpoint that needs full unpickling is refused with a clear message unless the
caller passes ``trust_pickle=True`` (only for files from a trusted source; the tools'
``--trust-checkpoint``, the node's ``model.trust_pickle``), or is converted once with
``lingbot-ros-convert-checkpoint`` (lingbot_ros/tools/convert_checkpoint.py). A ``{"model": ...}``
or ``{"state_dict": ...}`` wrapper is unwrapped. ``point_head.*`` is optional: ``load_model``
builds the point head only when the file has it. Everything is checked before any tensor is
copied, so a wrong file leaves the model untouched.
"""
from __future__ import annotations

import pickle
import warnings
import zipfile
from pathlib import Path
from typing import Mapping, Sequence

import torch
from torch import Tensor

from .config import GCTConfig
from .gct import GCTModel

POINT_HEAD_PREFIX = "point_head."
MAX_LISTED = 12  # keys listed per category in an error message


class CheckpointError(ValueError):
    """The file is not a LingBot-Map checkpoint for this configuration."""


def read_state_dict(path: str | Path, trust_pickle: bool = False) -> dict[str, Tensor]:
    """Read a flat ``name -> tensor`` dict from ``.safetensors`` or a torch ``.pt`` file.

    Args:
        path: checkpoint file.
        trust_pickle: allow full unpickling if the safe loader refuses the file.
    Raises:
        CheckpointError: unreadable file, or no tensor dict inside.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file
        try:
            return load_file(str(path))
        except (SafetensorError, OSError, ValueError) as exc:
            raise CheckpointError(f"{path} is not a readable safetensors file: {exc}") from exc
    if not _looks_like_torch_file(path):
        raise CheckpointError(f"{path} is neither a torch checkpoint (zip or pickle) nor a "
                              ".safetensors file")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if not trust_pickle:
            reason = str(exc).strip().splitlines()[0][:200]
            raise CheckpointError(
                f"{path} cannot be read with torch.load(weights_only=True) ({reason}). Convert it "
                f"once: lingbot-ros-convert-checkpoint {path} "
                f"{path.with_suffix('.safetensors')} (only for a file from a trusted source); "
                "or allow full unpickling, which runs code from the file: trust_pickle=True "
                "(Python), --trust-checkpoint (the tools), model.trust_pickle: true (the "
                "node).") from exc
        warnings.warn(f"{path}: loading with full unpickling (trust_pickle=True)", stacklevel=2)
        obj = torch.load(path, map_location="cpu", weights_only=False)
    except (RuntimeError, OSError, EOFError, ValueError) as exc:
        raise CheckpointError(f"{path} is neither a torch checkpoint nor a .safetensors file: "
                              f"{exc}") from exc
    return _unwrap(obj, path)


def _looks_like_torch_file(path: Path) -> bool:
    """torch.save writes a zip archive (or, legacy, a pickle starting with PROTO 0x80)."""
    if zipfile.is_zipfile(path):
        return True
    with open(path, "rb") as f:
        return f.read(1) == b"\x80"


def _unwrap(obj, path: Path) -> dict[str, Tensor]:
    for key in ("model", "state_dict"):
        if isinstance(obj, Mapping) and isinstance(obj.get(key), Mapping):
            obj = obj[key]
            break
    if not isinstance(obj, Mapping) or not obj or not all(
            isinstance(k, str) and isinstance(v, Tensor) for k, v in obj.items()):
        raise CheckpointError(f"{path} does not hold a state dict (name -> tensor), optionally "
                              "wrapped in {'model': ...}")
    return dict(obj)


def check_state_dict(model: GCTModel, state: Mapping[str, Tensor],
                     source: str = "checkpoint") -> None:
    """Raise one ``CheckpointError`` listing missing, unexpected and mis-shaped keys."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    misshaped = sorted(f"{k}: file {tuple(state[k].shape)} vs model {expected[k]}"
                       for k in set(expected) & set(state) if tuple(state[k].shape) != expected[k])
    if not (missing or unexpected or misshaped):
        return
    lines = [f"{source} does not match the model ({len(expected)} tensors expected, "
             f"{len(state)} in the file):"]
    for title, items in (("missing", missing), ("unexpected", unexpected),
                         ("mis-shaped", misshaped)):
        if items:
            shown = ", ".join(items[:MAX_LISTED])
            more = f" ... and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else ""
            lines.append(f"  {len(items)} {title}: {shown}{more}")
    if any(k.startswith(POINT_HEAD_PREFIX) for k in missing) and not any(
            k.startswith(POINT_HEAD_PREFIX) for k in state):
        lines.append("  (the file has no point head: build the model without one)")
    raise CheckpointError("\n".join(lines))


def load_weights(model: GCTModel, source: str | Path | Mapping[str, Tensor],
                 trust_pickle: bool = False) -> GCTModel:
    """Load strictly into ``model`` (all tensors or none); returns the model."""
    if isinstance(source, Mapping):
        state, name = source, "state dict"
    else:
        state, name = read_state_dict(source, trust_pickle), str(source)
    check_state_dict(model, state, source=name)
    model.load_state_dict(state, strict=True)
    return model


def load_model(path: str | Path, config: GCTConfig | Sequence[GCTConfig] | None = None,
               device: str | torch.device = "cpu", precision: str = "auto",
               trust_pickle: bool = False, camera_head_precision: str = "fp32",
               depth_head_precision: str = "fp32", mlp_precision: str = "aggregator"
               ) -> GCTModel:
    """Build the network for a checkpoint and load it.

    Args:
        path: ``lingbot-map.pt``, ``lingbot-map-long.pt``, ``lingbot-map-stage1.pt`` or a
            ``.safetensors`` with the same names.
        config: architecture (default: the released one), or several candidates: the first
            whose tensor names and shapes the file matches is built (the error names the
            first's mismatches). The point head is added or dropped to match the file.
        device, precision, camera_head_precision, depth_head_precision, mlp_precision: see
            ``GCTModel.prepare``.
    """
    state = read_state_dict(path, trust_pickle)
    has_points = any(k.startswith(POINT_HEAD_PREFIX) for k in state)
    candidates = ([config] if isinstance(config, GCTConfig) else list(config or [])) or [
        GCTConfig.official()]
    first_error = None
    for candidate in candidates:
        with torch.device("meta"):  # no memory: shapes only
            model = GCTModel(candidate.with_point_head(has_points))
        try:
            check_state_dict(model, state, source=str(path))
            break
        except CheckpointError as exc:
            first_error = first_error or exc
    else:
        raise first_error
    model.load_state_dict(state, strict=True, assign=True)  # no second copy of the weights
    _init_buffers(model)
    return model.prepare(device, precision, camera_head_precision, depth_head_precision,
                         mlp_precision)


def _init_buffers(model: GCTModel) -> None:
    """Non-persistent buffers are not in the file: rebuild them off the meta device."""
    from .aggregator import IMAGENET_MEAN, IMAGENET_STD
    agg = model.aggregator
    agg.image_mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    agg.image_std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
