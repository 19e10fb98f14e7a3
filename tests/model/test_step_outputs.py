"""Step outputs: shapes, optional heads, recorded intermediates, camera-to-world consistency."""
import torch

from lingbot_ros.model import TAP_KEYS, GCTModel, load_weights, record_intermediates
from lingbot_ros.session import StepKind
from tests.session.runners import make_runner

KEY = StepKind.KEYFRAME

HW = (112, 154)


def test_phase_one_outputs_and_recorded_intermediates(tiny_model, frames):
    runner = make_runner(tiny_model, HW)
    with record_intermediates(tiny_model) as debug:
        out, txn = runner.step(frames[:2], KEY)
    txn.commit()
    assert out.pose_enc.shape == (2, 9) and out.pose_enc_list.shape == (4, 2, 9)
    assert torch.equal(out.pose_enc_list[-1], out.pose_enc)
    assert out.c2w.shape == (2, 4, 4) and out.intrinsics.shape == (2, 3, 3)
    assert torch.equal(out.c2w[:, :3, 3], out.pose_enc[:, :3])
    assert out.depth.shape == (2, *HW, 1) and out.depth_conf.shape == (2, *HW)
    assert (out.depth > 0).all() and (out.depth_conf > 1).all()
    assert out.world_points is None and txn.first_frame == 0
    assert set(debug) == set(TAP_KEYS)
    assert debug["aggregator_selected_layers"].shape == (4, 2, 94, 256)
    assert debug["global_block0_attn_out"].shape == (2, 94, 128)
    assert debug["global_block0_out"].shape == (2, 94, 128)
    assert debug["dino_patch_tokens"].shape == (2, 88, 128)
    assert torch.equal(out.patch_tokens, debug["dino_patch_tokens"])  # handed out as computed
    # the hooks are gone: the next step records nothing
    out, txn = runner.step(frames[2:3], KEY)
    txn.commit()
    assert debug["global_block0_out"].shape[0] == 2


def test_depth_head_can_be_switched_off_without_changing_the_pose(tiny_model, frames):
    poses = []
    for with_depth in (True, False):
        runner = make_runner(tiny_model, HW)
        runner.step(frames[:2], KEY)[1].commit()
        out, txn = runner.step(frames[2:3], KEY, with_depth=with_depth)
        txn.commit()
        assert (out.depth is None) == (not with_depth)
        poses.append(out.pose_enc)
    assert torch.equal(poses[0], poses[1])


def test_point_head_runs_when_present(tiny_config, frames):
    model = GCTModel(tiny_config.with_point_head(True))
    state = dict(model.state_dict())
    load_weights(model, state)  # loads a complete state dict
    model.prepare("cpu", "fp32")
    runner = make_runner(model, HW)
    out, txn = runner.step(frames[:2], KEY)
    txn.commit()
    assert out.world_points.shape == (2, *HW, 3) and out.world_points_conf.shape == (2, *HW)
    txn = runner.begin(1, KEY)
    out = runner.run(frames[2:3], txn, with_points=False)
    assert out.world_points is None
    txn.rollback()
