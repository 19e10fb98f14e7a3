"""SeparateStreams: the multi-stream session's interface (issue 35 part D's
``MultiStreamSession``: ``names``, ``submit_many``, ``collect(name)``, ``reset(name)``,
``stream(name)``) over one real tiny ``StreamingSession`` per camera on the CPU: what the
batched session equals per stream, so the rig's node side is tested before it is merged."""
from __future__ import annotations

from lingbot_ros.config import PreprocessConfig, SessionConfig
from lingbot_ros.session import FrameRejected, open_session

# The node tests' tiny configuration (tests/ros/node_harness.py TINY_PARAMS).
SESSION = SessionConfig(num_scale_frames=2, window=4, preprocess=PreprocessConfig(width=56))


class SeparateStreams:
    """The multi-stream session's interface over one ``StreamingSession`` per camera."""

    def __init__(self, names) -> None:
        self.names = tuple(names)
        self._sessions = {n: open_session(SESSION, "tiny")[0] for n in self.names}
        self.resets: list[str] = []

    def submit_many(self, frames):
        out = {}
        for name, f in frames.items():
            try:
                out[name] = self._sessions[name].submit(f.image, f.stamp_ns, f.encoding,
                                                        with_depth=f.with_depth)
            except FrameRejected as exc:
                out[name] = exc
        return out

    def collect(self, name, wait=True):
        return self._sessions[name].collect(wait=wait)

    def reset(self, name):
        self.resets.append(name)
        self._sessions[name].reset()

    def stream(self, name):
        return self._sessions[name]
