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
    from lingbot_ros.config import MAX_KV_SPLITS, SessionConfig
    assert MAX_KV_SPLITS == 8
    for bad in (0, MAX_KV_SPLITS + 1, 2.0, True):
        with pytest.raises(ValueError, match=rf"kv_splits must be an integer in \[1, "
                                             rf"{MAX_KV_SPLITS}\]"):
            SessionConfig(kv_splits=bad)
    assert SessionConfig(kv_splits=MAX_KV_SPLITS).kv_splits == MAX_KV_SPLITS
    assert SessionConfig().kv_splits == 4 and SessionConfig().graph_kv_splits() == 4
    assert SessionConfig(num_scale_frames=1, kv_splits=8).graph_kv_splits() == 3


@pytest.mark.parametrize("value", [1, 7, 10**12])
def test_positive_int_validator_accepts_ints_from_one(value):
    from lingbot_ros.config import check_non_negative_int, check_positive_int
    check_positive_int("x", value)
    check_non_negative_int("x", value)


@pytest.mark.parametrize("value", [0, -1, 1.0, True, "3", None])
def test_positive_int_validator_names_the_field(value):
    from lingbot_ros.config import check_positive_int
    with pytest.raises(ValueError, match=r"^x must be a positive integer, got "):
        check_positive_int("x", value)


@pytest.mark.parametrize("value", [-1, 0.0, False, "0", None])
def test_non_negative_int_validator_names_the_field(value):
    from lingbot_ros.config import check_non_negative_int
    check_non_negative_int("y", 0)
    with pytest.raises(ValueError, match=r"^y must be an integer >= 0, got "):
        check_non_negative_int("y", value)


def test_the_choice_lists_start_with_their_default():
    from lingbot_ros import config
    assert config.PRECISIONS == ("auto", "fp32", "bf16")
    assert config.ATTENTION_BACKENDS[0] == config.SessionConfig().attention_backend == "auto"
    assert config.FLASHINFER_VARIANTS[0] == config.SessionConfig().flashinfer_variant == "auto"
    assert config.FUSED_KERNEL_MODES[0] == config.SessionConfig().fused_kernels == "auto"
    assert config.KEYFRAME_POLICIES[0] == config.KeyframeConfig().policy
    from lingbot_ros.ros.params.node_config import NodeConfig
    from lingbot_ros.ros.params.table import IMAGE_QOS
    assert IMAGE_QOS[0] == NodeConfig().image_qos
    assert NodeConfig().base_frame == "base_link" and not NodeConfig().camera_only
