"""Synthetic camera sequences with exact ground truth, and their writers."""
