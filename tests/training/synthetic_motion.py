"""TEST HELPER (not a test, not real data): a small synthetic Motion built with MuJoCo FK.

The robot's home pose with small sinusoidal joint motion and a slow forward drift and yaw, sampled
at 50 Hz; every array is filled by MuJoCo (mj_kinematics + mj_objectVelocity). Used by the training
and export tests until/unless a real clip is available; never used by the product.
"""

from __future__ import annotations

import mujoco
import numpy as np

from bcg_deploy.motions.motion import Motion
from bcg_deploy.robots import RobotSpec


def _yaw_quat(yaw: np.ndarray) -> np.ndarray:
    return np.stack([np.cos(yaw / 2), 0 * yaw, 0 * yaw, np.sin(yaw / 2)], axis=-1)


def synthetic_motion(robot: RobotSpec, seconds: float = 2.0, fps: float = 50.0, seed: int = 0) -> Motion:
    """Home pose + sinusoids (amplitude 0.2 rad, 0.5-1.5 Hz); velocities analytic, bodies from MuJoCo."""
    rng = np.random.default_rng(seed)
    m = robot.load_model(scene=False)
    d = mujoco.MjData(m)
    t = np.arange(int(round(seconds * fps)) + 1) / fps
    nj = robot.num_joints
    amp = 0.2 * np.ones(nj)
    freq = rng.uniform(0.5, 1.5, nj)
    phase = rng.uniform(0, 2 * np.pi, nj)
    lo, hi = robot.joint_range.T
    joint_pos = np.clip(robot.default_joint_pos + amp * np.sin(2 * np.pi * freq * t[:, None] + phase), lo, hi)
    joint_vel = np.gradient(joint_pos, 1.0 / fps, axis=0)
    root_pos = robot.default_root_pos + np.stack([0.3 * t, 0.02 * np.sin(2 * np.pi * t), 0.01 * np.sin(4 * t)], -1)
    yaw = 0.4 * np.sin(t)
    root_quat = _yaw_quat(yaw)
    root_lin_vel = np.gradient(root_pos, 1.0 / fps, axis=0)
    root_ang_vel = np.stack([0 * t, 0 * t, 0.4 * np.cos(t)], -1)
    nb = m.nbody - 1
    body = {k: np.zeros((len(t), nb, n)) for k, n in (("pos", 3), ("quat", 4), ("lin", 3), ("ang", 3))}
    vel = np.zeros(6)
    for i in range(len(t)):
        d.qpos[:] = np.concatenate([root_pos[i], root_quat[i], joint_pos[i]])
        # MuJoCo free joint: linear velocity world, angular velocity body frame.
        rot = np.zeros(9)
        mujoco.mju_quat2Mat(rot, root_quat[i])
        d.qvel[:] = np.concatenate([root_lin_vel[i], rot.reshape(3, 3).T @ root_ang_vel[i], joint_vel[i]])
        mujoco.mj_forward(m, d)
        body["pos"][i] = d.xpos[1:]
        body["quat"][i] = d.xquat[1:]
        for b in range(1, m.nbody):
            mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_BODY, b, vel, 0)  # world frame, [ang, lin]
            body["ang"][i, b - 1] = vel[:3]
            body["lin"][i, b - 1] = vel[3:]
    return Motion(
        name="synthetic",
        source={"kind": "builtin", "file": "tests/training/synthetic_motion.py", "seed": seed, "duration_s": seconds},
        fps=fps,
        root_pos=root_pos,
        root_quat=root_quat,
        joint_pos=joint_pos,
        joint_vel=joint_vel,
        root_lin_vel=root_lin_vel,
        root_ang_vel=root_ang_vel,
        body_pos_w=body["pos"],
        body_quat_w=body["quat"],
        body_lin_vel_w=body["lin"],
        body_ang_vel_w=body["ang"],
    )
