"""Quaternion helpers against MuJoCo's C implementations (mju_mulQuat, mju_rotVecQuat, mju_euler2Quat)."""

from __future__ import annotations

import mujoco
import numpy as np

from bcg_deploy.rotations import quat_numpy as Q


def _random_quats(n: int, seed: int = 0) -> np.ndarray:
    return Q.normalize(np.random.default_rng(seed).normal(size=(n, 4)))


def test_mul_and_rotate_match_mujoco():
    a, b = _random_quats(20, 1), _random_quats(20, 2)
    v = np.random.default_rng(3).normal(size=(20, 3))
    ours_mul, ours_rot = Q.mul(a, b), Q.rotate(a, v)
    for i in range(20):
        res = np.zeros(4)
        mujoco.mju_mulQuat(res, a[i], b[i])
        np.testing.assert_allclose(ours_mul[i], res, atol=1e-14)
        r3 = np.zeros(3)
        mujoco.mju_rotVecQuat(r3, v[i], a[i])
        np.testing.assert_allclose(ours_rot[i], r3, atol=1e-13)


def test_euler_zyx_matches_mujoco_intrinsic_zyx():
    rpy = np.random.default_rng(4).uniform(-1.5, 1.5, size=(10, 3))
    ours = Q.from_euler_zyx(rpy[:, 0], rpy[:, 1], rpy[:, 2])
    for i in range(10):
        res = np.zeros(4)
        mujoco.mju_euler2Quat(res, rpy[i, ::-1].copy(), "zyx")  # lowercase: intrinsic axes
        np.testing.assert_allclose(ours[i] * np.sign(ours[i] @ res), res, atol=1e-14)


def test_exp_log_roundtrip_and_small_angles():
    r = np.random.default_rng(5).normal(size=(50, 3))
    r *= (np.random.default_rng(6).uniform(0, 3.0, size=(50, 1))) / np.linalg.norm(r, axis=1, keepdims=True)
    np.testing.assert_allclose(Q.log(Q.exp(r)), r, atol=1e-12)
    tiny = np.array([[1e-10, -2e-10, 3e-10]])
    np.testing.assert_allclose(Q.log(Q.exp(tiny)), tiny, atol=1e-20)


def test_slerp_constant_rate_and_shortest_arc():
    axis = np.array([0.0, 0.6, 0.8])
    q0, q1 = Q.exp(0.2 * axis), Q.exp(1.4 * axis)
    s = np.linspace(0, 1, 7)
    out = Q.slerp(np.broadcast_to(q0, (7, 4)), np.broadcast_to(-q1, (7, 4)), s)  # sign flip: same rotation
    np.testing.assert_allclose(Q.log(out), (0.2 + 1.2 * s)[:, None] * axis, atol=1e-12)


def test_angular_velocity_of_constant_rotation_is_exact():
    w = np.array([0.3, -1.1, 2.0])
    t = np.arange(30) / 30.0
    q = Q.mul(Q.exp(t[:, None] * w), np.broadcast_to(Q.exp(np.array([0.1, 0.2, 0.3])), (30, 4)))
    q[5:] *= -1.0  # a sign flip in the track must not matter
    np.testing.assert_allclose(Q.angular_velocity_world(q, 1 / 30.0), np.broadcast_to(w, (30, 3)), atol=1e-10)
