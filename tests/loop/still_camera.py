"""A tiny checkpoint whose camera head says every frame is where the first one is: random
weights everywhere else (the depth is the random model's), the pose branch's last layer set
so that each frame's pose encoding is the identity with a fixed field of view.

Random weights make the pair's relative pose a random one, which the verification gates
refuse (little overlap); with this checkpoint every pair's relative pose is the identity,
so a candidate verifies (with the geometric gates opened: the two frames' random depths
disagree) and the front ends' loop plumbing -- acceptance, the graph, map -> odom, the
files, a stored map and relocalization -- runs through the real model and session. A known
factor injected into the model under test, not a stand-in for it."""
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
