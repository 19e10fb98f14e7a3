"""HostReadback: one wait per frame, and arrays that stay valid while the next frame's copies
are queued (the session builds frame t's result after queueing frame t+1's)."""
import numpy as np
import pytest
import torch

from lingbot_ros.session.readback import HostReadback

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_cpu_tensors_are_read_without_a_device():
    rb = HostReadback()
    rb.start({"x": torch.arange(4.0), "b": torch.ones(2, dtype=torch.bfloat16)})
    assert rb.pending and rb.ready()
    out = rb.wait()
    np.testing.assert_array_equal(out["x"], [0, 1, 2, 3])
    assert out["b"].dtype == np.float32  # numpy has no bfloat16
    assert not rb.pending


def test_start_twice_without_a_wait_is_refused():
    rb = HostReadback()
    rb.start({"x": torch.zeros(1)})
    with pytest.raises(RuntimeError, match="not waited for"):
        rb.start({"x": torch.zeros(1)})
    with pytest.raises(RuntimeError, match="nothing was started"):
        HostReadback().wait()


@pytest.mark.gpu
@cuda
def test_arrays_stay_valid_until_the_second_start_after_their_wait():
    rb = HostReadback()
    frames = [torch.full((256, 256), float(i), device="cuda") for i in range(4)]
    rb.start({"d": frames[0]})
    first = rb.wait()
    rb.start({"d": frames[1]})  # frame 1's copies queued: frame 0's arrays are untouched
    torch.cuda.synchronize()
    assert (first["d"] == 0).all()
    second = rb.wait()
    assert (second["d"] == 1).all() and (first["d"] == 0).all()
    rb.start({"d": frames[2]})  # the second start after frame 0's wait reuses its buffers
    third = rb.wait()
    assert (third["d"] == 2).all() and (second["d"] == 1).all()


@pytest.mark.gpu
@cuda
def test_a_discarded_readback_leaves_the_next_one_correct():
    rb = HostReadback()
    rb.start({"d": torch.full((8,), 5.0, device="cuda")})
    rb.discard()
    rb.start({"d": torch.full((8,), 7.0, device="cuda")})
    assert (rb.wait()["d"] == 7).all()
