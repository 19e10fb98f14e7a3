"""Can this torch run on the requested device? Checked before anything is built on it, so a
CPU-only torch asked for ``cuda`` says which torch it is and how to get a CUDA build, instead of
``AssertionError: Torch not compiled with CUDA enabled`` from deep inside a module."""
from __future__ import annotations

from pathlib import Path

import torch

CUDA_INSTALL_HINT = ("install a CUDA build of torch into this environment, e.g. `pip install "
                     "torch --index-url https://download.pytorch.org/whl/cu128` (pick the "
                     "index of your CUDA version on https://pytorch.org/get-started/)")


class DeviceError(RuntimeError):
    """The requested device cannot be used by this torch build / machine."""


def _which_torch() -> str:
    return f"torch {torch.__version__} from {Path(torch.__file__).parent}"


def check_device(device: str | torch.device) -> torch.device:
    """The device as a ``torch.device``; ``DeviceError`` saying what to do when it is unusable.

    Checks: a parseable name; for ``cuda``/``cuda:N``, a torch built with CUDA (or ROCm), a
    visible GPU, and N below the number of visible GPUs.
    """
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise DeviceError(f"device {device!r} is not a torch device name (cpu, cuda, "
                          f"cuda:N): {exc}") from None
    if dev.type != "cuda":
        return dev
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        raise DeviceError(f"device {str(device)!r} needs CUDA, but this is a CPU-only torch "
                          f"({_which_torch()}): {CUDA_INSTALL_HINT}; or use device cpu")
    if not torch.cuda.is_available():
        raise DeviceError(f"device {str(device)!r}: {_which_torch()} is built for CUDA "
                          f"{torch.version.cuda or torch.version.hip} but sees no GPU (check "
                          f"nvidia-smi, the driver version and CUDA_VISIBLE_DEVICES); or use "
                          f"device cpu")
    count = torch.cuda.device_count()
    if dev.index is not None and dev.index >= count:
        raise DeviceError(f"device {str(device)!r}: only {count} CUDA device(s) visible "
                          f"(cuda:0..cuda:{count - 1})")
    return dev
