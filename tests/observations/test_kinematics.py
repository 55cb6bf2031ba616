"""Torch forward kinematics against MuJoCo C (mj_kinematics) on random states."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch

from bcg_deploy.observations.kinematics import Kinematics
from bcg_deploy.robots import load_robot
from bcg_deploy.rotations.quat_torch import heading_rot, mat_to_6d, quat_apply, quat_to_mat


@pytest.fixture(scope="module")
def robot():
    return load_robot("g1")


@pytest.fixture(scope="module")
def states(robot):
    """Random states (non-unit root quaternions, joints over their whole range) + MuJoCo's poses."""
    rng = np.random.default_rng(1)
    m = robot.load_model(scene=False)
    d = mujoco.MjData(m)
    n = 48
    q = np.zeros((n, m.nq))
    q[:, :3] = rng.normal(0, 2, (n, 3))
    q[:, 3:7] = rng.normal(size=(n, 4)) * rng.uniform(0.5, 2.0, (n, 1))
    lo, hi = robot.joint_range.T
    q[:, 7:] = rng.uniform(lo - 0.5, hi + 0.5, (n, robot.num_joints))
    out = {"q": q, "pos": [], "quat": [], "mat": [], "key": []}
    for qi in q:
        d.qpos[:] = qi
        mujoco.mj_kinematics(m, d)
        out["pos"].append(d.xpos[1:].copy())
        out["quat"].append(d.xquat[1:].copy())
        out["mat"].append(d.xmat[1:].reshape(-1, 3, 3).copy())
        key = []
        for k in robot.key_bodies:
            b = m.body(k.body).id
            key.append(d.xpos[b] + d.xmat[b].reshape(3, 3) @ np.asarray(k.offset))
        out["key"].append(key)
    return {k: np.asarray(v) for k, v in out.items()}


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_matches_mujoco(robot, states, dtype, tol):
    fk = Kinematics(robot, dtype)
    poses = fk(torch.as_tensor(states["q"], dtype=dtype), with_quat=True)
    assert poses.pos.dtype == dtype and poses.pos.shape == (len(states["q"]), 30, 3)
    # float32 positions: the random root is up to ~6 m from the origin, so compare relative to it.
    scale = 1.0 if dtype == torch.float64 else max(1.0, np.abs(states["q"][:, :3]).max())
    np.testing.assert_allclose(poses.pos.numpy(), states["pos"], atol=tol * scale, rtol=0)
    np.testing.assert_allclose(poses.mat.numpy(), states["mat"], atol=tol, rtol=0)
    np.testing.assert_allclose(poses.quat.numpy(), states["quat"], atol=tol, rtol=0)
    key = fk.key_points(poses.pos, poses.mat)
    np.testing.assert_allclose(key.numpy(), states["key"], atol=tol * scale, rtol=0)


def test_body_order_is_robot_spec_order(robot, states):
    fk = Kinematics(robot, torch.float64)
    assert fk.num_bodies == len(robot.body_names) == 30
    assert fk.key_point_names == tuple(k.name for k in robot.key_bodies)


def test_gradient_matches_finite_differences(robot, states):
    fk = Kinematics(robot, torch.float64)
    q = torch.as_tensor(states["q"][:2], dtype=torch.float64).requires_grad_(True)

    def f(x):
        p = fk(x, with_quat=True)
        return p.pos, p.mat, p.quat, fk.key_points(p.pos, p.mat)

    assert torch.autograd.gradcheck(f, (q,), eps=1e-6, atol=1e-6, fast_mode=True)


def test_helpers():
    rng = np.random.default_rng(0)
    q = torch.as_tensor(rng.normal(size=(20, 4)))
    q = q / q.norm(dim=-1, keepdim=True)
    v = torch.as_tensor(rng.normal(size=(20, 3)))
    r = quat_to_mat(q)
    torch.testing.assert_close(quat_apply(q, v), (r @ v[..., None])[..., 0])
    six = mat_to_6d(r)
    torch.testing.assert_close(six[:, :3], r[:, :, 0])
    torch.testing.assert_close(six[:, 3:], r[:, :, 1])
    h = heading_rot(r)
    yaw = np.arctan2(r[:, 1, 0].numpy(), r[:, 0, 0].numpy())
    np.testing.assert_allclose(h[:, 0, 0].numpy(), np.cos(yaw), atol=1e-8)
    np.testing.assert_allclose(h[:, 1, 0].numpy(), np.sin(yaw), atol=1e-8)
    # H^T R has its x axis in the world x-z plane (no yaw left).
    np.testing.assert_allclose((h.transpose(-1, -2) @ r)[:, 1, 0].numpy(), 0, atol=1e-8)
