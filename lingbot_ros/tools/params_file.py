"""Read the ``ros__parameters`` of a ROS 2 params file without ROS (for the tools)."""
from __future__ import annotations

from pathlib import Path

import yaml


def load_params(path: str | Path, node: str = "lingbot_ros") -> dict:
    """Flat ``{name: value}`` of ``node``'s parameters (``/**`` entries apply too)."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    params: dict = {}
    for key in ("/**", node, f"/{node}"):
        section = data.get(key) or {}
        params.update(section.get("ros__parameters") or {})
    if not params:
        raise ValueError(f"{path}: no ros__parameters for node {node!r}")
    return params
