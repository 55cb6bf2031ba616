"""Resampling 30 fps -> 50 Hz on an analytic motion written as a LAFAN1 CSV, and the FK oracle.

Tolerances are the textbook bounds for the method (h = 1/30 s): linear interpolation of a value is
within h^2/8 max|x''|; a central difference is within h^2/6 max|x'''| and its linear interpolation
adds h^2/8 max|x'''|. Orientation and angular velocity use fixed tolerances (2e-3 rad, 0.05 rad/s)
well below what a controller can notice; the measured errors are printed with ``-s``.
"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from bcg_deploy.motions import load_lafan1_csv
from bcg_deploy.motions.kinematics import forward_kinematics
from bcg_deploy.rotations import quat_numpy as Q
from tests.synthetic import write_csv

H = 1.0 / 30.0
START, DURATION = 1.0, 3.0
F_ROOT = np.array([0.7, 0.5, 1.5])  # Hz of the root x, y, z wiggles
A_ROOT = np.array([0.1, 0.1, 0.03])  # m
YAW, PITCH, ROLL = (0.6, 0.4), (0.2, 0.9), (0.15, 0.6)  # (amplitude rad, Hz)


def _joint_params(robot):
    rng = np.random.default_rng(3)
    lo, hi = robot.joint_range[:, 0], robot.joint_range[:, 1]
    mid = 0.5 * (lo + hi)
    amp = np.minimum(0.3, 0.4 * (hi - lo))
    freq = rng.uniform(0.3, 1.5, size=robot.num_joints)
    phase = rng.uniform(0, 2 * np.pi, size=robot.num_joints)
    return mid, amp, freq, phase


def analytic(robot, t: np.ndarray) -> dict:
    """Exact positions and derivatives of the test motion at times t (s)."""
    w = 2 * np.pi * F_ROOT
    root = np.stack([0.5 * t, np.zeros_like(t), 0.75 + 0 * t], 1) + A_ROOT * np.sin(w * t[:, None])
    root_vel = np.array([0.5, 0.0, 0.0]) + A_ROOT * w * np.cos(w * t[:, None])
    angles, rates = [], []
    for a, f in (YAW, PITCH, ROLL):
        angles.append(a * np.sin(2 * np.pi * f * t))
        rates.append(a * 2 * np.pi * f * np.cos(2 * np.pi * f * t))
    yaw, pitch, roll = angles
    quat = Q.from_euler_zyx(roll, pitch, yaw)
    ez = np.array([0.0, 0.0, 1.0])
    qz = Q.from_euler_zyx(0 * t, 0 * t, yaw)
    qzy = Q.from_euler_zyx(0 * t, pitch, yaw)
    ang = (
        rates[0][:, None] * ez
        + rates[1][:, None] * Q.rotate(qz, np.array([0.0, 1.0, 0.0]) + 0 * t[:, None])
        + rates[2][:, None] * Q.rotate(qzy, np.array([1.0, 0.0, 0.0]) + 0 * t[:, None])
    )
    mid, amp, freq, phase = _joint_params(robot)
    arg = 2 * np.pi * freq * t[:, None] + phase
    return {
        "root_pos": root,
        "root_lin_vel": root_vel,
        "root_quat": quat,
        "root_ang_vel": ang,
        "joint_pos": mid + amp * np.sin(arg),
        "joint_vel": amp * 2 * np.pi * freq * np.cos(arg),
        "bounds": {
            "root_pos": H**2 / 8 * A_ROOT * w**2,
            "root_lin_vel": H**2 * (1 / 6 + 1 / 8) * A_ROOT * w**3,
            "joint_pos": H**2 / 8 * amp * (2 * np.pi * freq) ** 2,
            "joint_vel": H**2 * (1 / 6 + 1 / 8) * amp * (2 * np.pi * freq) ** 3,
        },
    }


@pytest.fixture(scope="module")
def loaded(tmp_path_factory, robot):
    t_src = np.arange(0, 6.0 + 1e-9, H)
    ref = analytic(robot, t_src)
    rows = np.concatenate([ref["root_pos"], ref["root_quat"][:, [1, 2, 3, 0]], ref["joint_pos"]], axis=1)
    path = write_csv(tmp_path_factory.mktemp("analytic") / "analytic.csv", rows)
    motion = load_lafan1_csv(path, START, DURATION, robot)
    return motion, analytic(robot, START + np.arange(motion.num_frames) / 50.0)


def test_frames_and_rate(loaded):
    motion, _ = loaded
    assert motion.fps == 50.0
    assert motion.num_frames == int(DURATION * 50) + 1
    assert motion.duration == pytest.approx(DURATION)
    assert motion.source["start_s"] == START and motion.source["file_spikes_filtered"] == 0


@pytest.mark.parametrize("field", ["root_pos", "root_lin_vel", "joint_pos", "joint_vel"])
def test_linear_fields_within_method_bounds(loaded, field):
    motion, ref = loaded
    err = np.abs(getattr(motion, field) - ref[field]).max(axis=0)
    bound = ref["bounds"][field]
    print(f"{field}: max error {err.max():.2e} (bound {bound.max():.2e})")
    assert np.all(err <= bound + 1e-9), f"{field}: error {err} exceeds {bound}"


def test_orientation_slerp_and_angular_velocity(loaded):
    motion, ref = loaded
    ang_err = np.linalg.norm(Q.log(Q.mul(motion.root_quat, Q.conj(ref["root_quat"]))), axis=1).max()
    w_err = np.linalg.norm(motion.root_ang_vel - ref["root_ang_vel"], axis=1).max()
    print(f"orientation error {ang_err:.2e} rad, angular velocity error {w_err:.2e} rad/s")
    assert np.allclose(np.linalg.norm(motion.root_quat, axis=1), 1.0, atol=1e-12)
    assert ang_err < 2e-3
    assert w_err < 0.05


def test_body_states_match_mujoco_on_analytic_state(loaded, robot):
    """Body poses and velocities equal MuJoCo's FK of the analytic state (up to the resampling error)."""
    motion, ref = loaded
    m = robot.load_model(scene=False)
    qpos = np.concatenate([ref["root_pos"], ref["root_quat"], ref["joint_pos"]], axis=1)
    ang_local = Q.rotate(Q.conj(ref["root_quat"]), ref["root_ang_vel"])
    qvel = np.concatenate([ref["root_lin_vel"], ang_local, ref["joint_vel"]], axis=1)
    fk = forward_kinematics(m, qpos, qvel)
    pos_err = np.abs(motion.body_pos_w - fk.pos).max()
    vel_err = np.abs(motion.body_lin_vel_w - fk.lin_vel).max()
    angv_err = np.abs(motion.body_ang_vel_w - fk.ang_vel).max()
    print(f"body pos {pos_err:.2e} m, lin vel {vel_err:.2e} m/s, ang vel {angv_err:.2e} rad/s")
    assert pos_err < 5e-3 and vel_err < 0.1 and angv_err < 0.2
    np.testing.assert_allclose(motion.body_pos_w[:, 0], motion.root_pos, atol=1e-12)
    np.testing.assert_allclose(np.abs(np.sum(motion.body_quat_w[:, 0] * motion.root_quat, -1)), 1.0, atol=1e-12)


def test_body_velocities_equal_mj_object_velocity(loaded, robot):
    """The vectorised body velocities equal MuJoCo's mj_objectVelocity (mjOBJ_XBODY, world frame)."""
    motion, _ = loaded
    m = robot.load_model(scene=False)
    d = mujoco.MjData(m)
    res = np.zeros(6)
    for k in (0, motion.num_frames // 2, motion.num_frames - 1):
        d.qpos[:] = motion.qpos()[k]
        d.qvel[:] = motion.qvel()[k]
        mujoco.mj_forward(m, d)
        for b in range(1, m.nbody):
            mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_XBODY, b, res, 0)
            np.testing.assert_allclose(motion.body_ang_vel_w[k, b - 1], res[:3], atol=1e-10)
            np.testing.assert_allclose(motion.body_lin_vel_w[k, b - 1], res[3:], atol=1e-10)


def test_body_velocities_match_finite_differences_of_poses(loaded):
    motion, _ = loaded
    fd = np.gradient(motion.body_pos_w, motion.dt, axis=0)[2:-2]
    err = np.abs(fd - motion.body_lin_vel_w[2:-2]).max()
    print(f"body lin vel vs d/dt body_pos: {err:.2e} m/s")
    assert err < 0.1
