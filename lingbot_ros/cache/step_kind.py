"""StepKind: what a frame step sees, decided when it begins. Pure Python.

The window trim that keeping a frame causes always runs at ``commit()`` (so ``rollback()``
has nothing to restore); the kind only says whether the step's own attention already sees
the trimmed window:

    KEYFRAME      kept for sure (known before its forward): the trim is applied to its view
                  first, so it attends to scale + the last ``window`` frames, itself included.
    SPECULATIVE   its fate comes after its forward (a non-keyframe, or any frame of a policy
                  that decides from the outputs): it attends to the un-trimmed cache, i.e.
                  scale + every committed window frame + itself, one frame more than a
                  keyframe once the window is full. This is the reference's deferred eviction.

Committing a speculative step leaves the cache exactly as the same frame begun as a KEYFRAME
and committed would.
"""
from __future__ import annotations

from enum import Enum


class StepKind(str, Enum):
    KEYFRAME = "keyframe"
    SPECULATIVE = "speculative"

    @classmethod
    def parse(cls, value: "StepKind | str") -> "StepKind":
        """``value`` as a StepKind; ValueError naming the choices otherwise."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"step kind must be one of {[k.value for k in cls]}, "
                             f"got {value!r}") from None
