"""One parameter row (``Param``) and its value check: the type every table of ros/params is
made of (``table.PARAMS``, the rig's ``rig.RIG_PARAMS`` and its per-camera template rows).
Stdlib only."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

__all__ = ["Param", "check_value", "none_if_negative", "none_if_zero"]


def none_if_negative(value):
    """-1 means "no bound" in ROS (no None there): the config's None."""
    return None if value < 0 else value


def none_if_zero(value):
    return value or None


@dataclass(frozen=True)
class Param:
    name: str  # the ROS parameter
    type: type  # bool, int, float or str (an int is accepted for a float)
    default: Any
    field: str  # the config field it sets: session.<f>, session.keyframes.<f>,
    #             session.preprocess.<f>, node.<f>, scale.<f>, loop.<f>, settings.<f>,
    #             rig.<f> (RigConfig) or camera.<f> (a template row: CameraConfig)
    description: str
    range: Optional[tuple[float, float]] = None  # inclusive, advertised in the descriptor
    choices: tuple = ()
    step: int = 0  # int only: the value is range[0] plus a multiple of it (0: any)
    to_config: Optional[Callable[[Any], Any]] = None  # the ROS value -> the field's (None: same)

    @property
    def attribute(self) -> str:
        """The field's name in its config (``window`` for ``session.window``)."""
        return self.field.rsplit(".", 1)[1]

    def config_value(self, value):
        value = float(value) if self.type is float else value
        return self.to_config(value) if self.to_config is not None else value


def check_value(p: Param, value, label: Optional[str] = None) -> None:
    """ValueError unless ``value`` has ``p``'s type and lies in its range or choices; the
    message starts with ``label`` (default: ``parameter '<name>'``)."""
    label = label or f"parameter {p.name!r}"
    if type(value) is not p.type and not (p.type is float and type(value) is int):
        raise ValueError(f"{label} must be {p.type.__name__}, got {value!r}")
    if p.choices and value not in p.choices:
        raise ValueError(f"{label} must be one of {list(p.choices)}, got {value!r}")
    if p.range is not None and not p.range[0] <= value <= p.range[1]:
        raise ValueError(f"{label} must be in [{p.range[0]}, {p.range[1]}], got {value!r}")
    if p.step and (value - p.range[0]) % p.step:
        raise ValueError(f"{label} must be a multiple of {p.step}, got {value!r}"
                         if p.range[0] % p.step == 0 else
                         f"{label} must be {p.range[0]} plus a multiple of {p.step}, "
                         f"got {value!r}")
