"""A tiny checkpoint whose camera head says every frame is where the first one is: random
weights everywhere else (the depth is the random model's), the pose branch's last layer set
so that each frame's pose encoding is the identity with a fixed field of view.

Random weights make the pair's relative pose a random one, which the verification gates
refuse (little overlap); with this checkpoint every pair's relative pose is the identity,
so a candidate verifies (with the geometric gates opened: the two frames' random depths
disagree) and the front ends' loop plumbing -- acceptance, the graph, map -> odom, the
files, a stored map and relocalization -- runs through the real model and session. A known
factor injected into the model under test, not a stand-in for it.

``steady_camera_checkpoint``: the same layer damped instead of zeroed (its random weights
times 0.02, biased to the identity): poses near the first one with small random
differences, so the front end drifts a little and a loop has something to correct, while a
pair's views still overlap (tests/ros/dds/test_node_loop_closure.py)."""
from __future__ import annotations

from pathlib import Path

FOV_RAD = 1.0


def still_camera_checkpoint(path, seed: int = 0) -> Path:
    """Write the checkpoint (safetensors, the tiny preset's layout) to ``path``."""
    import torch
    from safetensors.torch import save_file

    from lingbot_ros.model import GCTConfig, GCTModel
    torch.manual_seed(seed)
    config = GCTConfig.tiny()
    model = GCTModel(config)
    fc2 = model.camera_head.pose_branch.fc2
    iterations = config.camera_head.num_iterations
    target = torch.tensor([0, 0, 0, 0, 0, 0, 1, FOV_RAD, FOV_RAD], dtype=torch.float32)
    with torch.no_grad():
        fc2.weight.zero_()
        fc2.bias.copy_(target / iterations)  # the deltas of the iterations add up to it
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(path))
    return Path(path)


def steady_camera_checkpoint(path, seed: int = 0) -> Path:
    """Write the damped checkpoint (module docstring): the pose branch's last layer's
    random weights times 0.02, its bias the identity quaternion and a 0.3 rad FoV per
    refinement step (summed over the iterations)."""
    import torch
    from safetensors.torch import save_file

    from lingbot_ros.model import GCTConfig, GCTModel
    torch.manual_seed(seed)
    state = GCTModel(GCTConfig.tiny()).state_dict()
    weight, bias = "camera_head.pose_branch.fc2.weight", "camera_head.pose_branch.fc2.bias"
    state[weight] = state[weight] * 0.02
    state[bias] = torch.zeros_like(state[bias])
    state[bias][6] = 0.25  # qw: [tx ty tz qx qy qz qw fov_h fov_w], summed over 4 steps
    state[bias][7:9] = 0.3
    save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    return Path(path)
