"""Floats in the scale package's snapshots (JSON): exact when finite, named otherwise."""
from __future__ import annotations

import math

__all__ = ["float_to_json", "float_from_json"]

_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def float_to_json(value: float):
    """A float as JSON: itself when finite (exact through JSON), else "nan"/"inf"/"-inf" (the
    scale package's snapshots: the estimator's, the odometry source's window)."""
    value = float(value)
    if math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def float_from_json(value) -> float:
    """``float_to_json``'s output back to a float; ValueError for anything else (a bool, a
    string other than "nan"/"inf"/"-inf", a non-number)."""
    if isinstance(value, str):
        if value not in _NON_FINITE:
            raise ValueError(f"{value!r} is not a number")
        return _NON_FINITE[value]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{value!r} is not a number")
    return float(value)
