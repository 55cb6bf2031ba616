"""The reference clip a sim2sim run tracks, at the control rate (a ``Motion`` whose root is its pelvis body,
``Motion.from_bodies``), and the state maths around it.

World frame, z up, metres, radians, quaternions w x y z. Body arrays are in ``RobotSpec.body_names``
order (MuJoCo body id - 1; index 0 is the pelvis). MuJoCo state layout: qpos [36] = base position,
base quaternion, 29 joints; qvel [35] = base linear velocity (world), base angular velocity (base
frame), 29 joint rates.
"""

from __future__ import annotations

import mujoco
import numpy as np

from bcg_deploy.motions.motion import Motion
from bcg_deploy.rotations import quat_numpy as Q


def reference_from_motion(motion: Motion) -> Motion:
    """The clip of a ``Motion`` as sim2sim tracks it: float64, the root taken from its pelvis body (body 0)."""
    f = lambda a: np.asarray(a, dtype=np.float64)  # noqa: E731
    return Motion.from_bodies(
        fps=float(motion.fps),
        joint_pos=f(motion.joint_pos),
        joint_vel=f(motion.joint_vel),
        body_pos_w=f(motion.body_pos_w),
        body_quat_w=f(motion.body_quat_w),
        body_lin_vel_w=f(motion.body_lin_vel_w),
        body_ang_vel_w=f(motion.body_ang_vel_w),
        name=motion.name,
        source=motion.source,
    )


def reference_text(ref: Motion) -> str:
    """What the reports call the clip: the clip baked into a policy file, a motion file, a named motion."""
    kind, file = ref.source.get("kind"), ref.source.get("file")
    if kind == "policy":
        return f"the clip in {file}"
    if kind == "motion_file":
        return f"motion file {file}"
    return "states" if kind == "states" else f"motion {ref.name}"


def reference_from_states(model: mujoco.MjModel, qpos: np.ndarray, qvel: np.ndarray, fps: float) -> Motion:
    """The clip of MuJoCo states [T, nq], [T, nv] by forward kinematics on ``model``."""
    d = mujoco.MjData(model)
    t, nb = qpos.shape[0], model.nbody - 1
    pos, quat = np.zeros((t, nb, 3)), np.zeros((t, nb, 4))
    lin, ang = np.zeros((t, nb, 3)), np.zeros((t, nb, 3))
    vel = np.zeros(6)
    for i in range(t):
        d.qpos[:], d.qvel[:] = qpos[i], qvel[i]
        mujoco.mj_forward(model, d)
        pos[i], quat[i] = d.xpos[1:], d.xquat[1:]
        for b in range(1, model.nbody):
            mujoco.mj_objectVelocity(model, d, mujoco.mjtObj.mjOBJ_XBODY, b, vel, 0)
            ang[i, b - 1], lin[i, b - 1] = vel[:3], vel[3:]
    return Motion.from_bodies(
        fps, qpos[:, 7:].copy(), qvel[:, 6:].copy(), pos, quat, lin, ang, "states", {"kind": "states"}
    )


def root_state(ref: Motion, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Base qpos [7] and qvel [6] (MuJoCo convention) of reference frame ``k``."""
    qpos = np.concatenate([ref.root_pos[k], ref.root_quat[k] / np.linalg.norm(ref.root_quat[k])])
    qvel = np.concatenate([ref.root_lin_vel[k], Q.rotate_inverse(qpos[3:], ref.root_ang_vel[k])])
    return qpos, qvel


def initial_state(ref: Motion, nq: int, nv: int) -> tuple[np.ndarray, np.ndarray]:
    """MuJoCo qpos, qvel of reference frame 0 (reference state initialisation, as in training)."""
    qpos, qvel = np.zeros(nq), np.zeros(nv)
    qpos[:7], qvel[:6] = root_state(ref, 0)
    qpos[7:], qvel[6:] = ref.joint_pos[0], ref.joint_vel[0]
    return qpos, qvel


def base_track(ref: Motion, num_steps: int, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """Base qpos [N + 1, 7] and qvel [N + 1, 6] of the reference at physics steps 0..N of ``dt`` s,
    interpolated between frames (linear; quaternion nlerp). Used to pin the base."""
    t = np.arange(num_steps + 1) * dt * ref.fps
    k0 = np.minimum(np.floor(t + 1e-9).astype(int), ref.num_frames - 1)
    k1 = np.minimum(k0 + 1, ref.num_frames - 1)
    a = np.clip(t - k0, 0.0, 1.0)[:, None]
    pos = (1 - a) * ref.root_pos[k0] + a * ref.root_pos[k1]
    quat = Q.nlerp(ref.root_quat[k0], ref.root_quat[k1], a)
    lin = (1 - a) * ref.root_lin_vel[k0] + a * ref.root_lin_vel[k1]
    ang_w = (1 - a) * ref.root_ang_vel[k0] + a * ref.root_ang_vel[k1]
    return np.concatenate([pos, quat], axis=1), np.concatenate([lin, Q.rotate_inverse(quat, ang_w)], axis=1)
