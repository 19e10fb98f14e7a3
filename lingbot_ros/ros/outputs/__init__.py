"""What goes out per frame: the publishers and how a FrameResult becomes messages, ~/path kept
as CDR, the voxel map, ~/scale."""
