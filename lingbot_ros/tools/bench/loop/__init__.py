"""The back end's benchmarks (docs/loop.md): retrieval, verification, the pose graph,
the back end per keyframe, stored maps, and what it adds to the stream per frame."""
