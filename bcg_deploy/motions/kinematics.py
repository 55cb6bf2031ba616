"""Forward kinematics of a motion through MuJoCo on our robot model.

Body poses come from ``mj_kinematics`` (``xpos``, ``xquat``). Body velocities are EXACT for the
given generalized velocity, not finite differences: ``mj_comVel`` gives every body's spatial
velocity ``cvel`` = [angular; linear at the subtree centre of mass of its tree root], in world
orientation; the linear velocity of the body origin is ``v + w x (xpos - subtree_com[root])``, the
same transform ``mj_objectVelocity(m, d, mjOBJ_XBODY, id, res, 0)`` applies. They are therefore as
accurate as the motion's finite-difference qvel (see ``resample``).
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from bcg_deploy.robots import RobotSpec
from bcg_deploy.rotations import quat_numpy as Q


@dataclass(frozen=True, eq=False)
class BodyKinematics:
    """World-frame body states [T, NB, ...] for bodies 1..nbody-1 (RobotSpec.body_names order)."""

    pos: np.ndarray
    quat: np.ndarray
    lin_vel: np.ndarray
    ang_vel: np.ndarray


def to_qpos(root_pos: np.ndarray, root_quat: np.ndarray, joint_pos: np.ndarray) -> np.ndarray:
    """MuJoCo qpos [T, 7 + J]: base position (world), base quaternion (wxyz), joints."""
    return np.concatenate([root_pos, root_quat, joint_pos], axis=-1)


def to_qvel(root_quat: np.ndarray, root_lin_vel: np.ndarray, root_ang_vel_w: np.ndarray, joint_vel: np.ndarray):
    """MuJoCo qvel [T, 6 + J]: base linear velocity (world), base angular velocity (BODY frame), joints."""
    ang_local = Q.rotate_inverse(root_quat, root_ang_vel_w)
    return np.concatenate([root_lin_vel, ang_local, joint_vel], axis=-1)


def forward_kinematics(model: mujoco.MjModel, qpos: np.ndarray, qvel: np.ndarray | None = None) -> BodyKinematics:
    """Body poses and velocities for each row of ``qpos`` [T, nq] and ``qvel`` [T, nv].

    With ``qvel`` None only poses are computed (velocities are returned as zeros).
    """
    qpos = np.atleast_2d(qpos)
    t = len(qpos)
    nb = model.nbody - 1
    with_vel = qvel is not None
    qvel = np.zeros((t, model.nv)) if qvel is None else np.atleast_2d(qvel)
    data = mujoco.MjData(model)
    pos = np.empty((t, nb, 3))
    quat = np.empty((t, nb, 4))
    cvel = np.zeros((t, nb, 6))
    com = np.zeros((t, nb, 3))
    root = model.body_rootid[1:]
    for k in range(t):
        data.qpos[:] = qpos[k]
        data.qvel[:] = qvel[k]
        mujoco.mj_kinematics(model, data)
        pos[k] = data.xpos[1:]
        quat[k] = data.xquat[1:]
        if with_vel:
            mujoco.mj_comPos(model, data)
            mujoco.mj_comVel(model, data)
            cvel[k] = data.cvel[1:]
            com[k] = data.subtree_com[root]
    ang = cvel[..., :3]
    lin = cvel[..., 3:] + np.cross(ang, pos - com)
    return BodyKinematics(pos=pos, quat=Q.make_continuous(quat), lin_vel=lin, ang_vel=ang)


def contact_points_world(spec: RobotSpec, body_pos: np.ndarray, body_quat: np.ndarray) -> np.ndarray:
    """World positions [T, 8, 3] of the foot contact sphere centres (RobotSpec.foot_contact_points order)."""
    idx = [spec.body_names.index(c.body) for c in spec.foot_contact_points]
    local = np.array([c.pos for c in spec.foot_contact_points])
    return body_pos[:, idx] + Q.rotate(body_quat[:, idx], np.broadcast_to(local, body_pos[:, idx].shape))
