"""Helpers shared by the diffsim tests: cached simulators (compile once) and random states."""

from __future__ import annotations

from functools import cache

import mujoco
import numpy as np
import torch

from bcg_deploy.diffsim import SimConfig, Simulator
from bcg_deploy.robots import load_robot


@cache
def get_sim(dtype: str = "float64", num_envs: int = 20, **kw) -> Simulator:
    """One Simulator per configuration for the whole test session (kernels compile once per dtype).

    The rigid-body tests check the smooth dynamics: contact is off and PD damping explicit (METHOD.md's
    formula) unless a test asks otherwise."""
    kw = {"contact": False, "pd_damping": "explicit", **kw}
    return Simulator(load_robot("g1"), SimConfig(num_envs=num_envs, dtype=dtype, **kw))


def mj_model(gravity: bool = True, actuation: bool = True) -> mujoco.MjModel:
    """The robot MJCF in MuJoCo without contacts/constraints (the oracle for the smooth dynamics)."""
    m = load_robot("g1").load_model(scene=False)
    m.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONSTRAINT | mujoco.mjtDisableBit.mjDSBL_CONTACT
    if not actuation:
        m.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_ACTUATION
    if not gravity:
        m.opt.gravity[:] = 0.0
    return m


def random_states(n: int, seed: int, pos_range: float = 10.0, lin_vel: float = 1.0, ang_vel: float = 2.0):
    """q [n, 36], qd [n, 35] (numpy float64): base anywhere within +-pos_range m with a random orientation,
    joints uniform within their limits, base linear velocity up to lin_vel m/s, angular and joint rates
    up to ang_vel rad/s."""
    rng = np.random.default_rng(seed)
    robot = load_robot("g1")
    q = np.zeros((n, 36))
    q[:, :3] = rng.uniform(-pos_range, pos_range, (n, 3))
    quat = rng.normal(size=(n, 4))
    q[:, 3:7] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
    q[:, 7:] = rng.uniform(robot.joint_range[:, 0], robot.joint_range[:, 1], (n, 29))
    qd = np.concatenate([rng.uniform(-lin_vel, lin_vel, (n, 3)), rng.uniform(-ang_vel, ang_vel, (n, 32))], axis=1)
    return q, qd


def random_targets(q: np.ndarray, seed: int, scale: float = 0.5) -> np.ndarray:
    """PD targets near the joint positions (scale rad): with kp ~ 14-99 N m/rad some joints saturate."""
    rng = np.random.default_rng(seed)
    return q[:, 7:] + rng.normal(scale=scale, size=(q.shape[0], 29))


def t64(x) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x), dtype=torch.float64)


def moreau_oracle(m: mujoco.MjModel, q, qd, q_target, dt: float, substeps: int, implicit_damping: bool = False):
    """One control step of METHOD.md's Moreau midpoint scheme built on MuJoCo C (float64, one env):
    q_mid by mj_integratePos, M and forces (qfrc_bias, position actuators = clamped PD) by mj_forward at
    (q_mid, qd), qd+ = qd + dt M^-1 h, q+ by mj_integratePos with the averaged velocity."""
    robot = load_robot("g1")
    d = mujoco.MjData(m)
    q, qd = np.array(q, dtype=float), np.array(qd, dtype=float)
    for _ in range(substeps):
        q_mid = q.copy()
        mujoco.mj_integratePos(m, q_mid, qd, dt / 2)
        d.qpos[:], d.qvel[:], d.ctrl[:] = q_mid, qd, q_target
        mujoco.mj_forward(m, d)
        M = np.zeros((m.nv, m.nv))
        mujoco.mj_fullM(m, d, M)
        h = d.qfrc_actuator - d.qfrc_bias
        if implicit_damping:
            raw = robot.kp * (q_target - q_mid[7:]) - robot.kd * qd[6:]
            M[6:, 6:] += np.diag(dt * np.where(np.abs(raw) < robot.effort_limit, robot.kd, 0.0))
        qd_new = qd + np.linalg.solve(M, dt * h)
        q_new = q.copy()
        mujoco.mj_integratePos(m, q_new, 0.5 * (qd + qd_new), dt)
        q, qd = q_new, qd_new
    return q, qd
