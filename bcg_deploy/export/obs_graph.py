"""The raw-state policy as a lean ONNX graph: few, batched nodes (onnxruntime pays ~0.3-1.5 us per node).

``FastRawPolicy`` computes exactly the training pipeline ``ObservationModule -> RunningNormalizer ->
Actor.deterministic`` (and the joint targets and reference frame of the raw signature), restructured
for a small graph. The observation is computed and normalised in float64, then cast to float32 for
the actor. Measured on the trained dance policy (1618 parity inputs): this graph with a float32
observation is ~9 us faster per call (float64 matmuls are slower in onnxruntime; elementwise ops cost
the same) but onnxruntime and torch then differ by 1.04e-5 (> the 1e-5 export limit; 2.7e-5 from
the float64 result): float32 rounding of nearly constant entries is amplified by the normaliser's
1/std (up to 316). In float64 they differ by ~1e-6 (the float32 actor's rounding).

How the graph differs from ``ObservationModule`` (same values, float64 differences ~1e-15):

- Forward kinematics relative to the root in quaternions: all local hinge rotations at once
  (``q = cos(theta/2) A + sin(theta/2) B``, constant A, B), then pointer jumping over the tree (each
  round: one row gather, matmuls with constants and one same-shape product, ``p * q = ((q @ W) *
  (p @ E)) @ S``; measured in onnxruntime: a batched 4x4 matmul round ~7 us, this one ~3 us; inner-axis
  broadcasts and ReduceSum are slow there). Body rotation columns are quadratic
  and the key points (body origins chained, plus offsets) linear in the products ``q_a q_b`` of all
  nodes: two matmuls with constants. The root rotation then turns the body columns, key points and
  angular velocity into the world frame, and one heading rotation turns them, the linear velocity
  and the reference root offsets into the heading frame: no world position is subtracted from
  another (no cancellation).
- The reference terms are tables indexed by the clamped time step (one row per current step ``t``,
  holding frames ``t+1..t+F``, rows for ``t = -F..-1`` stored at the end so a negative index reaches
  them): the xy components of the reference direction vectors are ``c * X[t] + s * Y[t]`` (one small
  matmul with the heading's cosine and sine); their z components do not depend on the robot state,
  so their normalised values times the actor's first-layer weights are folded, per step, into that
  layer's bias (a table ``[T + F, 512]``). The actor sees the remaining 648 entries (in an internal
  order; the normaliser statistics and the first-layer columns are permuted to match).
- The reference frame outputs are gathered from float32 tables with the same index.

``observation(...)`` returns the full 849-entry observation in the training layout (tests compare it
with ``ObservationModule`` in float64).
"""

from __future__ import annotations

from typing import Any

import mujoco
import numpy as np
import torch
from torch import nn

from bcg_deploy.motions import quat
from bcg_deploy.robots import RobotSpec
from bcg_deploy.training.kinematics import _ROT_QUADRATIC
from bcg_deploy.training.networks import Actor
from bcg_deploy.training.observations import FRAME_ARRAYS, ObservationModule

# raw-input layout of the internal float64 vector x64 (one Concat + one Cast)
_X_ORDER = ("base_ang_vel", "base_lin_vel", "base_pos", "joint_vel", "base_quat", "joint_pos")


def _jumps(parent: np.ndarray) -> list[np.ndarray]:
    """Pointer-jumping index arrays (node 0 is the fixed point): round r maps n -> parent^(2^r)(n)."""
    out, p = [], parent.copy()
    while p.any():
        out.append(p.copy())
        p = p[p]
    return out


class FastObservation(nn.Module):
    """Raw state -> (the 648 actor-visible observation entries normalised and clipped, float32; index).

    ``om`` supplies the kinematic constants and the reference clip; ``mean``, ``std``, ``clip`` are
    the folded normaliser statistics (training layout, 849 entries).
    """

    def __init__(self, om: ObservationModule, robot: RobotSpec, mean: torch.Tensor, std: torch.Tensor, clip: float):
        super().__init__()
        f64 = torch.float64
        kin = om.kinematics
        m = robot.load_model(scene=False)
        nb, nk, nj = kin.num_bodies, len(robot.key_bodies), robot.num_joints
        fut = om.future_steps
        nf = len(fut)
        self.num_frames, self.max_future = om.num_frames, max(fut)
        sizes = {"base_pos": 3, "joint_vel": nj, "base_quat": 4, "base_lin_vel": 3, "base_ang_vel": 3, "joint_pos": nj}
        off, xoff = 0, {}
        for k in _X_ORDER:
            xoff[k] = off
            off += sizes[k]
        self._xoff = xoff
        if (xoff["base_ang_vel"], xoff["base_lin_vel"], xoff["base_pos"]) != (0, 3, 6):
            raise ValueError("internal layout: angular velocity, linear velocity, position must lead x64")
        # ---- forward kinematics relative to the root, in quaternions: node 0 = root (identity), then the
        # other bodies in body order. Local q_n = cos(theta/2) A_n + sin(theta/2) B_n (body_quat times
        # the hinge rotation; the root's is the constant 1); pointer jumping composes q_parent * q_n;
        # body rotation columns and key point positions are then quadratic / linear in q_a q_b.
        lmat = np.zeros((4, 4, 4))  # lmat[a] = left-multiplication matrix of the basis quaternion e_a
        for a in range(4):
            e = np.zeros(4)
            e[a] = 1.0
            w, x, y, z = e
            lmat[a] = [[w, -x, -y, -z], [x, w, -z, y], [y, z, w, -x], [z, -y, x, w]]
        # p * q = ((q @ W) * (p @ E)) @ S: (q @ W)[4i + a] = (L(e_a) q)_i, (p @ E)[4i + a] = p_a, S sums over a
        # (same-shape products and small matmuls with constants: onnxruntime's inner-axis broadcasts are slow)
        rep_a = np.tile(np.eye(4), (1, 4))  # [4, 16]: column 4i + a holds the a-th input
        rep_i = np.repeat(np.eye(4), 4, axis=1)  # [4, 16]: column 4i + a holds the i-th input
        self.register_buffer("_qmul", torch.as_tensor(lmat.transpose(2, 1, 0).reshape(4, 16), dtype=f64),
                             persistent=False)  # fmt: skip
        self.register_buffer("_rep_a", torch.as_tensor(rep_a, dtype=f64), persistent=False)
        self.register_buffer("_rep_i", torch.as_tensor(rep_i, dtype=f64), persistent=False)
        self.register_buffer("_sum_a", torch.as_tensor(rep_i.T, dtype=f64), persistent=False)
        quad = np.zeros((16, 3, 3))  # R_ij = sum_ab quad[4a + b, i, j] q_a q_b (unit q)
        for (i, j), terms in _ROT_QUADRATIC.items():
            for a, b, coef in terms:
                quad[4 * a + b, i, j] += coef
        qa, qb, qc = np.zeros((nb, 4)), np.zeros((nb, 4)), np.zeros((nb, 4))
        qc[0, 0] = 1.0
        angle = np.zeros(nb, dtype=np.int64) + xoff["joint_pos"]  # any finite input for the root
        parent = np.zeros(nb, dtype=np.int64)
        lever = np.zeros((nb, nb, 3))  # lever[b, x]: p_b (root frame) = sum_x R_x lever[b, x]
        for b in range(1, nb):
            mb = b + 1  # MuJoCo body id
            bq = m.body_quat[mb] / np.linalg.norm(m.body_quat[mb])
            x = parent[b] = int(m.body_parentid[mb]) - 1
            lever[b] = lever[x]
            if m.body_jntnum[mb] == 0:  # welded: a constant local rotation
                qc[b] = bq
                lever[b, x] += m.body_pos[mb]
                continue
            j = int(m.body_jntadr[mb])
            if m.body_jntnum[mb] != 1 or m.jnt_type[j] != mujoco.mjtJoint.mjJNT_HINGE:
                raise ValueError(f"{robot.name}: body {robot.body_names[b]} needs one hinge or none")
            ax, anchor = m.jnt_axis[j], m.jnt_pos[j]
            qa[b] = bq
            qb[b] = quat.mul(bq, np.r_[0.0, ax])
            angle[b] = xoff["joint_pos"] + int(m.jnt_qposadr[j]) - 7
            lever[b, x] += m.body_pos[mb] + quat.to_matrix(bq) @ anchor
            lever[b, b] -= anchor
        self.register_buffer("_angle", torch.as_tensor(angle[:, None]), persistent=False)
        self.register_buffer("_qa", torch.as_tensor(qa, dtype=f64), persistent=False)
        self.register_buffer("_qb", torch.as_tensor(qb, dtype=f64), persistent=False)
        self.register_buffer("_qc", torch.as_tensor(qc, dtype=f64), persistent=False)
        jumps = _jumps(parent)
        for i, jp in enumerate(jumps):
            self.register_buffer(f"_jump{i}", torch.as_tensor(jp), persistent=False)
        self._num_jumps = len(jumps)
        # rotation columns 0 and 1 (6D) from q q^T; the root's twice (root_rot and body_rot[0])
        self.register_buffer("_rot_nodes", torch.as_tensor([0] + list(range(nb))), persistent=False)
        k6 = np.concatenate([quad[:, :, 0], quad[:, :, 1]], axis=1)  # [16, 6]
        self.register_buffer("_q_to_6d", torch.as_tensor(k6, dtype=f64), persistent=False)
        # key points (root frame) = sum over the extended node list of R_x c_x: linear in q q^T
        mkey = np.zeros((nb + 1, 16, 3 * nk))
        for i, kp in enumerate(robot.key_bodies):
            b = robot.body_names.index(kp.body)
            c = lever[b].copy()
            c[b] += kp.offset
            for xn in range(nb):
                mkey[xn + 1, :, 3 * i : 3 * i + 3] = quad @ c[xn]
        self.register_buffer("_q_to_key", torch.as_tensor(mkey.reshape(16 * (nb + 1), 3 * nk), dtype=f64),
                             persistent=False)  # fmt: skip
        self._nb, self._nk, self._nj = nb, nk, nj
        # ---- root rotation R^T (flat, row-major) from the outer product of the quaternion, / |q|^2
        quad = np.zeros((16, 9))
        for (i, j), terms in _ROT_QUADRATIC.items():
            for a, b, coef in terms:
                quad[4 * a + b, 3 * j + i] += coef  # R^T[j, i] = R[i, j]
        self.register_buffer("_quad", torch.as_tensor(quad, dtype=f64), persistent=False)
        # heading H (rows: v^T H = (H^T v)^T) from (c, s)
        hk = np.zeros((2, 9))
        hk[0, 0], hk[0, 4], hk[1, 1], hk[1, 3] = 1.0, 1.0, -1.0, 1.0
        he = np.zeros(9)
        he[8] = 1.0
        self.register_buffer("_h_cs", torch.as_tensor(hk, dtype=f64), persistent=False)
        self.register_buffer("_h_const", torch.as_tensor(he, dtype=f64), persistent=False)
        # ---- reference tables, one row per current step t = 0..T-1, then t = -F..-1
        steps = np.r_[np.arange(self.num_frames), np.arange(-self.max_future, 0)]
        idx = np.clip(steps[:, None] + np.asarray(fut)[None], 0, self.num_frames - 1)  # [R, F]
        table = om.ref_table.double().numpy()  # [T, 1 + 2 NB + K, 4] homogeneous world vectors
        vec = table[idx][..., :3]  # [R, F, V, 3]
        root_pos = vec[:, :, 0]  # [R, F, 3]
        dirs = vec[:, :, 1:]  # [R, F, 2 NB + K, 3]: body columns (root first) and key offsets
        rows = len(steps)
        self.register_buffer("_ref_pos", torch.as_tensor(root_pos, dtype=f64), persistent=False)
        # training layout of the reference direction terms: [ref_root_rot F x 6 | ref_body_rot F x 6 NB |
        # ref_key_pos F x 3 K], each frame's vectors (x, y, z) in a row
        sl = om.term_slices()
        lay_rot, lay_body, lay_key = sl["ref_root_rot"], sl["ref_body_rot"], sl["ref_key_pos"]
        vec_index = []  # (canonical obs index of x, vector array [R, 3])
        for f in range(nf):
            for v in range(2):
                vec_index.append((lay_rot.start + 6 * f + 3 * v, dirs[:, f, v]))
        for f in range(nf):
            for v in range(2 * nb):
                vec_index.append((lay_body.start + 6 * nb * f + 3 * v, dirs[:, f, v]))
        for f in range(nf):
            for v in range(nk):
                vec_index.append((lay_key.start + 3 * nk * f + 3 * v, dirs[:, f, 2 * nb + v]))
        nv = len(vec_index)
        xy_c = np.zeros((rows, 2 * nv))
        xy_s = np.zeros((rows, 2 * nv))
        z_val = np.zeros((rows, nv))
        xy_canon, z_canon = [], []
        for i, (ci, arr) in enumerate(vec_index):
            xy_c[:, 2 * i], xy_c[:, 2 * i + 1] = arr[:, 0], arr[:, 1]  # x' = c x + s y
            xy_s[:, 2 * i], xy_s[:, 2 * i + 1] = arr[:, 1], -arr[:, 0]  # y' = c y - s x
            z_val[:, i] = arr[:, 2]
            xy_canon += [ci, ci + 1]
            z_canon.append(ci + 2)
        self.register_buffer("_ref_xy", torch.as_tensor(np.stack([xy_c, xy_s], 1), dtype=f64), persistent=False)
        self.register_buffer("_ref_z", torch.as_tensor(z_val, dtype=f64), persistent=False)
        # ---- internal order of the actor-visible entries -> canonical index
        root_rot, body_rot, key_pos = sl["root_rot"].start, sl["body_rot"].start, sl["key_pos"].start
        canon = [sl["root_height"].start] + list(range(sl["joint_vel"].start, sl["joint_vel"].stop))
        canon += list(range(root_rot, root_rot + 6)) + list(range(body_rot, body_rot + 6 * nb))
        canon += list(range(key_pos, key_pos + 3 * nk))
        canon += list(range(sl["root_ang_vel"].start, sl["root_ang_vel"].stop))
        canon += list(range(sl["root_lin_vel"].start, sl["root_lin_vel"].stop))
        canon += list(range(sl["ref_root_pos"].start, sl["ref_root_pos"].stop))
        canon += xy_canon
        self.canon_index = np.asarray(canon, dtype=np.int64)
        self.z_canon_index = np.asarray(z_canon, dtype=np.int64)
        self.obs_dim = om.obs_dim
        if sorted(np.r_[self.canon_index, self.z_canon_index].tolist()) != list(range(om.obs_dim)):
            raise ValueError("internal observation layout does not cover the training layout exactly once")
        mean, std = mean.double(), std.double()
        self.register_buffer("_mean", mean[self.canon_index].clone(), persistent=False)
        self.register_buffer("_std", std[self.canon_index].clone(), persistent=False)
        self.clip = float(clip)
        # normalised (clipped) z entries per table row, for the folded first-layer bias
        zc = torch.as_tensor(self.z_canon_index)
        self.z_normalised = torch.clamp((self._ref_z - mean[zc]) / std[zc], -self.clip, self.clip)

    # ------------------------------------------------------------------ graph pieces

    def row_index(self, time_step: torch.Tensor) -> torch.Tensor:
        """Table row of the (truncated, clamped) time step [B] (negative rows wrap to the table end)."""
        # truncate first, then clamp (as ObservationModule): a NaN or huge time step maps into the table
        return torch.clamp(time_step.long(), -self.max_future, self.num_frames - 1).reshape(-1)

    def _x64(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([inputs[k] for k in _X_ORDER], dim=-1).double()

    def internal(self, inputs: dict[str, torch.Tensor], row: torch.Tensor) -> torch.Tensor:
        """The 648 actor-visible observation entries, un-normalised, internal order, float64 [B, 648]."""
        x = self._x64(inputs)
        o = self._xoff
        # root-relative body quaternions: local rotations, then pointer jumping (parent * child)
        half = 0.5 * x[:, self._angle]  # [B, NB, 1]
        q = torch.cos(half) * self._qa + torch.sin(half) * self._qb + self._qc
        for i in range(self._num_jumps):
            p = q[:, getattr(self, f"_jump{i}")]
            q = ((q @ self._qmul) * (p @ self._rep_a)) @ self._sum_a
        qe = q[:, self._rot_nodes]  # root twice
        qq = (qe @ self._rep_i) * (qe @ self._rep_a)  # [B, NB + 1, 16]: q_a q_b at 4a + b
        cols = (qq @ self._q_to_6d).reshape(-1, 2 * (self._nb + 1), 3)
        keys = (qq.reshape(-1, 16 * (self._nb + 1)) @ self._q_to_key).reshape(-1, self._nk, 3)
        # root rotation: R^T [B, 3, 3]; heading (c, s) [B, 1, 2] from (R00, R10)
        qr = x[:, o["base_quat"] : o["base_quat"] + 4]
        rt = (((qr @ self._rep_i) * (qr @ self._rep_a)) @ self._quad) / (qr * qr).sum(-1, keepdim=True)
        rt = rt.reshape(-1, 3, 3)
        f = rt[:, 0:1, 0:2]
        cs = f / torch.linalg.vector_norm(f, dim=-1, keepdim=True).clamp_min(1e-6)  # = f / sqrt(max(|f|^2, 1e-12))
        h = (cs @ self._h_cs + self._h_const).reshape(-1, 3, 3)
        vec = x[:, 0:9].reshape(-1, 3, 3)  # angular velocity (body), linear velocity (world), position (world)
        world = torch.cat((cols, keys, vec[:, 0:1]), dim=1) @ rt
        dp = self._ref_pos[row] - vec[:, 2:3]
        n_head = 2 * (self._nb + 1) + self._nk + 2 + self._ref_pos.shape[1]
        head = (torch.cat((world, vec[:, 1:2], dp), dim=1) @ h).reshape(-1, 3 * n_head)
        ref = (cs @ self._ref_xy[row]).reshape(-1, self._ref_xy.shape[-1])
        direct = x[:, o["base_pos"] + 2 : o["joint_vel"] + self._nj]  # root height, joint velocities
        return torch.cat((direct, head, ref), dim=-1)

    def forward(self, inputs: dict[str, torch.Tensor], row: torch.Tensor) -> torch.Tensor:
        """Normalised, clipped actor-visible entries [B, 648] (float64; the policy casts them)."""
        return torch.clamp((self.internal(inputs, row) - self._mean) / self._std, -self.clip, self.clip)

    def observation(self, inputs: dict[str, torch.Tensor], time_step: torch.Tensor) -> torch.Tensor:
        """The full observation [B, 849], training layout (un-normalised, float64)."""
        row = self.row_index(time_step)
        obs = torch.zeros(row.shape[0], self.obs_dim, dtype=torch.float64)
        obs[:, torch.as_tensor(self.canon_index)] = self.internal(inputs, row)
        obs[:, torch.as_tensor(self.z_canon_index)] = self._ref_z[row]
        return obs


class FastActor(nn.Module):
    """``Actor.deterministic`` on the 648 visible entries, the folded z entries in a per-row bias table."""

    def __init__(self, actor: Actor, obs: FastObservation) -> None:
        super().__init__()
        layers = list(actor.body) + [actor.mu]  # Linear, ELU, LayerNorm, ..., mu (mu alone without hidden)
        lin0 = layers[0]
        w = lin0.weight.detach().double()  # [H, 849]
        bias = lin0.bias.detach().double()[None] + obs.z_normalised @ w[:, torch.as_tensor(obs.z_canon_index)].T
        dt = lin0.weight.dtype
        self.register_buffer("w0", w[:, torch.as_tensor(obs.canon_index)].to(dt).contiguous())
        self.register_buffer("b0", bias.to(dt).contiguous())  # [rows, H]
        self.rest = nn.Sequential(*layers[1:])

    def forward(self, z: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.rest(torch.addmm(self.b0[row], z, self.w0.t())))


class FastRawPolicy(nn.Module):
    """Raw MuJoCo-convention state + time_step -> actions, joint targets, reference frame (float32)."""

    def __init__(self, om: ObservationModule, robot: RobotSpec, norm: dict[str, Any], actor: Actor) -> None:
        super().__init__()
        self.obs = FastObservation(om, robot, norm["mean"], norm["std"], float(norm["clip"]))
        self.actor = FastActor(actor, self.obs)
        self.obs_dim = om.obs_dim
        f32 = torch.float32
        self.register_buffer("offset", torch.as_tensor(robot.default_joint_pos, dtype=f32))
        self.register_buffer("scale", torch.as_tensor(robot.action_scale, dtype=f32))
        self.register_buffer("lo", torch.as_tensor(robot.joint_range[:, 0], dtype=f32))
        self.register_buffer("hi", torch.as_tensor(robot.joint_range[:, 1], dtype=f32))
        t, fmax = om.num_frames, self.obs.max_future
        steps = np.r_[np.arange(t), np.arange(-fmax, 0)]
        cur = torch.as_tensor(np.clip(steps, 0, t - 1))
        for k in FRAME_ARRAYS:
            self.register_buffer(f"ref_{k}", getattr(om, f"ref_{k}")[cur].to(f32).clone())

    def forward(self, base_pos, base_quat, base_lin_vel, base_ang_vel, joint_pos, joint_vel, time_step):
        inputs = {"base_pos": base_pos, "base_quat": base_quat, "base_lin_vel": base_lin_vel,
                  "base_ang_vel": base_ang_vel, "joint_pos": joint_pos, "joint_vel": joint_vel}  # fmt: skip
        row = self.obs.row_index(time_step)
        action = self.actor(self.obs(inputs, row).to(self.actor.w0.dtype), row)
        target = torch.minimum(torch.maximum(self.offset + self.scale * action, self.lo), self.hi)
        return (action, target) + tuple(getattr(self, f"ref_{k}")[row] for k in FRAME_ARRAYS)
