"""Every registered stream part's owner implements the one snapshot protocol: ``state_dict()``
and ``load_state_dict(state)`` (one argument; whatever else it needs it was built with, by
its part's ``build(LoadContext)``), and a fresh owner loaded with a state gives it back.
A state missing a required part is refused; an optional part a state lacks is built fresh."""
import inspect

import numpy as np
import pytest
import torch

from lingbot_ros.config import KeyframeConfig, SessionConfig
from lingbot_ros.session import SnapshotError, SnapshotPart, StreamingSession
from lingbot_ros.session.session_state import load_part
from lingbot_ros.session.snapshot_parts import (FRONT_END, PARTS, RUNNER, LoadContext,
                                                stream_parts)
from lingbot_ros.session.stats import HostLaps
from tests.session.micro_model import SIZE_42x56, micro_model
from tests.session.test_snapshot import DT, STAMP0
from tests.session.test_streaming_session import frames

FLOW = KeyframeConfig(policy="flow", flow_threshold=0.5, max_gap=3)


def config() -> SessionConfig:  # tensors in every part: flow policy, a sliced rollover
    return SessionConfig(preprocess=SIZE_42x56, keyframes=FLOW, num_scale_frames=2, window=3,
                         rollover_keyframes=5, rollover_mode="sliced",
                         rollover_slices_per_frame=1, attention_backend="torch_ref")


@pytest.fixture(scope="module")
def stream() -> StreamingSession:
    """A stream with something in each part: caches, a flow reference, a rollover building."""
    session = StreamingSession(micro_model(), config())
    for k, image in enumerate(frames(40, seed=3)):
        session.push(image, STAMP0 + k * DT)
        if session.info().rollover_building and session.rollovers:
            return session
    raise AssertionError("the stream never had a rollover building after its first one")


def context(session: StreamingSession) -> LoadContext:
    return LoadContext(model=session.model, config=session.config,
                       model_hw=session.runner.image_hw, device=torch.device("cpu"),
                       laps=HostLaps())


def same(a, b, where="state") -> None:
    """Two state trees are equal: keys, lengths, values, tensors and arrays exactly."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), where
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}.{i}")
    elif isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype, where
        assert a.device.type == b.device.type == "cpu" and torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype, where
        assert np.array_equal(a, b), where
    else:
        assert a == b, where


def test_every_stream_part_has_a_session_attribute_and_a_factory():
    for p in PARTS:
        if p.side == FRONT_END:  # a front end's owner is its own
            assert p.attr is None and p.build is None, p.key
        else:
            assert p.attr and callable(p.build), p.key
    assert [p.key for p in stream_parts() if p.nullable] == [RUNNER]


@pytest.mark.parametrize("p", stream_parts(), ids=lambda p: p.key)
def test_every_stream_part_owner_implements_the_protocol(stream, p):
    owner = getattr(stream, p.attr)
    assert owner is not None and isinstance(owner, SnapshotPart), p.key
    for name, count in (("state_dict", 0), ("load_state_dict", 1)):
        params = inspect.signature(getattr(owner, name)).parameters.values()
        assert len(params) == count, (p.key, name, list(params))  # exactly the state
    state = owner.state_dict()
    assert state is not None, p.key  # the fixture's stream has something in every part
    fresh = p.build(context(stream))
    assert type(fresh) is type(owner), p.key
    assert fresh.load_state_dict(state) is None
    same(fresh.state_dict(), state, p.key)


def test_the_session_state_holds_each_part_as_its_owner_saves_it(stream):
    state = stream.snapshots.state_dict()
    for p in stream_parts():
        same(state[p.key], getattr(stream, p.attr).state_dict(), p.key)


@pytest.mark.parametrize("p", [p for p in stream_parts() if not p.optional],
                         ids=lambda p: p.key)
def test_a_state_missing_a_required_part_is_refused(stream, p):
    with pytest.raises(KeyError, match=f"the state has no {p.key}"):
        load_part(p, {}, context(stream))


@pytest.mark.parametrize("p", [p for p in stream_parts() if p.optional], ids=lambda p: p.key)
def test_an_optional_part_a_state_lacks_is_a_fresh_owner(stream, p):
    ctx = context(stream)
    same(load_part(p, {}, ctx).state_dict(), p.build(ctx).state_dict(), p.key)


def test_a_nullable_part_saved_as_none_loads_as_none_and_needs_its_size(stream):
    runner = next(p for p in stream_parts() if p.key == RUNNER)
    fresh = StreamingSession(micro_model(), config())
    assert fresh.snapshots.state_dict()[RUNNER] is None  # no frame yet: no caches
    ctx = context(stream)
    assert load_part(runner, {RUNNER: None}, ctx) is None
    no_size = LoadContext(ctx.model, ctx.config, None, ctx.device, ctx.laps)
    with pytest.raises(SnapshotError, match="caches but no model input size"):
        load_part(runner, {RUNNER: stream.runner.state_dict()}, no_size)
