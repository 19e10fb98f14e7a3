"""Model configuration: released defaults, the fixture preset, validation errors."""
import pytest

from lingbot_ros.model import AggregatorConfig, CameraHeadConfig, DinoConfig, DPTConfig, GCTConfig

from tests.conftest import FIXTURE


def test_defaults_are_the_released_model():
    c = GCTConfig.official()
    a = c.aggregator
    d = c.dino
    assert (d.embed_dim, d.depth, d.num_heads, d.num_register_tokens) == (1024, 24, 16, 4)
    assert (a.embed_dim, a.depth, a.num_heads, a.head_dim) == (1024, 24, 16, 64)
    assert a.selected_layers == (4, 11, 17, 23) and a.num_special_tokens == 6
    assert a.video_rope_dims == (20, 22, 22) and a.frame_rope_base == 100.0
    assert c.head_dim_in == 2048 and c.camera_head.num_iterations == 4
    assert c.camera_cache_dims() == dict(num_iterations=4, num_layers=4, num_heads=16, head_dim=128)
    assert c.point_head is None and GCTConfig.official(point_head=True).point_head == DPTConfig()
    cache = c.cache_config((378, 504), scale_frames=8, window=64, dtype="bfloat16", device="cuda")
    assert (cache.num_layers, cache.num_heads, cache.head_dim, cache.page_size) == (24, 16, 64, 972)


def test_the_fixture_preset_reads_every_size_from_config_json():
    c = GCTConfig.from_fixture_json(FIXTURE / "config.json")
    assert (c.dino.embed_dim, c.dino.depth, c.dino.num_heads) == (128, 2, 2)
    assert (c.aggregator.embed_dim, c.aggregator.depth, c.aggregator.num_heads) == (128, 4, 2)
    assert c.aggregator.selected_layers == (0, 1, 2, 3)
    assert (c.camera_head.trunk_depth, c.camera_head.num_heads) == (2, 2)
    assert c.camera_cache_dims()["head_dim"] == 128
    assert c.depth_head == DPTConfig(features=32, out_channels=(32, 64, 128, 128))
    assert c.cache_config((112, 154), 2, 3).page_size == 88


@pytest.mark.parametrize("build, message", [
    (lambda: AggregatorConfig(embed_dim=100, num_heads=16), "not divisible"),
    (lambda: AggregatorConfig(video_rope_dims=(20, 20, 20)), "summing to head_dim 64"),
    (lambda: AggregatorConfig(selected_layers=(4, 11, 17, 24)), "increasing block indices"),
    (lambda: AggregatorConfig(selected_layers=(11, 4, 17, 23)), "increasing block indices"),
    (lambda: DinoConfig(depth=0), "positive integer"),
    (lambda: CameraHeadConfig(num_iterations=0), "positive integer"),
    (lambda: DPTConfig(out_channels=(1, 2, 3)), "4 entries"),
    (lambda: GCTConfig(dino=DinoConfig(embed_dim=768, num_heads=12)), "must equal aggregator"),
    (lambda: GCTConfig(camera_head=CameraHeadConfig(num_heads=3)), "not divisible by 3 heads"),
])
def test_invalid_configs_raise_value_error(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_input_size_must_be_a_multiple_of_the_patch():
    with pytest.raises(ValueError, match="multiples of the patch size 14"):
        GCTConfig.official().cache_config((380, 504), 8, 64)


def test_the_embedded_tiny_preset_is_the_fixture_network():
    assert GCTConfig.tiny() == GCTConfig.from_fixture_json(FIXTURE / "config.json")
