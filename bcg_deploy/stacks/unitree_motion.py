"""unitree_rl_mjlab's motion NPZ from a LAFAN1-retargeted G1 CSV, by the logic of its own converter.

unitree_rl_mjlab 5b7e396 ``scripts/csv_to_npz.py`` (``MotionLoader`` lines 23-165, ``run_sim`` 168-290):
float32 throughout; rows root x y z, quaternion x y z w (reordered to w x y z), 29 joints; times
``arange(0, (N - 1) / input_fps, 1 / output_fps)``; ``phase = t / duration``, ``index_0 = floor(phase (N - 1))``,
``blend = phase (N - 1) - index_0``; positions and joints lerped, the root quaternion slerped (mjlab's
``quat_slerp``: shortest arc, returns an end point for blend 0 or 1); velocities by ``torch.gradient`` (central
differences, one-sided at the ends) and the root angular velocity from ``q[i+1] q[i-1]^-1`` over 2 dt (first and
last repeated); body poses and velocities of every body by forward kinematics (there mjlab's simulator, here
MuJoCo on the given G1 model; the deploy reads only body 0, the pelvis, which is the CSV's root).
"""

from __future__ import annotations

import math
from pathlib import Path

import mujoco
import numpy as np

from bcg_deploy.errors import BcgdError
from bcg_deploy.rotations import quat_numpy as quat


def _slerp(a: np.ndarray, b: np.ndarray, tau: float) -> np.ndarray:
    """mjlab ``utils/lab_api/math.py:1698-1730`` ``quat_slerp`` (w x y z, float32)."""
    f32 = np.float32
    eps4 = np.finfo(f32).eps * 4.0
    if tau == 0.0:
        return a
    if tau == 1.0:
        return b
    d = f32(np.dot(a, b))
    if abs(abs(d) - 1.0) < eps4:
        return a
    if d < 0.0:
        d, b = -d, -b
    angle = f32(np.arccos(np.clip(d, -1, 1)))
    if abs(angle) < eps4:
        return a
    isin = f32(1.0) / f32(np.sin(angle))
    return (a * f32(np.sin(f32((1.0 - tau) * angle))) * isin + b * f32(np.sin(f32(tau * angle))) * isin).astype(f32)


def resample_csv(path: Path, input_fps: float = 30.0, output_fps: float = 50.0) -> dict[str, np.ndarray]:
    """Root position [T, 3], quaternion [T, 4] w x y z, joints [T, 29] and their velocities at ``output_fps``."""
    try:
        raw = np.loadtxt(path, delimiter=",", dtype=np.float64).astype(np.float32)
    except (OSError, ValueError) as exc:
        raise BcgdError(f"{path}: not a numeric CSV ({str(exc).splitlines()[0][:100]})") from None
    if raw.ndim != 2 or raw.shape[1] != 36 or raw.shape[0] < 3:
        raise BcgdError(f"{path}: expected rows of 36 values (root xyz, quaternion xyzw, 29 joints), 3 rows or more")
    pos, rot, dof = raw[:, :3], raw[:, [6, 3, 4, 5]], raw[:, 7:]
    n = raw.shape[0]
    duration = (n - 1) * (1.0 / input_fps)
    out_dt = 1.0 / output_fps
    times = (np.arange(math.ceil(duration / out_dt)) * out_dt).astype(np.float32)  # torch.arange(..., float32)
    phase = (times / np.float32(duration)).astype(np.float32)
    x = (phase * np.float32(n - 1)).astype(np.float32)
    i0 = np.floor(x).astype(int)
    i1 = np.minimum(i0 + 1, n - 1)
    blend = (x - i0).astype(np.float32)
    lerp = lambda v: v[i0] * (1 - blend[:, None]) + v[i1] * blend[:, None]  # noqa: E731
    root_pos, joints = lerp(pos).astype(np.float32), lerp(dof).astype(np.float32)
    root_quat = np.stack([_slerp(rot[a], rot[b], float(t)) for a, b, t in zip(i0, i1, blend, strict=True)])
    lin = np.gradient(root_pos, out_dt, axis=0).astype(np.float32)
    jv = np.gradient(joints, out_dt, axis=0).astype(np.float32)
    rel = quat.mul(root_quat[2:].astype(np.float64), quat.conj(root_quat[:-2].astype(np.float64)))
    omega = (_axis_angle(rel) / (2.0 * out_dt)).astype(np.float32)
    ang = np.concatenate([omega[:1], omega, omega[-1:]])
    return {"root_pos": root_pos, "root_quat": root_quat, "joint_pos": joints, "joint_vel": jv, "root_lin_vel": lin,
            "root_ang_vel": ang}  # fmt: skip


def _axis_angle(q: np.ndarray) -> np.ndarray:
    """mjlab ``axis_angle_from_quat`` (w x y z): the rotation vector, w made non-negative first."""
    q = q * (1.0 - 2.0 * (q[..., :1] < 0.0))
    mag = np.linalg.norm(q[..., 1:], axis=-1)
    half = np.arctan2(mag, q[..., 0])
    angle = 2.0 * half
    k = np.where(np.abs(angle) > 1e-6, np.sin(half) / np.where(angle == 0, 1.0, angle), 0.5 - angle * angle / 48)
    return q[..., 1:] / k[..., None]


def npz_arrays(path: Path, model: mujoco.MjModel, joint_names: tuple[str, ...], input_fps: float = 30.0,
               output_fps: float = 50.0) -> dict[str, np.ndarray]:  # fmt: skip
    """The NPZ arrays ``csv_to_npz.py`` saves (``fps``, ``joint_pos``, ``joint_vel``, ``body_pos_w``, ``body_quat_w``,
    ``body_lin_vel_w``, ``body_ang_vel_w``; bodies in ``model``'s order from body 1, float32) for a model whose
    free joint comes first; CSV joints are ``joint_names`` (SDK order), matched to the model by name."""
    r = resample_csv(path, input_fps, output_fps)
    d = mujoco.MjData(model)
    adr = [model.jnt_qposadr[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n)] for n in joint_names]
    vadr = [model.jnt_dofadr[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n)] for n in joint_names]
    t, nb = r["joint_pos"].shape[0], model.nbody - 1
    out = {k: np.zeros((t, nb, s), np.float32) for k, s in
           (("body_pos_w", 3), ("body_quat_w", 4), ("body_lin_vel_w", 3), ("body_ang_vel_w", 3))}  # fmt: skip
    vel = np.zeros(6)
    for i in range(t):
        q = r["root_quat"][i].astype(np.float64)
        d.qpos[:3], d.qpos[3:7] = r["root_pos"][i], q
        d.qpos[adr] = r["joint_pos"][i]
        d.qvel[:3] = r["root_lin_vel"][i]
        d.qvel[3:6] = quat.rotate(quat.conj(q / np.linalg.norm(q)), r["root_ang_vel"][i].astype(np.float64))
        d.qvel[vadr] = r["joint_vel"][i]
        mujoco.mj_forward(model, d)
        out["body_pos_w"][i], out["body_quat_w"][i] = d.xpos[1:], d.xquat[1:]
        for b in range(1, model.nbody):
            mujoco.mj_objectVelocity(model, d, mujoco.mjtObj.mjOBJ_XBODY, b, vel, 0)
            out["body_ang_vel_w"][i, b - 1], out["body_lin_vel_w"][i, b - 1] = vel[:3], vel[3:]
    out["body_pos_w"][:, 0] = r["root_pos"]  # body 0 is the CSV root exactly (the deploy reads it)
    out["body_quat_w"][:, 0] = r["root_quat"]
    return {"fps": np.array([int(output_fps)]), "joint_pos": r["joint_pos"], "joint_vel": r["joint_vel"], **out}
