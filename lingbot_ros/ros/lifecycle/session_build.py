"""Configure's heavy part: the model (checkpoint or random), the session, the warm-up and a
``session.resume_from`` snapshot. The node runs it on a ``BackgroundJob`` (seconds to minutes,
in torch), so a SIGINT/SIGTERM need not wait for it; it writes nothing.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np

from ...session import (FrameIn, MultiStreamSession, StreamingSession, load_session_model,
                      warm_up)

if TYPE_CHECKING:
    from ..params.declare import Settings


def build_session(settings: Settings
                  ) -> tuple[StreamingSession | MultiStreamSession, bool, Optional[dict]]:
    """The session of ``settings``; returns ``(session, random_weights, resumed)``:
    ``resumed`` is the restored snapshot's manifest (None without ``resume_from``).
    A camera rig (``cameras.names``): a ``MultiStreamSession``, one stream per camera with
    the session's settings (``check_rig_build``: what a rig cannot do yet)."""
    rig = settings.node.rig
    if rig.enabled:  # before the model: nothing to load for a refusal
        check_rig_build(settings)
    model, random_weights = load_session_model(
        settings.session, settings.preset, settings.checkpoint or None, settings.precision,
        camera_head_precision=settings.camera_head_precision,
        depth_head_precision=settings.depth_head_precision,
        mlp_precision=settings.mlp_precision,
        trust_pickle=settings.trust_pickle)
    if rig.enabled:  # one stream per camera, the model's weights shared
        configs = {name: settings.session for name in rig.camera_names}
        multi = MultiStreamSession(model, configs)
        if settings.warmup:
            warm_up_rig(multi)
        return multi, random_weights, None
    session = StreamingSession(model, settings.session)
    if settings.warmup:
        warm_up(session)
    # session.resume_from: a snapshot that cannot be restored fails the configure (with the
    # reason), never a fresh map in its place
    resumed = session.snapshots.restore(settings.resume_from) if settings.resume_from else None
    if settings.save_on_shutdown:  # the weights' digest now, not in the shutdown's time
        session.weights.origin()
    return session, random_weights, resumed


def warm_up_rig(session: MultiStreamSession) -> None:
    """``warm_up`` for a rig: a few dummy steps of every camera together (the batched step
    of every stream, its graphs), with and without depth, then every stream reset."""
    config = session.stream(session.names[0]).config
    width = config.preprocess.width
    image = np.full((config.preprocess.height or width * 3 // 4, width, 3), 127, np.uint8)
    steps = [None] * (config.num_scale_frames + 2) + ([False] if config.with_depth else [])
    for i, with_depth in enumerate(steps):
        session.submit_many({n: FrameIn(image, i + 1, with_depth=with_depth)
                             for n in session.names})
        for name in session.names:
            session.collect(name)
    for name in session.names:
        session.reset(name)


def check_rig_build(settings: Settings) -> None:
    """ValueError naming the parameter a camera rig does not support yet: session snapshots
    (``session.resume_from``, ``session.save_on_shutdown``) and the back end (``loop.enable``,
    one stream)."""
    for name, value in (("session.resume_from", settings.resume_from),
                        ("session.save_on_shutdown", settings.save_on_shutdown),
                        ("loop.enable", settings.loop.enable)):
        if value:
            raise ValueError(f"parameter '{name}': not supported with a camera rig "
                             f"(cameras.names) yet; unset it or run one camera")
