"""The loop_stream_cost benchmark's JSON: every way timed, the back end fed every keyframe."""
from __future__ import annotations

import math

from lingbot_ros.tools.bench.loop.loop_stream_cost import run_loop_stream_bench


def test_the_bench_times_each_way_and_feeds_every_keyframe():
    out = run_loop_stream_bench(width=56, height=42, frames=10, distinct=3, rounds=1,
                                inline=True)
    for way in ("alone", "beside", "inline"):
        stats = out[way]["stream_ms"]
        assert stats["frames"] == 8 and 0 < stats["median"] <= stats["max"]
    for way in ("beside", "inline"):
        assert math.isfinite(out[way]["added_median_ms"]) and out[way]["ratio_to_alone"] > 0
        back = out[way]["back_end_last_round"]
        assert back["keyframes"] == 10 and back["candidates"] > 0
    # inline verifies every candidate; beside may offer some unverified, never loses one
    assert out["inline"]["back_end_last_round"]["busy"] == 0
    b = out["beside"]["back_end_last_round"]
    assert b["verified_or_rejected"] + b["busy"] == b["candidates"]
