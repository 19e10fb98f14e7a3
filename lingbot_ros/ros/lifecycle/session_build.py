"""Configure's heavy part: the model (checkpoint or random), the session, the warm-up and a
``session.resume_from`` snapshot. The node runs it on a ``BackgroundJob`` (seconds to minutes,
in torch), so a SIGINT/SIGTERM need not wait for it; it writes nothing.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ...session import StreamingSession, load_session_model, warm_up

if TYPE_CHECKING:
    from ..params.declare import Settings


def build_session(settings: Settings) -> tuple[StreamingSession, bool, Optional[dict]]:
    """The session of ``settings``; returns ``(session, random_weights, resumed)``:
    ``resumed`` is the restored snapshot's manifest (None without ``resume_from``)."""
    if settings.node.rig.enabled:  # before the model: nothing to load for a refusal
        raise ValueError("cameras.names: a camera rig is configured, but this build has no "
                         "rig worker yet (the node runs one camera: leave cameras.names empty)")
    model, random_weights = load_session_model(
        settings.session, settings.preset, settings.checkpoint or None, settings.precision,
        camera_head_precision=settings.camera_head_precision,
        depth_head_precision=settings.depth_head_precision,
        mlp_precision=settings.mlp_precision,
        trust_pickle=settings.trust_pickle)
    session = StreamingSession(model, settings.session)
    if settings.warmup:
        warm_up(session)
    # session.resume_from: a snapshot that cannot be restored fails the configure (with the
    # reason), never a fresh map in its place
    resumed = session.snapshots.restore(settings.resume_from) if settings.resume_from else None
    if settings.save_on_shutdown:  # the weights' digest now, not in the shutdown's time
        session.weights.origin()
    return session, random_weights, resumed
