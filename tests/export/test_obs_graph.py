"""The exported raw-state module (obs_graph.FastRawPolicy) computes the training pipeline.

Oracles: the training ObservationModule / RunningNormalizer / Actor in float64 (the definition) and
the straightforward RawStatePolicy; states from the exporter's own parity sources (clip frames,
noisy copies with 10% arbitrary orientations, time steps past both clip ends).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bcg_deploy.export.graph import build_policy, build_reference_policy
from bcg_deploy.export.obs_graph import FastRawPolicy
from bcg_deploy.export.parity import clip_states, noisy_states, raw_inputs
from bcg_deploy.observations.paper import FRAME_ARRAYS, ObservationModule
from bcg_deploy.training.checkpoint import load_checkpoint
from bcg_deploy.training.networks import Actor
from bcg_deploy.training.normalizer import RunningNormalizer

NAMES = ("base_pos", "base_quat", "base_lin_vel", "base_ang_vel", "joint_pos", "joint_vel")


@pytest.fixture(scope="module")
def ckpt(ckpt_dir, robot):
    return load_checkpoint(ckpt_dir / "run_other_norm.pt", robot=robot)


@pytest.fixture(scope="module")
def inputs(ckpt):
    base = clip_states(ckpt["motion_arrays"])
    noisy = noisy_states(base, 600, np.random.default_rng(3))
    t = np.r_[base.t, noisy.t]
    t[:5] = [-7.0, -3.0, -2.5, -1.0, -0.5]  # before the clip (negative rows of the tables)
    t[5:8] = [len(base) - 1, len(base) + 0.7, len(base) + 50]  # past its end
    return raw_inputs(np.r_[base.q, noisy.q], np.r_[base.qd, noisy.qd], t)


def _pipeline64(ckpt, robot, x):
    """The training definition in float64: ObservationModule -> RunningNormalizer -> Actor.deterministic."""
    om = ObservationModule(robot, ckpt["motion_arrays"], dtype=torch.float64)
    q = torch.cat((x[0], x[1], x[4]), -1).double()
    qd = torch.cat((x[2], x[3], x[5]), -1).double()
    obs = om(q, qd, x[6])
    norm = RunningNormalizer.from_state_dict(ckpt["obs_normalizer"])
    actor = Actor.from_state_dict(ckpt["actor"]).double()
    return obs, actor.deterministic(norm(obs)), om


def test_observation_equals_training_module(ckpt, robot, inputs):
    module = build_policy(ckpt, robot, "raw")
    assert isinstance(module, FastRawPolicy)
    with torch.no_grad():
        want, _, _ = _pipeline64(ckpt, robot, inputs)
        got = module.obs.observation(dict(zip(NAMES, inputs[:6], strict=True)), inputs[6])
    assert got.shape == want.shape == (len(inputs[0]), 849)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-9, rtol=0)
    # the 201 reference z components, the reference xy components whose clamp cannot act and the two
    # root_rot / body_rot entries that are 0 by construction are folded into the first-layer bias
    obs = module.obs
    assert obs.z_canon_index.size == 201 and obs.lin_canon_index.size > 0
    visible = obs.canon_index[obs.canon_index >= 0]
    assert visible.size + obs.z_canon_index.size + obs.lin_canon_index.size == 849
    assert set(obs.zero_canon_index) <= set(visible)
    np.testing.assert_allclose(want.numpy()[:, obs.zero_canon_index], 0.0, atol=1e-12)
    # the xy entries folded as linear in (c, s): their normaliser clamp never acts on these states
    norm = RunningNormalizer.from_state_dict(ckpt["obs_normalizer"]).folded()
    lin = obs.lin_canon_index
    assert np.all(np.abs((want.numpy()[:, lin] - norm["mean"].numpy()[lin]) / norm["std"].numpy()[lin]) <= obs.clip)


def test_actions_equal_training_pipeline(ckpt, robot, inputs):
    module = build_policy(ckpt, robot, "raw")
    reference = build_reference_policy(ckpt, robot)
    with torch.no_grad():
        _, want, om = _pipeline64(ckpt, robot, inputs)
        fast32 = module(*inputs)
        folded = RunningNormalizer.from_state_dict(ckpt["obs_normalizer"]).folded()
        actor64 = Actor.from_state_dict(ckpt["actor"]).double()
        fast64 = FastRawPolicy(om, robot, folded, actor64, torch.float64).eval()(*(x.double() for x in inputs))
        ref32 = reference(*inputs)
    assert float((want.abs() > 0.05).float().mean()) > 0.5  # the actions are not all ~0
    # float64 throughout: the definition to float64 rounding
    np.testing.assert_allclose(fast64[0].numpy(), want.numpy(), atol=1e-9, rtol=0)
    # float32 observation and actor: their rounding only
    np.testing.assert_allclose(fast32[0].numpy(), want.numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(fast32[0].numpy(), ref32[0].numpy(), atol=2e-5, rtol=0)
    target = np.clip(robot.default_joint_pos + robot.action_scale * fast32[0].numpy(), *robot.joint_range.T)
    np.testing.assert_allclose(fast32[1].numpy(), target, atol=1e-6, rtol=0)
    # the reference frame outputs: the clip at the clamped current step, exactly
    idx = np.clip(inputs[6].numpy()[:, 0].astype(int), 0, om.num_frames - 1)
    for k, out in zip(FRAME_ARRAYS, fast32[2:], strict=True):
        np.testing.assert_array_equal(out.numpy(), ckpt["motion_arrays"][k].numpy()[idx].astype(np.float32))
