"""The numpy and torch rotation modules agree with each other and with MuJoCo, and the helpers that moved into
them (from the observation, parity, sim2sim and profile modules) do what their callers relied on."""

from __future__ import annotations

import mujoco
import numpy as np
import torch

from bcg_deploy.rotations import quat_numpy as Q
from bcg_deploy.rotations import quat_torch as T


def _quats(n: int, seed: int = 0) -> np.ndarray:
    return Q.normalize(np.random.default_rng(seed).normal(size=(n, 4)))


def test_torch_and_numpy_give_the_same_rotations():
    a, b = _quats(16, 1), _quats(16, 2)
    v = np.random.default_rng(3).normal(size=(16, 3))
    ta, tb, tv = (torch.as_tensor(x) for x in (a, b, v))
    np.testing.assert_allclose(T.quat_mul(ta, tb).numpy(), Q.mul(a, b), atol=1e-15)
    np.testing.assert_allclose(T.quat_conj(ta).numpy(), Q.conj(a), atol=0)
    np.testing.assert_allclose(T.quat_to_mat(ta).numpy(), Q.to_matrix(a), atol=1e-15)
    np.testing.assert_allclose(T.quat_apply(ta, tv).numpy(), Q.rotate(a, v), atol=1e-14)
    axis = v / np.linalg.norm(v, axis=1, keepdims=True)
    angle = np.linspace(-3.0, 3.0, 16)
    np.testing.assert_allclose(
        T.axis_angle_quat(torch.as_tensor(axis), torch.as_tensor(angle)).numpy(),
        Q.exp(axis * angle[:, None]),
        atol=1e-15,
    )


def test_to_matrix_mujoco_is_mujocos_xmat_to_the_bit():
    q = np.random.default_rng(5).normal(size=(3, 2, 4))  # not unit: normalize=True divides by the norm first
    m = Q.to_matrix_mujoco(q, normalize=True)
    assert m.shape == (3, 2, 3, 3)
    for idx in np.ndindex(3, 2):
        want = np.zeros(9)
        mujoco.mju_quat2Mat(want, q[idx] / np.linalg.norm(q[idx]))
        assert np.array_equal(m[idx].ravel(), want)
    np.testing.assert_allclose(m, Q.to_matrix(Q.normalize(q)), atol=1e-15)


def test_inverse_rotation_axis_rotation_and_nlerp():
    q, v = _quats(8, 6), np.random.default_rng(7).normal(size=(8, 3))
    np.testing.assert_allclose(Q.rotate(q, Q.rotate_inverse(q, v)), v, atol=1e-14)
    for axis in range(3):
        r = np.zeros(3)
        r[axis] = 0.7
        np.testing.assert_allclose(Q.axis_rotation(axis, 0.7), Q.to_matrix(Q.exp(r)), atol=1e-15)
    q0, q1 = _quats(8, 8), _quats(8, 9)
    np.testing.assert_allclose(Q.nlerp(q0, q1, np.zeros((8, 1))), q0, atol=1e-15)
    ends = Q.nlerp(q0, q1, np.ones((8, 1)))
    np.testing.assert_allclose(np.abs(np.sum(ends * q1, axis=1)), 1.0, atol=1e-15)  # q1 or -q1: the short arc


def test_6d_encodings_and_heading():
    r = T.quat_to_mat(torch.as_tensor(_quats(10, 10)))
    six, rows, tn = T.mat_to_6d(r), T.mat_to_6d_rows(r), T.tangent_normal(r)
    torch.testing.assert_close(six, torch.cat((r[..., 0], r[..., 1]), dim=-1))
    torch.testing.assert_close(rows, r[..., :2].reshape(10, 6))
    torch.testing.assert_close(tn, torch.cat((r[..., 0], r[..., 2]), dim=-1))
    h = T.heading_rot(r)  # yaw only, and the heading's x axis along the frame's x axis in the xy plane
    torch.testing.assert_close(h[:, 2], torch.tensor([0.0, 0.0, 1.0], dtype=h.dtype).expand(10, 3))
    torch.testing.assert_close((h.transpose(-1, -2) @ r)[:, 1, 0], torch.zeros(10, dtype=h.dtype))
