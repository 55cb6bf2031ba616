"""ObservationModule against an independent numpy + MuJoCo implementation of METHOD.md section 6."""

from __future__ import annotations

import json

import mujoco
import numpy as np
import pytest
import torch

from bcg_deploy.observations.paper import ObservationModule, make_obs_terms, raw_input_noise
from bcg_deploy.robots import load_robot
from tests.synthetic import synthetic_motion


@pytest.fixture(scope="module")
def robot():
    return load_robot("g1")


@pytest.fixture(scope="module")
def motion(robot):
    return synthetic_motion(robot, seconds=1.0)


@pytest.fixture(scope="module")
def batch(robot, motion):
    """Reference states at random frames plus noise (q, qd, t)."""
    rng = np.random.default_rng(3)
    n = 12
    t = rng.integers(0, motion.num_frames, n)
    t[0], t[1] = motion.num_frames - 1, motion.num_frames - 2  # clamping at the end
    q = np.concatenate([motion.root_pos[t], motion.root_quat[t], motion.joint_pos[t]], 1)
    q[:, :3] += rng.normal(0, 0.1, (n, 3))
    quat = q[:, 3:7] + rng.normal(0, 0.3, (n, 4))
    q[:, 3:7] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
    q[:, 7:] += rng.normal(0, 0.2, (n, robot.num_joints))
    qd = rng.normal(0, 1.0, (n, 35))
    return q, qd, t


def _yaw_frame(r):
    yaw = np.arctan2(r[1, 0], r[0, 0])
    c, s = np.cos(yaw), np.sin(yaw)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])


def _six(r):
    return np.concatenate([r[:, 0], r[:, 1]])


def _oracle(robot, motion, q, qd, t):
    """The observation written out term by term with MuJoCo kinematics (numpy, float64)."""
    m = robot.load_model(scene=False)
    d = mujoco.MjData(m)
    d.qpos[:] = q
    mujoco.mj_kinematics(m, d)
    xmat = d.xmat[1:].reshape(-1, 3, 3)
    h = _yaw_frame(xmat[0])
    root = q[:3]

    def keys(pos, mats):
        out = []
        for k in robot.key_bodies:
            b = robot.body_names.index(k.body)
            out.append(pos[b] + mats[b] @ np.asarray(k.offset))
        return np.array(out)

    key = keys(d.xpos[1:], xmat)
    parts = [
        [q[2]],
        _six(h.T @ xmat[0]),
        h.T @ qd[:3],
        h.T @ xmat[0] @ qd[3:6],
        np.concatenate([_six(h.T @ r) for r in xmat]),
        qd[6:],
        (h.T @ (key - root).T).T.ravel(),
    ]
    frames = [min(t + k, motion.num_frames - 1) for k in (1, 2, 3)]
    ref_pos, ref_root, ref_body, ref_key = [], [], [], []
    for f in frames:
        mats = np.zeros((30, 9))
        for b in range(30):
            mujoco.mju_quat2Mat(mats[b], motion.body_quat_w[f, b])
        mats = mats.reshape(30, 3, 3)
        ref_pos.append(h.T @ (motion.root_pos[f] - root))
        ref_root.append(_six(h.T @ mats[0]))
        ref_body.append(np.concatenate([_six(h.T @ r) for r in mats]))
        rk = keys(motion.body_pos_w[f], mats)
        ref_key.append((h.T @ (rk - motion.root_pos[f]).T).T.ravel())
    parts += [np.concatenate(x) for x in (ref_pos, ref_root, ref_body, ref_key)]
    return np.concatenate(parts)


def test_layout(robot, motion):
    om = ObservationModule(robot, motion)
    spec = om.spec()
    json.dumps(spec)
    assert om.obs_dim == 849 == sum(t["size"] for t in spec)
    assert [t["name"] for t in spec][:7] == [
        "root_height", "root_rot", "root_lin_vel", "root_ang_vel", "body_rot", "joint_vel", "key_pos",
    ]  # fmt: skip
    assert [t["size"] for t in spec] == [1, 6, 3, 3, 180, 29, 15, 9, 18, 540, 45]
    assert all(spec[i + 1]["offset"] == spec[i]["offset"] + spec[i]["size"] for i in range(len(spec) - 1))
    noise = {t["name"]: t["noise"] for t in spec}
    assert noise["root_rot"] == 0.05 and noise["root_lin_vel"] == 0.5 and noise["root_ang_vel"] == 0.2
    assert noise["body_rot"] == 0.01 and noise["joint_vel"] == 0.5 and noise["key_pos"] == 0.01
    assert noise["ref_root_pos"] == 0.25


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 2e-5)])
def test_matches_oracle(robot, motion, batch, dtype, tol):
    q, qd, t = batch
    om = ObservationModule(robot, motion, dtype=dtype)
    obs = om(torch.as_tensor(q, dtype=dtype), torch.as_tensor(qd, dtype=dtype), torch.as_tensor(t))
    assert obs.dtype == dtype and obs.shape == (len(q), 849)
    want = np.stack([_oracle(robot, motion, q[i], qd[i], int(t[i])) for i in range(len(q))])
    np.testing.assert_allclose(obs.numpy(), want, atol=tol, rtol=0)


def test_time_step_forms_and_clamping(robot, motion, batch):
    q, qd, _ = batch
    om = ObservationModule(robot, motion, dtype=torch.float64)
    qt, qdt = torch.as_tensor(q), torch.as_tensor(qd)
    last = motion.num_frames - 1
    a = om(qt, qdt, torch.full((len(q), 1), float(last) + 0.7, dtype=torch.float64))
    b = om(qt, qdt, torch.full((len(q),), last + 50))
    c = om(qt, qdt, torch.full((len(q),), last - 1))
    torch.testing.assert_close(a, b)
    sl = om.term_slices()["ref_body_rot"]
    # at t = T-2 the frames are T-1, T-1, T-1 (clamped): equal to the frames at the end
    torch.testing.assert_close(c[:, sl], a[:, sl])
    d = om(qt, qdt, torch.full((len(q),), last - 3))
    assert not torch.allclose(d[:, sl], a[:, sl])
    ref = om.reference_frame(torch.full((len(q), 1), last + 5))
    np.testing.assert_allclose(ref["body_quat_w"][0].numpy(), motion.body_quat_w[last])
    assert set(ref) == {"joint_pos", "joint_vel", "body_pos_w", "body_quat_w", "body_lin_vel_w", "body_ang_vel_w"}


def test_yaw_and_translation_invariance(robot, motion, batch):
    """Rotating the world about z and shifting it (robot and clip together) leaves obs unchanged."""
    q, qd, t = batch
    yaw, shift = 1.1, np.array([3.0, -2.0, 0.0])
    c, s = np.cos(yaw), np.sin(yaw)
    rz = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
    qz = np.array([np.cos(yaw / 2), 0, 0, np.sin(yaw / 2)])

    def qmul(a, b):
        out = np.zeros(4)
        mujoco.mju_mulQuat(out, a, b)
        return out

    q2, qd2 = q.copy(), qd.copy()
    q2[:, :3] = q[:, :3] @ rz.T + shift
    q2[:, 3:7] = [qmul(qz, x) for x in q[:, 3:7]]
    qd2[:, :3] = qd[:, :3] @ rz.T
    arrays = {
        "root_pos": motion.root_pos @ rz.T + shift,
        "root_quat": np.array([qmul(qz, x) for x in motion.root_quat]),
        "body_pos_w": motion.body_pos_w @ rz.T + shift,
        "body_quat_w": np.array([[qmul(qz, x) for x in fr] for fr in motion.body_quat_w]),
    }
    a = ObservationModule(robot, motion, dtype=torch.float64)(
        torch.as_tensor(q), torch.as_tensor(qd), torch.as_tensor(t)
    )
    b = ObservationModule(robot, arrays, dtype=torch.float64)(
        torch.as_tensor(q2), torch.as_tensor(qd2), torch.as_tensor(t)
    )
    torch.testing.assert_close(a, b, atol=1e-10, rtol=0)


def test_gradient(robot, motion, batch):
    q, qd, t = batch
    om = ObservationModule(robot, motion, dtype=torch.float64)
    x = torch.as_tensor(q[2:4]).requires_grad_(True)
    v = torch.as_tensor(qd[2:4]).requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda a, b: om(a, b, torch.as_tensor(t[2:4])), (x, v), eps=1e-6, atol=1e-6, fast_mode=True
    )


def test_noise(robot, motion, batch):
    q, qd, t = batch
    om = ObservationModule(robot, motion, dtype=torch.float64)
    obs = om(torch.as_tensor(q), torch.as_tensor(qd), torch.as_tensor(t)).expand(400, -1, -1).reshape(-1, 849)
    noisy = om.add_noise(obs, torch.Generator().manual_seed(0))
    dev = (noisy - obs).abs()
    for term, sl in om.term_slices().items():
        n = next(x.noise for x in om.terms if x.name == term)
        assert float(dev[:, sl].max()) <= n + 1e-12
        if n > 0:
            assert float(dev[:, sl].max()) > 0.9 * n  # uniform over the whole interval
        else:
            assert float(dev[:, sl].max()) == 0.0


def test_raw_input_noise(robot, motion):
    om = ObservationModule(robot, motion)
    raw = raw_input_noise(om.spec())
    assert raw == raw_input_noise(make_obs_terms())
    assert raw == {
        "base_pos": [0.25, 0.25, 0.01],
        "base_quat": 0.05,
        "base_lin_vel": 0.5,
        "base_ang_vel": 0.2,
        "joint_pos": 0.01,
        "joint_vel": 0.5,
    }


def test_missing_arrays_rejected(robot, motion):
    with pytest.raises(ValueError, match="body_quat_w"):
        ObservationModule(robot, {"root_pos": motion.root_pos, "root_quat": motion.root_quat,
                                  "body_pos_w": motion.body_pos_w})  # fmt: skip
