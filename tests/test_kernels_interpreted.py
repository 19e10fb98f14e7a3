"""The Triton kernels on the CPU, in Triton's interpreter, against their torch fallbacks.

For machines with Triton but no GPU (the GPU tests cover CUDA). Each kernel runs in a
subprocess: ``TRITON_INTERPRET=1`` must be set before triton is imported, and this process
may have imported it already. The cases and tolerances are ``tests.kernel_cases``'s.
"""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.kernel_cases import CASES

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                       reason="needs triton installed (its interpreter runs the kernels on "
                              "the CPU)"),
    pytest.mark.skipif(torch.cuda.is_available(),
                       reason="a CUDA GPU is here: the GPU tests run the kernels on it"),
]


@pytest.mark.parametrize("kernel", sorted(CASES))
def test_kernel_matches_its_torch_fallback_in_the_interpreter(kernel):
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-m", "tests.kernel_cases", kernel], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == len(CASES[kernel])
    print(kernel, json.dumps(results))  # the observed differences, with pytest -s
