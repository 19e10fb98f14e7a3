"""Step outputs: shapes, optional heads, debug intermediates, camera-to-world consistency."""
import torch

from lingbot_ros.model import DEBUG_KEYS, GCTModel, load_weights

from .conftest import Stream

HW = (112, 154)


def test_phase_one_outputs_and_debug_intermediates(tiny_model, frames):
    stream = Stream(tiny_model.config, HW)
    debug = {}
    out, txn = tiny_model.step(frames[:2], stream.cache, stream.camera, stream.backend, 2,
                               debug=debug)
    txn.commit()
    assert out.pose_enc.shape == (2, 9) and out.pose_enc_list.shape == (4, 2, 9)
    assert torch.equal(out.pose_enc_list[-1], out.pose_enc)
    assert out.c2w.shape == (2, 4, 4) and out.intrinsics.shape == (2, 3, 3)
    assert torch.equal(out.c2w[:, :3, 3], out.pose_enc[:, :3])
    assert out.depth.shape == (2, *HW, 1) and out.depth_conf.shape == (2, *HW)
    assert (out.depth > 0).all() and (out.depth_conf > 1).all()
    assert out.world_points is None and out.time_index == 0
    assert set(debug) == set(DEBUG_KEYS)
    assert debug["aggregator_selected_layers"].shape == (4, 2, 94, 256)
    assert debug["global_block0_attn_out"].shape == (2, 94, 128)


def test_depth_head_can_be_switched_off_without_changing_the_pose(tiny_model, frames):
    poses = []
    for with_depth in (True, False):
        stream = Stream(tiny_model.config, HW)
        tiny_model.step(frames[:2], stream.cache, stream.camera, stream.backend, 2).txn.commit()
        out, txn = tiny_model.step(frames[2:3], stream.cache, stream.camera, stream.backend, 2,
                                   with_depth=with_depth)
        txn.commit()
        assert (out.depth is None) == (not with_depth)
        poses.append(out.pose_enc)
    assert torch.equal(poses[0], poses[1])


def test_point_head_runs_when_present(tiny_config, frames):
    model = GCTModel(tiny_config.with_point_head(True))
    state = dict(model.state_dict())
    load_weights(model, state)  # loads a complete state dict
    model.prepare("cpu", "fp32")
    stream = Stream(model.config, HW)
    out, txn = model.step(frames[:2], stream.cache, stream.camera, stream.backend, 2)
    txn.commit()
    assert out.world_points.shape == (2, *HW, 3) and out.world_points_conf.shape == (2, *HW)
    out, txn = model.step(frames[2:3], stream.cache, stream.camera, stream.backend, 2,
                          with_points=False)
    assert out.world_points is None
    txn.rollback()
