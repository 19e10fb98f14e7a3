"""Whether a Triton kernel module imports here, and why not: the fused kernels' one check.

Only the ``*_triton.py`` modules import triton (tests/test_import_boundaries.py); the code
around them asks this first and falls back to torch ops when the answer is not ''.
"""
from __future__ import annotations

import importlib
from functools import lru_cache


@lru_cache(maxsize=None)
def import_status(module: str) -> str:
    """'' when ``module`` imports, else why not (no Triton, a broken install...)."""
    try:
        importlib.import_module(module)
    except Exception as exc:  # ImportError, or a broken Triton install
        return f"{type(exc).__name__}: {exc}"
    return ""
