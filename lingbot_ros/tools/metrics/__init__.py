"""Trajectory metrics against a ground truth (the numbers evo users know) and their plots."""
