"""What the node says about itself: ~/status, ~/cache_info, /diagnostics, the health level, the
telemetry counters and the collector's pauses."""
