"""A handed-in image to the model's input tensor on the device, beside the step in flight.

    upload = FrameUpload(config)
    tensor, crop = upload(image, "rgb8")   # FrameRejected("bad_image") for an unusable image

On CUDA the upload (pinned, asynchronous) and the resize run on a side stream, so they do not
wait for the replay of the frame before; the main stream waits for them instead, and the
tensor is recorded as used there. On the CPU it is ``preprocess``.
"""
from __future__ import annotations

import torch

from ..config import SessionConfig
from ..preprocess import CropInfo, preprocess
from .types import FrameRejected

__all__ = ["FrameUpload"]


class FrameUpload:
    """Preprocessing of the stream's frames onto ``config.device``; owns the side stream."""

    def __init__(self, config: SessionConfig) -> None:
        self.config = config
        self.device = torch.device(config.device)
        self.stream = (torch.cuda.Stream(self.device) if self.device.type == "cuda"
                       else None)

    def __call__(self, image, encoding: str) -> tuple[torch.Tensor, CropInfo]:
        try:
            if self.stream is None:
                return preprocess(image, encoding, self.config.preprocess, device=self.device)
            # Beside the step in flight: the upload (pinned, asynchronous) and the resize
            # do not wait for its replay; the step's stream waits for them instead.
            main = torch.cuda.current_stream(self.device)
            with torch.cuda.stream(self.stream):
                tensor, crop = preprocess(image, encoding, self.config.preprocess,
                                          device=self.device)
            main.wait_stream(self.stream)
            tensor.record_stream(main)  # made on the side stream, used (and kept) on main
            return tensor, crop
        except ValueError as exc:
            raise FrameRejected("bad_image", f"image refused: {exc}") from exc
