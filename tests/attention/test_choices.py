"""The attention layer's allowed values come from config.py (one list per setting)."""
from lingbot_ros import attention, config
from lingbot_ros.attention import flashinfer_paged
from lingbot_ros.model import qk_fused


def test_backends_are_the_concrete_attention_backends():
    assert attention.BACKENDS == ("torch_ref", "flashinfer")
    assert set(attention.BACKENDS) | {"auto"} == set(config.ATTENTION_BACKENDS)


def test_flashinfer_and_fused_kernel_choices_are_configs():
    assert flashinfer_paged.FLASHINFER_VARIANTS is config.FLASHINFER_VARIANTS
    assert flashinfer_paged.check_kv_splits is config.check_kv_splits
    assert qk_fused.MODES is config.FUSED_KERNEL_MODES
