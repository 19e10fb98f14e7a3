"""Config validation: clear ValueErrors naming the field."""
import pytest

from lingbot_ros.config import CacheConfig


@pytest.mark.parametrize("field,value,match", [
    ("page_size", 0, "page_size must be a positive integer"),
    ("window", -1, "window must be a positive integer"),
    ("scale_frames", -2, "scale_frames must be an integer >= 0"),
    ("num_heads", 2.5, "num_heads must be a positive integer"),
    ("max_special_frames", 0, "max_special_frames must be a positive integer"),
    ("max_cache_bytes", -5, "max_cache_bytes must be a positive integer"),
    ("dtype", "fp8", "dtype must be one of"),
    ("device", "", "device must be a torch device string"),
])
def test_invalid_cache_config_is_refused(field, value, match):
    with pytest.raises(ValueError, match=match):
        CacheConfig(**{field: value})


def test_defaults_describe_the_released_model_at_378x504():
    cfg = CacheConfig()
    assert (cfg.num_layers, cfg.num_heads, cfg.head_dim) == (24, 16, 64)
    assert cfg.page_size == 27 * 36 and cfg.tokens_per_frame == 978
    assert (cfg.scale_frames, cfg.window) == (8, 64)


def test_kv_splits_are_checked_and_clamped_for_graphs():
    import pytest

    from lingbot_ros.config import SessionConfig
    for bad in (0, 9, 2.0, True):
        with pytest.raises(ValueError, match="kv_splits"):
            SessionConfig(kv_splits=bad)
    assert SessionConfig().kv_splits == 4 and SessionConfig().graph_kv_splits() == 4
    assert SessionConfig(num_scale_frames=1, kv_splits=8).graph_kv_splits() == 3
