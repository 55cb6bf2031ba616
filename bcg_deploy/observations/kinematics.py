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
- ``Kinematics.transforms(q) -> [B, 30, 4, 4]``: homogeneous world transforms [R p; 0 1] (the
  fast path: ``forward`` slices it); ``root_transform(q) -> [B, 4, 4]``.
- ``Kinematics.key_points(pos, mat) -> [B, K, 3]``: world positions of ``RobotSpec.key_bodies``
  (body origin + body-frame offset), K = 5 for the G1; ``key_points_from_transforms(t)`` the same
  from [B, 30, 4, 4] transforms (in whatever frame those are).
- Rotation helpers (``quat_mul``, ``quat_to_mat``, ...): ``bcg_deploy.rotations.quat_torch``.

Implementation (export-friendly: few, batched ONNX opset-17 ops, no loops, no Atan2): each hinge's
local transform is L(theta) = C0 + sin(theta) C1 + (1 - cos(theta)) C2 with constant 4x4 C's; the
root transform is a quadratic form of the (unnormalised) quaternion divided by its squared norm;
world transforms come from pointer jumping over the tree (ceil(log2 depth) = 4 rounds of one Gather
+ one batched MatMul). ``with_quat`` runs MuJoCo's quaternion chain level by level. Only hinge joints
(and a free root) are supported; anything else raises ``ValueError``.
"""

from __future__ import annotations

from typing import NamedTuple

import mujoco
import numpy as np
import torch
from torch import nn

from bcg_deploy.robots import RobotSpec
from bcg_deploy.rotations import quat_numpy as Q
from bcg_deploy.rotations.quat_torch import axis_angle_quat, quat_mul, quat_normalize

# ----------------------------------------------------------------------------- kinematics

# Rotation matrix entries of a unit quaternion (w, x, y, z) = (0, 1, 2, 3) as quadratic forms:
# R_ij = sum coef * q_a * q_b (diagonal in the homogeneous form w^2 + x^2 - y^2 - z^2 etc.).
ROT_QUADRATIC = {
    (0, 0): ((0, 0, 1), (1, 1, 1), (2, 2, -1), (3, 3, -1)),
    (0, 1): ((1, 2, 1), (2, 1, 1), (0, 3, -1), (3, 0, -1)),
    (0, 2): ((1, 3, 1), (3, 1, 1), (0, 2, 1), (2, 0, 1)),
    (1, 0): ((1, 2, 1), (2, 1, 1), (0, 3, 1), (3, 0, 1)),
    (1, 1): ((0, 0, 1), (1, 1, -1), (2, 2, 1), (3, 3, -1)),
    (1, 2): ((2, 3, 1), (3, 2, 1), (0, 1, -1), (1, 0, -1)),
    (2, 0): ((1, 3, 1), (3, 1, 1), (0, 2, -1), (2, 0, -1)),
    (2, 1): ((2, 3, 1), (3, 2, 1), (0, 1, 1), (1, 0, 1)),
    (2, 2): ((0, 0, 1), (1, 1, -1), (2, 2, -1), (3, 3, 1)),
}


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

        def f64(x) -> torch.Tensor:
            return torch.as_tensor(np.asarray(x, dtype=np.float64))

        # Homogeneous local transforms of the non-root bodies (body id order 2..nbody-1) as constants:
        # L(theta) = C0 + sin(theta) C1 + (1 - cos(theta)) C2 (Rodrigues about an axis through the anchor).
        c0, c1, c2 = [], [], []
        for b in range(2, m.nbody):
            base = np.eye(4)
            base[:3, :3] = Q.to_matrix_mujoco(m.body_quat[b])
            base[:3, 3] = m.body_pos[b]
            a, ax = jpos[b - 1], axis[b - 1]
            k = np.zeros((4, 4))
            k[:3, :3] = [[0, -ax[2], ax[1]], [ax[2], 0, -ax[0]], [-ax[1], ax[0], 0]]
            ta, tna = np.eye(4), np.eye(4)
            ta[:3, 3], tna[:3, 3] = a, -a
            c0.append(base)
            c1.append(base @ ta @ k @ tna)
            c2.append(base @ ta @ k @ k @ tna)
        self.register_buffer("_c0", f64(c0), persistent=False)
        self.register_buffer("_c1", f64(c1), persistent=False)
        self.register_buffer("_c2", f64(c2), persistent=False)
        self.register_buffer("_hinge_q", torch.as_tensor(np.maximum(qadr[1:], 0), dtype=torch.long), persistent=False)
        # Root transform from (position, unnormalised quaternion): flat 4x4 = (q q^T) Q / |q|^2 + p P + E.
        quad = np.zeros((16, 16))
        for (i, j), terms in ROT_QUADRATIC.items():
            for a, b, coef in terms:
                quad[4 * a + b, 4 * i + j] += coef
        ppos = np.zeros((3, 16))
        ppos[0, 3], ppos[1, 7], ppos[2, 11] = 1.0, 1.0, 1.0
        e = np.zeros(16)
        e[15] = 1.0
        self.register_buffer("_quad", f64(quad), persistent=False)
        self.register_buffer("_ppos", f64(ppos), persistent=False)
        self.register_buffer("_e16", f64(e), persistent=False)
        self.register_buffer("_eye4", f64(np.eye(4)[None]), persistent=False)
        # Pointer jumping over the tree (node 0 = world, node b = body b): after the k-th step every
        # node holds the product of its 2^k nearest ancestors' transforms; ceil(log2(depth)) steps.
        parent = np.array([0, 0] + [int(m.body_parentid[b]) for b in range(2, m.nbody)])
        jumps = []
        while parent.any():
            jumps.append(parent.copy())
            parent = parent[parent]
        self.num_jumps = len(jumps)
        for i, jp in enumerate(jumps):
            self.register_buffer(f"_jump{i}", torch.as_tensor(jp, dtype=torch.long), persistent=False)
        # Level order (bodies sorted by (depth, id)), used by the quaternion chain.
        order = sorted(range(1, m.nbody), key=lambda b: (depth[b], b))
        self.level_sizes = [int((depth[1:] == d).sum()) for d in range(depth.max() + 1)]
        pos_in_order = {b: i for i, b in enumerate(order)}
        starts = np.cumsum([0] + self.level_sizes)
        parent_local = [pos_in_order[m.body_parentid[b]] - starts[depth[b] - 1] for b in order[1:]]
        rest = [b - 1 for b in order[1:]]
        self.register_buffer("_q_index", torch.as_tensor(np.maximum(qadr[rest], 0), dtype=torch.long), persistent=False)
        self.register_buffer("_hinge_mask", f64(qadr[rest] >= 0), persistent=False)
        self.register_buffer("_parent_local", torch.as_tensor(parent_local, dtype=torch.long), persistent=False)
        self.register_buffer("_inv_order", torch.as_tensor(np.argsort([b - 1 for b in order]), dtype=torch.long),
                             persistent=False)  # fmt: skip
        self.register_buffer("_body_quat", f64(m.body_quat[[b + 1 for b in rest]]), persistent=False)
        self.register_buffer("_axis", f64(axis[rest]), persistent=False)
        body_index = {n: i for i, n in enumerate(robot.body_names)}
        try:
            kb = [body_index[k.body] for k in robot.key_bodies]
        except KeyError as exc:
            raise ValueError(f"{robot.name}: key body {exc.args[0]} is not a body of the model") from None
        self.key_point_names = tuple(k.name for k in robot.key_bodies)
        self.register_buffer("_key_body", torch.as_tensor(kb, dtype=torch.long), persistent=False)
        self.register_buffer("_key_offset", f64([k.offset for k in robot.key_bodies]), persistent=False)
        self.register_buffer("_key_offset_h", f64([[*k.offset, 1.0] for k in robot.key_bodies]), persistent=False)
        self.to(dtype)

    def root_transform(self, q: torch.Tensor) -> torch.Tensor:
        """Homogeneous root transform [B, 4, 4] (root quaternion normalised)."""
        quat = q[:, 3:7]
        b = q.shape[0]
        qq = (quat[:, :, None] * quat[:, None, :]).reshape(b, 16)
        n2 = (quat * quat).sum(-1, keepdim=True)
        flat = (qq @ self._quad) / n2 + q[:, 0:3] @ self._ppos + self._e16
        return flat.reshape(b, 4, 4)

    def transforms(self, q: torch.Tensor) -> torch.Tensor:
        """Homogeneous world transforms [B, NB, 4, 4] of all bodies ([R p; 0 1], MuJoCo xmat / xpos)."""
        b = q.shape[0]
        th = q.index_select(-1, self._hinge_q).reshape(b, -1, 1, 1)
        local = self._c0 + torch.sin(th) * self._c1 + (1.0 - torch.cos(th)) * self._c2
        a = torch.cat((self._eye4.expand(b, 1, 4, 4), self.root_transform(q)[:, None], local), dim=1)
        for i in range(self.num_jumps):
            a = a.index_select(1, getattr(self, f"_jump{i}")) @ a
        return a[:, 1:]

    def forward(self, q: torch.Tensor, with_quat: bool = False) -> BodyPoses:
        """World poses of all bodies from ``q`` [B, nq] (MuJoCo layout); see module docstring."""
        t = self.transforms(q)
        quat = None
        if with_quat:
            th = q.index_select(-1, self._q_index) * self._hinge_mask
            quat = self._quats(quat_normalize(q[:, 3:7]), th)
        return BodyPoses(t[..., :3, 3], t[..., :3, :3], quat)

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

    def key_points_from_transforms(self, t: torch.Tensor) -> torch.Tensor:
        """Key points [B, K, 3] expressed in the frame of the body transforms ``t`` [B, NB, 4, 4]."""
        return (t.index_select(1, self._key_body) @ self._key_offset_h[..., None])[..., :3, 0]

    def key_points(self, pos: torch.Tensor, mat: torch.Tensor) -> torch.Tensor:
        """World positions [B, K, 3] of the robot's key points from body poses."""
        bp = pos.index_select(1, self._key_body)
        bm = mat.index_select(1, self._key_body)
        return bp + (bm @ self._key_offset[..., None])[..., 0]
