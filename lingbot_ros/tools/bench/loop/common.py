"""What the back end's benchmarks share: their figures' statistics (``stats``), the machine
they ran on (``machine``, ``cpu_model``), their frames' options and one CPU core
(``add_frame_options``, ``parse_on_one_core``) and the one JSON object they print
(``print_json``)."""
from __future__ import annotations

import argparse
import json
import os
import platform
from typing import Callable, Optional

import numpy as np

__all__ = ["stats", "cpu_model", "machine", "add_frame_options", "parse_on_one_core",
           "print_json"]


def stats(values, scale: float = 1.0, *, tail: bool = True, count: Optional[str] = "n",
          digits: Optional[int] = None) -> dict:
    """``median`` and ``p90`` of ``values`` times ``scale`` (1e3: seconds -> ms), then
    ``max`` (when ``tail``) and the number of values under the key ``count`` (none when
    None); the figures rounded to ``digits`` when given."""
    a = np.asarray(values) * scale
    out = {"median": float(np.median(a)), "p90": float(np.percentile(a, 90))}
    if tail:
        out["max"] = float(a.max())
    if digits is not None:
        out = {k: round(v, digits) for k, v in out.items()}
    if count is not None:
        out[count] = int(a.size)
    return out


def cpu_model() -> str:
    """The CPU's model name (Linux), else what the platform module says."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine(python: bool = False) -> dict:
    """The CPU, its cores and the ones this process may run on, BLAS's threads, (Python's
    version when ``python``) and numpy's."""
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    out = {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "affinity": affinity,
           "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS")}
    if python:
        out["python"] = platform.python_version()
    out["numpy"] = np.__version__
    return out


def add_frame_options(parser: argparse.ArgumentParser) -> None:
    """``--height`` / ``--width`` (the model's input), ``--feature-dim`` (the ViT-L's
    patch tokens) and ``--seed``."""
    parser.add_argument("--height", type=int, default=392)
    parser.add_argument("--width", type=int, default=518)
    parser.add_argument("--feature-dim", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)


def parse_on_one_core(parser: argparse.ArgumentParser, argv) -> argparse.Namespace:
    """Add ``--all-cores``, parse ``argv``, then pin the process to one CPU core (where the
    OS allows) unless ``--all-cores``."""
    parser.add_argument("--all-cores", action="store_true",
                        help="do not pin the process to one CPU core")
    args = parser.parse_args(argv)
    if not args.all_cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    return args


def print_json(parser: argparse.ArgumentParser, run: Callable[[], dict]) -> int:
    """Print ``run()``'s object as indented JSON; its ValueError is the parser's usage
    error (exit 2)."""
    try:
        result = run()
    except ValueError as err:
        parser.error(str(err))
    print(json.dumps(result, indent=2))
    return 0
