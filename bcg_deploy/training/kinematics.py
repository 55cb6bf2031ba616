"""Torch forward kinematics of a RobotSpec, built from the compiled MJCF (batched, differentiable).

API summary (for training / export):

- ``Kinematics(robot, dtype=torch.float32)``: an ``nn.Module``; buffers hold the kinematic tree of
  ``robot.load_model(scene=False)`` (``body_parentid``, ``body_pos``, ``body_quat``, ``jnt_axis``,
  ``jnt_pos``). ``.to(dtype)`` switches precision (any float dtype).
- ``Kinematics.forward(q, with_quat=False) -> BodyPoses(pos, mat, quat)``:
  ``q`` [B, 36] in MuJoCo layout (base position world, base quaternion w x y z, 29 hinge angles rad).
  ``pos`` [B, 30, 3] body origins, world, m (MuJoCo ``xpos``); ``mat`` [B, 30, 3, 3] body
  orientations (columns = body axes in world, MuJoCo ``xmat``); ``quat`` [B, 30, 4] w x y z (MuJoCo
  ``xquat``, same sign) when ``with_quat`` else ``None``. Bodies in ``RobotSpec.body_names`` order
  (MuJoCo body id - 1; index 0 = root). The root quaternion is normalised (as MuJoCo does).
- ``Kinematics.key_points(pos, mat) -> [B, K, 3]``: world positions of ``RobotSpec.key_bodies``
  (body origin + body-frame offset), K = 5 for the G1.
- Small quaternion / rotation helpers (w x y z, pure torch): ``quat_mul``, ``quat_conj``,
  ``quat_normalize``, ``quat_to_mat``, ``quat_apply``, ``axis_angle_quat``, ``mat_to_6d``
  (first two columns of R, column 0 then column 1), ``heading_rot`` (yaw-only rotation of a frame).

Implementation: bodies are processed level by level (depth in the tree), every level as one batched
matmul, so the traced graph has a few nodes per level (ONNX opset 17: Gather, MatMul, Mul, Add, Sin,
Cos, Concat; no loops, no Atan2). Only hinge joints (and a free root) are supported; anything else
raises ``ValueError``.
"""

from __future__ import annotations

from typing import NamedTuple

import mujoco
import numpy as np
import torch
from torch import nn

from bcg_deploy.robots import RobotSpec

# ----------------------------------------------------------------------------- rotation helpers


def quat_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Hamilton product a * b of w x y z quaternions [..., 4] (broadcasting)."""
    w1, x1, y1, z1 = a.unbind(-1)
    w2, x2, y2, z2 = b.unbind(-1)
    return torch.stack(
        (
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ),
        dim=-1,
    )


def quat_conj(q: torch.Tensor) -> torch.Tensor:
    """Conjugate (= inverse for unit quaternions) of w x y z quaternions."""
    return torch.cat((q[..., :1], -q[..., 1:]), dim=-1)


def quat_normalize(q: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Unit quaternion (norm clamped below by ``eps`` so a zero input gives no NaN)."""
    return q / torch.sqrt((q * q).sum(-1, keepdim=True)).clamp_min(eps)


def quat_to_mat(q: torch.Tensor) -> torch.Tensor:
    """Rotation matrix [..., 3, 3] of unit w x y z quaternions [..., 4]."""
    w, x, y, z = q.unbind(-1)
    xx, yy, zz = x * x, y * y, z * z
    xy, xz, yz = x * y, x * z, y * z
    wx, wy, wz = w * x, w * y, w * z
    rows = (
        1 - 2 * (yy + zz),
        2 * (xy - wz),
        2 * (xz + wy),
        2 * (xy + wz),
        1 - 2 * (xx + zz),
        2 * (yz - wx),
        2 * (xz - wy),
        2 * (yz + wx),
        1 - 2 * (xx + yy),
    )
    return torch.stack(rows, dim=-1).reshape(q.shape[:-1] + (3, 3))


def quat_apply(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate vectors v [..., 3] by unit quaternions q [..., 4] (w x y z)."""
    w = q[..., :1]
    u = q[..., 1:]
    t = 2.0 * torch.cross(u, v, dim=-1)
    return v + w * t + torch.cross(u, t, dim=-1)


def axis_angle_quat(axis: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Quaternion of a rotation by ``angle`` (rad) [...] about unit ``axis`` [..., 3]."""
    half = 0.5 * angle.unsqueeze(-1)
    return torch.cat((torch.cos(half), torch.sin(half) * axis), dim=-1)


def mat_to_6d(mat: torch.Tensor) -> torch.Tensor:
    """6D rotation [..., 6] = first two columns of R [..., 3, 3]: (R00, R10, R20, R01, R11, R21)."""
    return mat[..., :, :2].transpose(-1, -2).reshape(mat.shape[:-2] + (6,))


def heading_rot(mat: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Yaw-only rotation [..., 3, 3] of frames ``mat`` [..., 3, 3]: heading = world-xy direction of
    the frame's x axis (no atan2: normalised (x, y); ``eps`` guards an x axis pointing straight up)."""
    fx = mat[..., 0, 0]
    fy = mat[..., 1, 0]
    inv = torch.rsqrt((fx * fx + fy * fy).clamp_min(eps))
    c, s = fx * inv, fy * inv
    zero, one = torch.zeros_like(c), torch.ones_like(c)
    return torch.stack((c, -s, zero, s, c, zero, zero, zero, one), dim=-1).reshape(c.shape + (3, 3))


def _np_quat_to_mat(q: np.ndarray) -> np.ndarray:
    out = np.zeros(9)
    mujoco.mju_quat2Mat(out, np.asarray(q, dtype=np.float64))
    return out.reshape(3, 3)


# ----------------------------------------------------------------------------- kinematics


class BodyPoses(NamedTuple):
    """World poses of all bodies: pos [B, NB, 3] (m), mat [B, NB, 3, 3], quat [B, NB, 4] or None."""

    pos: torch.Tensor
    mat: torch.Tensor
    quat: torch.Tensor | None


class Kinematics(nn.Module):
    """Forward kinematics of ``robot`` (floating root + hinge tree) in torch; see module docstring."""

    def __init__(self, robot: RobotSpec, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        m = robot.load_model(scene=False)
        nb = m.nbody - 1
        if m.body_jntnum[1] != 1 or m.jnt_type[m.body_jntadr[1]] != mujoco.mjtJoint.mjJNT_FREE:
            raise ValueError(f"{robot.name}: the first body must carry one free joint")
        depth = np.zeros(m.nbody, dtype=int)
        for b in range(2, m.nbody):
            depth[b] = depth[m.body_parentid[b]] + 1
            if m.body_parentid[b] == 0:
                raise ValueError(f"{robot.name}: body {m.body(b).name} is a second root (unsupported)")
        # Per non-root body: qpos index of its hinge (or -1 if welded), axis, joint anchor.
        qadr = np.full(nb, -1, dtype=np.int64)
        axis = np.zeros((nb, 3))
        jpos = np.zeros((nb, 3))
        for b in range(2, m.nbody):
            n = m.body_jntnum[b]
            if n == 0:
                continue
            j = m.body_jntadr[b]
            if n > 1 or m.jnt_type[j] != mujoco.mjtJoint.mjJNT_HINGE:
                raise ValueError(f"{robot.name}: body {m.body(b).name} needs exactly one hinge or none")
            qadr[b - 1] = m.jnt_qposadr[j]
            axis[b - 1] = m.jnt_axis[j]
            jpos[b - 1] = m.jnt_pos[j]
        self.num_bodies = nb
        self.nq = m.nq
        self.has_joint_offset = bool(np.abs(jpos).max() > 0)
        # Level order: bodies sorted by (depth, id); each level is a contiguous slice.
        order = sorted(range(1, m.nbody), key=lambda b: (depth[b], b))
        self.level_sizes = [int((depth[1:] == d).sum()) for d in range(depth.max() + 1)]
        pos_in_order = {b: i for i, b in enumerate(order)}
        starts = np.cumsum([0] + self.level_sizes)
        # Parent index relative to the start of the previous level (level 0 = the root).
        parent_local = [pos_in_order[m.body_parentid[b]] - starts[depth[b] - 1] for b in order[1:]]
        rest = [b - 1 for b in order[1:]]  # non-root bodies in level order (body index)
        inv = np.argsort(np.array([b - 1 for b in order]))
        bq = np.stack([_np_quat_to_mat(m.body_quat[b + 1]) for b in rest]) if rest else np.zeros((0, 3, 3))
        ax = axis[rest]
        skew = np.zeros((len(rest), 3, 3))
        skew[:, 0, 1], skew[:, 0, 2], skew[:, 1, 2] = -ax[:, 2], ax[:, 1], -ax[:, 0]
        skew[:, 1, 0], skew[:, 2, 0], skew[:, 2, 1] = ax[:, 2], -ax[:, 1], ax[:, 0]
        qa = qadr[rest]
        hinge = qa >= 0

        def f64(x: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(np.asarray(x, dtype=np.float64))

        self.register_buffer("_q_index", torch.as_tensor(np.where(hinge, qa, 0), dtype=torch.long), persistent=False)
        self.register_buffer("_hinge_mask", f64(hinge.astype(float)), persistent=False)
        self.register_buffer("_parent_local", torch.as_tensor(parent_local, dtype=torch.long), persistent=False)
        self.register_buffer("_inv_order", torch.as_tensor(inv, dtype=torch.long), persistent=False)
        self.register_buffer("_body_rot", f64(bq), persistent=False)
        self.register_buffer("_body_pos", f64(m.body_pos[[b + 1 for b in rest]]), persistent=False)
        self.register_buffer("_body_quat", f64(m.body_quat[[b + 1 for b in rest]]), persistent=False)
        self.register_buffer("_skew", f64(skew), persistent=False)
        self.register_buffer("_skew2", f64(skew @ skew), persistent=False)
        self.register_buffer("_axis", f64(ax), persistent=False)
        self.register_buffer("_jnt_pos", f64(jpos[rest]), persistent=False)
        body_index = {n: i for i, n in enumerate(robot.body_names)}
        try:
            kb = [body_index[k.body] for k in robot.key_bodies]
        except KeyError as exc:
            raise ValueError(f"{robot.name}: key body {exc.args[0]} is not a body of the model") from None
        self.key_point_names = tuple(k.name for k in robot.key_bodies)
        self.register_buffer("_key_body", torch.as_tensor(kb, dtype=torch.long), persistent=False)
        self.register_buffer("_key_offset", f64([k.offset for k in robot.key_bodies]), persistent=False)
        self.to(dtype)

    def _angles(self, q: torch.Tensor) -> torch.Tensor:
        """Hinge angles [B, NB-1] in level order (0 for welded bodies)."""
        return q.index_select(-1, self._q_index) * self._hinge_mask

    def forward(self, q: torch.Tensor, with_quat: bool = False) -> BodyPoses:
        """World poses of all bodies from ``q`` [B, nq] (MuJoCo layout); see module docstring."""
        root_q = quat_normalize(q[:, 3:7])
        root_pos = q[:, None, 0:3]
        root_mat = quat_to_mat(root_q)[:, None]
        th = self._angles(q)
        s = torch.sin(th)[..., None, None]
        c = torch.cos(th)[..., None, None]
        eye = torch.eye(3, dtype=q.dtype, device=q.device)
        rot_axis = eye + s * self._skew + (1.0 - c) * self._skew2  # Rodrigues, [B, n, 3, 3]
        local_mat = self._body_rot @ rot_axis
        local_pos = self._body_pos
        if self.has_joint_offset:  # child origin moves when the hinge is off the body origin
            local_pos = (
                local_pos + (self._body_rot @ (self._jnt_pos[..., None] - rot_axis @ self._jnt_pos[..., None]))[..., 0]
            )
        else:
            local_pos = local_pos.expand(q.shape[0], -1, -1)
        mats, poss = [root_mat], [root_pos]
        start = 0
        for size in self.level_sizes[1:]:
            sl = slice(start, start + size)
            par = self._parent_local[sl]
            pm = mats[-1].index_select(1, par)
            pp = poss[-1].index_select(1, par)
            mats.append(pm @ local_mat[:, sl])
            poss.append(pp + (pm @ local_pos[:, sl, :, None])[..., 0])
            start += size
        mat = torch.cat(mats, dim=1).index_select(1, self._inv_order)
        pos = torch.cat(poss, dim=1).index_select(1, self._inv_order)
        quat = self._quats(root_q, th) if with_quat else None
        return BodyPoses(pos, mat, quat)

    def _quats(self, root_q: torch.Tensor, th: torch.Tensor) -> torch.Tensor:
        """Quaternion chain exactly as MuJoCo composes it (xquat = parent * body_quat * hinge)."""
        local = quat_mul(self._body_quat, axis_angle_quat(self._axis, th))
        quats = [root_q[:, None]]
        start = 0
        for size in self.level_sizes[1:]:
            sl = slice(start, start + size)
            parent = quats[-1].index_select(1, self._parent_local[sl])
            quats.append(quat_normalize(quat_mul(parent, local[:, sl])))
            start += size
        return torch.cat(quats, dim=1).index_select(1, self._inv_order)

    def key_points(self, pos: torch.Tensor, mat: torch.Tensor) -> torch.Tensor:
        """World positions [B, K, 3] of the robot's key points from body poses."""
        bp = pos.index_select(1, self._key_body)
        bm = mat.index_select(1, self._key_body)
        return bp + (bm @ self._key_offset[..., None])[..., 0]
