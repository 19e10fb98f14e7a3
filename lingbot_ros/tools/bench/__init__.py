"""lingbot-ros-bench and its sections: configurations, GPU profile, parity, cache, scale and
snapshot costs."""
