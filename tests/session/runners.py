"""A ``StreamRunner`` for tests: eager, torch_ref attention, no rollover, on the model's device."""
import torch

from lingbot_ros.config import SessionConfig
from lingbot_ros.session import StepKind, StreamRunner


def make_runner(model, image_hw, scale_frames: int = 2, window: int = 3, **session_kwargs
                ) -> StreamRunner:
    fields = dict(num_scale_frames=scale_frames, window=window, rollover_keyframes=None,
                  attention_backend="torch_ref", cuda_graphs=False,
                  device=str(model.aggregator.camera_token.device))
    fields.update(session_kwargs)
    return StreamRunner(model, SessionConfig(**fields), tuple(image_hw))


def stream_poses(runner: StreamRunner, frames, kinds=None, **run_kwargs):
    """Phase 1 on the first ``num_scale_frames`` frames, then one committed frame per step
    (``kinds``: the step kind of each streaming frame, keyframe by default). Returns the
    poses (N, 9) on the CPU."""
    nsf = runner.config.num_scale_frames
    outputs, txn = runner.step(frames[:nsf], StepKind.KEYFRAME, **run_kwargs)
    txn.commit()
    poses = [outputs.pose_enc]
    for i in range(nsf, frames.shape[0]):
        kind = kinds[i] if kinds is not None else StepKind.KEYFRAME
        outputs, txn = runner.step(frames[i:i + 1], kind, **run_kwargs)
        txn.commit()
        poses.append(outputs.pose_enc)
    return torch.cat(poses).cpu()
