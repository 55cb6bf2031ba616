"""The raw-state policy as a lean ONNX graph: few nodes, small first layer (onnxruntime pays ~0.3-0.5 us
per node at batch 1, and the actor's weights are streamed from L3 on every call).

``FastRawPolicy`` computes exactly the training pipeline ``ObservationModule -> RunningNormalizer ->
Actor.deterministic`` (and the joint targets and reference frame of the raw signature), restructured
for a small graph. The observation is computed in ``dtype`` (float32 by default; the exporter falls
back to float64 when float32 misses the parity tolerance, see below), the actor in float32.

How the graph differs from ``ObservationModule`` (same values; float64 differences ~1e-14):

- Forward kinematics relative to the root in quaternions. The product of the local rotations of
  ``chain`` (3) consecutive ancestors is a sum of sinusoids of joint-angle combinations (product to
  sum: 4 terms per component for 3 hinges), so one Gemm (angles, phases folded into its bias), one
  Sin and one Mul (amplitudes) give every node's 3-chain; pointer jumping then composes them
  (3 -> 6 -> 12 >= depth 10 of the G1 tree: two rounds of one row Gather, one same-shape Mul and
  matmuls with constants, ``p * q = ((q @ W) * (p @ E)) @ S``). Body rotation columns are quadratic and
  the key points (body origins chained, plus offsets) linear in the products ``q_a q_b`` of all
  nodes: two matmuls with constants. The root rotation then turns the body columns, key points and
  angular velocity into the world frame, and one heading rotation turns them, the linear velocity
  and the reference root offsets into the heading frame: no world position is subtracted from
  another except reference minus robot position (as the definition does).
- The reference terms come from tables indexed by the clamped time step (one row per current step
  ``t``, holding frames ``t+1..t+F``, rows for ``t = -F..-1`` stored at the end so a negative index
  reaches them; one GatherND each, no index reshape). The z components of the reference direction
  vectors do not depend on the robot state: their normalised values times the actor's first-layer
  weights are folded, per step, into that layer's bias. The xy components are ``c X[t] + s Y[t]``
  (heading cosine and sine); for those whose normaliser clamp can never act (``sqrt(X^2 + Y^2) +
  |mean| <= clip * std`` on every row: the value is linear in (c, s)), the normalised value times the
  first-layer weights is folded into two more per-step bias vectors, so the bias is
  ``(c, -s, 1) @ [Bc; -Bs; B0][t]`` (one matmul with a gathered row) and those entries leave the actor's
  input; the others are computed from the same gathered row. The root's x axis seen in the heading
  frame has y = 0 exactly (root_rot[1], body_rot[1] of the pelvis): constant entries, folded too
  (their weight columns are zero). On the trained dance policy the first layer has 302 input columns
  (298 weighted observation entries, base_pos x, y and those two with zero weight; was 648): it
  streams 0.62 MB of weights per call instead of 1.33 MB.
- The reference frame outputs are gathered from float32 tables with the same index.

Precision: in float32 the observation's rounding is amplified by the normaliser's 1/std (up to 316
for nearly constant entries). The structurally constant entries are folded, so what remains is the
kinematics' own float32 rounding (~3e-7 on unit vectors). Measured, onnxruntime vs torch (vs the same
module in float64): 4.6e-6 (4.7e-6) on the trained dance policy, 6.9e-6 (6.6e-6) on the export tests'
untrained policy; tolerance 1e-5 for both. ``dtype=torch.float64`` is the same graph in float64
(~15 us slower per call: onnxruntime's float64 matmuls and Sin are slower); the exporter uses it when
the float32 graph misses the tolerance.

``observation(...)`` returns the full 849-entry observation in the training layout, computed by a
float64 twin of the module (tests compare it with ``ObservationModule``).

Where a single-input call's time goes (``bench/onnx_latency.py`` anatomy, 2-core EPYC, 1 thread, p50):
the call itself 2.6 us; this observation alone 27.7 us (56 nodes at ~0.34 us each, plus the Sin and
matmuls); the actor and joint-target head alone 27.2 us (1.29 MB of float32 weights, more than the 1 MB
L2, so they stream from L3 on every call); the whole raw graph 61 us. The 8.7 us above the sum of the
parts: the reference-frame outputs (~2.4 us) and the observation running after the actor has pushed
its constants and onnxruntime's per-node state out of L2 (measured: 27.6 us alone, 33.5 us right
after an actor call).
"""

from __future__ import annotations

from typing import Any

import mujoco
import numpy as np
import torch
from torch import nn

from bcg_deploy.observations.kinematics import ROT_QUADRATIC
from bcg_deploy.observations.paper import FRAME_ARRAYS, ObservationModule
from bcg_deploy.robots import RobotSpec
from bcg_deploy.rotations import quat_numpy as quat
from bcg_deploy.training.networks import Actor

_X = ("base_pos", "base_quat", "base_lin_vel", "base_ang_vel", "joint_pos", "joint_vel")
CHAIN = 3


class _RowGather(torch.autograd.Function):
    """``table[index[:, 0]]`` for an index [B, 1]: exported as one GatherND (no index Reshape)."""

    @staticmethod
    def forward(ctx, table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return table[index[:, 0]]

    @staticmethod
    def symbolic(g, table, index):
        return g.op("GatherND", table, index)


def gather_rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Rows of ``table`` at ``index`` [B, 1] (negative rows count from the end)."""
    return _RowGather.apply(table, index)


# ---------------------------------------------------------------------------------------- trig sums
# A quaternion-valued trigonometric polynomial of the half joint angles u = theta / 2: a dict
# {frequency (int tuple over joints): (a [4], b [4])} meaning sum_f a_f cos(f . u) + b_f sin(f . u), with
# frequencies kept canonical (first nonzero entry positive).


def _add_term(out: dict, f: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    nz = np.flatnonzero(f)
    if nz.size == 0:
        b = np.zeros(4)  # sin(0) = 0
    elif f[nz[0]] < 0:
        f, b = -f, -b  # cos even, sin odd
    key = tuple(int(v) for v in f)
    a0, b0 = out.get(key, (np.zeros(4), np.zeros(4)))
    out[key] = (a0 + a, b0 + b)


def _trig_mul(p: dict, q: dict) -> dict:
    """Quaternion product ``p * q`` of two trigonometric polynomials (product-to-sum formulas)."""
    out: dict = {}
    for f1, (a1, b1) in p.items():
        for f2, (a2, b2) in q.items():
            cc, ss = quat.mul(a1, a2) / 2, quat.mul(b1, b2) / 2
            cs, sc = quat.mul(a1, b2) / 2, quat.mul(b1, a2) / 2
            _add_term(out, np.add(f1, f2), cc - ss, cs + sc)  # cos x cos y - sin x sin y = cos(x + y) ...
            _add_term(out, np.subtract(f1, f2), cc + ss, sc - cs)
    return {k: v for k, v in out.items() if np.any(v[0] != 0) or np.any(v[1] != 0)}


def _left_mul_basis() -> np.ndarray:
    """[4, 16]: ``(q @ W)[4i + a] = (L(e_a) q)_i`` (L(p) q = p * q)."""
    lmat = np.zeros((4, 4, 4))
    for a in range(4):
        w, x, y, z = np.eye(4)[a]
        lmat[a] = [[w, -x, -y, -z], [x, w, -z, y], [y, z, w, -x], [z, -y, x, w]]
    return lmat.transpose(2, 1, 0).reshape(4, 16)


class FastObservation(nn.Module):
    """Raw state -> (the actor-visible observation entries, un-normalised, internal order; the folded
    first-layer bias). ``om`` supplies the kinematic constants and the reference clip; ``mean``,
    ``std``, ``clip`` are the folded normaliser statistics (training layout, 849 entries)."""

    def __init__(
        self,
        om: ObservationModule,
        robot: RobotSpec,
        mean: torch.Tensor,
        std: torch.Tensor,
        clip: float,
        dtype: torch.dtype = torch.float32,
        chain: int = CHAIN,
    ):
        super().__init__()
        self._twin_args = (om, robot, mean, std, clip, chain)  # a tuple: not a registered submodule
        kin = om.kinematics
        m = robot.load_model(scene=False)
        nb, nk, nj = kin.num_bodies, len(robot.key_bodies), robot.num_joints
        fut = om.future_steps
        nf = len(fut)
        self.num_frames, self.max_future = om.num_frames, max(fut)
        n = nb + 1  # nodes: the bodies (0 = root), then a copy of the root (root_rot beside body_rot[0])
        self._n, self._nk = n, nk

        def buf(name: str, a: Any, dt: torch.dtype = dtype) -> None:
            self.register_buffer(name, torch.as_tensor(np.asarray(a), dtype=dt), persistent=False)

        # ---- local rotations as trigonometric polynomials: hinge q = A cos(u) + B sin(u), welded q = C
        zero = (0,) * nj
        ident = {zero: (np.array([1.0, 0.0, 0.0, 0.0]), np.zeros(4))}
        parent = np.zeros(n, dtype=np.int64)
        local: list[dict] = [ident] * n
        lever = np.zeros((nb, nb, 3))  # lever[b, x]: p_b (root frame) = sum_x R_x lever[b, x]
        for b in range(1, nb):
            mb = b + 1  # MuJoCo body id
            bq = m.body_quat[mb] / np.linalg.norm(m.body_quat[mb])
            x = parent[b] = int(m.body_parentid[mb]) - 1
            lever[b] = lever[x]
            if m.body_jntnum[mb] == 0:  # welded: a constant local rotation
                local[b] = {zero: (bq, np.zeros(4))}
                lever[b, x] += m.body_pos[mb]
                continue
            j = int(m.body_jntadr[mb])
            if m.body_jntnum[mb] != 1 or m.jnt_type[j] != mujoco.mjtJoint.mjJNT_HINGE:
                raise ValueError(f"{robot.name}: body {robot.body_names[b]} needs one hinge or none")
            ax, anchor = m.jnt_axis[j], m.jnt_pos[j]
            f = np.zeros(nj, dtype=np.int64)
            f[int(m.jnt_qposadr[j]) - 7] = 1
            local[b] = {tuple(int(v) for v in f): (bq, quat.mul(bq, np.r_[0.0, ax]))}
            lever[b, x] += m.body_pos[mb] + quat.to_matrix(bq) @ anchor
            lever[b, b] -= anchor
        depth = np.zeros(n, dtype=np.int64)
        for b in range(1, n):
            depth[b] = depth[parent[b]] + 1

        def ancestor(k: int) -> np.ndarray:
            a = np.arange(n)
            for _ in range(k):
                a = parent[a]
            return a

        # ---- chain products P_n = q_{a^{L-1}(n)} ... q_{a(n)} q_n: per node, component i and term k,
        # amp * sin(freq . theta + phase)
        polys = []
        for node in range(n):
            p = ident
            for c in reversed([int(ancestor(k)[node]) for k in range(chain)]):
                p = _trig_mul(p, local[c])
            polys.append(p)
        t = max(len(p) for p in polys)
        freq, phase, amp = np.zeros((nj, n, 4, t)), np.zeros((n, 4, t)), np.zeros((n, 4, t))
        for node, p in enumerate(polys):
            for k, (f, (a, s)) in enumerate(sorted(p.items())):
                freq[:, node, :, k] = 0.5 * np.asarray(f)[:, None]  # u = theta / 2
                amp[node, :, k] = np.hypot(a, s)  # a cos w + s sin w = amp sin(w + phase)
                phase[node, :, k] = np.arctan2(a, s)
        self._t = t
        buf("_freq", freq.reshape(nj, -1))
        buf("_phase", phase.reshape(-1))
        buf("_amp", amp.reshape(-1))
        jumps, span = [], chain
        while span < depth.max():
            jumps.append(ancestor(span))
            span *= 2
        self._num_jumps = len(jumps)
        for i, jp in enumerate(jumps):
            self.register_buffer(f"_jump{i}", torch.as_tensor(jp), persistent=False)
        wq = _left_mul_basis()
        rep_a = np.tile(np.eye(4), (1, 4))  # [4, 16]: column 4i + a holds the a-th input
        rep_i = np.repeat(np.eye(4), 4, axis=1)  # [4, 16]: column 4i + a holds the i-th input
        sum_a = rep_i.T
        first = np.repeat(np.eye(4), t, axis=0)  # [4T, 4]: sums each component's T terms
        if jumps:
            buf("_to_w", first @ wq)
            buf("_to_e", first @ rep_a)
            first = sum_a
            buf("_sw", sum_a @ wq)
            buf("_se", sum_a @ rep_a)
        buf("_qq_i", first @ rep_i)
        buf("_qq_a", first @ rep_a)
        quad = np.zeros((16, 3, 3))  # R_ij = sum_ab quad[4a + b, i, j] q_a q_b (unit q)
        for (i, j), terms in ROT_QUADRATIC.items():
            for a, b, coef in terms:
                quad[4 * a + b, i, j] += coef
        buf("_q_to_6d", np.concatenate([quad[:, :, 0], quad[:, :, 1]], axis=1))  # columns 0 and 1
        mkey = np.zeros((n, 16, 3 * nk))  # key points (root frame): linear in q q^T of all nodes
        for i, kp in enumerate(robot.key_bodies):
            b = robot.body_names.index(kp.body)
            c = lever[b].copy()
            c[b] += kp.offset
            for xn in range(nb):
                mkey[xn, :, 3 * i : 3 * i + 3] = quad @ c[xn]
        buf("_q_to_key", mkey.reshape(16 * n, 3 * nk))
        # ---- root rotation R^T (flat, row-major) from the quaternion's outer product, / |q|^2
        q9 = np.zeros((16, 9))
        for (i, j), terms in ROT_QUADRATIC.items():
            for a, b, coef in terms:
                q9[4 * a + b, 3 * j + i] += coef  # R^T[j, i] = R[i, j]
        buf("_quad", q9)
        buf("_rep_i", rep_i)
        buf("_rep_a", rep_a)
        buf("_q_norm2", np.eye(4).reshape(16, 1))
        # heading H (rows: v^T H = (H^T v)^T) from (c, s): [[c, -s, 0], [s, c, 0], [0, 0, 1]]
        hk = np.zeros((2, 9))
        hk[0, 0], hk[0, 4], hk[1, 1], hk[1, 3] = 1.0, 1.0, -1.0, 1.0
        he = np.zeros(9)
        he[8] = 1.0
        buf("_h_cs", hk)
        buf("_h_const", he)
        buf("_h_fold", [[1.0, 0.0, 1.0]])  # [1, 0, 1] H = (c, -s, 1)
        # ---- reference tables, one row per current step t = 0..T-1, then t = -F..-1
        steps = np.r_[np.arange(self.num_frames), np.arange(-self.max_future, 0)]
        idx = np.clip(steps[:, None] + np.asarray(fut)[None], 0, self.num_frames - 1)  # [R, F]
        vec = om.ref_table.double().numpy()[idx][..., :3]  # [R, F, V, 3] homogeneous world vectors
        buf("_ref_pos", vec[:, :, 0])
        dirs = vec[:, :, 1:]  # [R, F, 2 NB + K, 3]: body columns (root first) and key offsets
        rows = len(steps)
        sl = om.term_slices()
        lay_rot, lay_body, lay_key = sl["ref_root_rot"], sl["ref_body_rot"], sl["ref_key_pos"]
        vec_index = []  # (canonical obs index of x, vector array [R, 3])
        for fr in range(nf):
            for v in range(2):
                vec_index.append((lay_rot.start + 6 * fr + 3 * v, dirs[:, fr, v]))
        for fr in range(nf):
            for v in range(2 * nb):
                vec_index.append((lay_body.start + 6 * nb * fr + 3 * v, dirs[:, fr, v]))
        for fr in range(nf):
            for v in range(nk):
                vec_index.append((lay_key.start + 3 * nk * fr + 3 * v, dirs[:, fr, 2 * nb + v]))
        nv = len(vec_index)
        cx, cy = np.zeros((rows, 2 * nv)), np.zeros((rows, 2 * nv))  # xy entry = c cx + s cy
        z_val = np.zeros((rows, nv))
        xy_canon, z_canon = [], []
        for i, (ci, arr) in enumerate(vec_index):
            cx[:, 2 * i], cy[:, 2 * i] = arr[:, 0], arr[:, 1]  # x' = c x + s y
            cx[:, 2 * i + 1], cy[:, 2 * i + 1] = arr[:, 1], -arr[:, 0]  # y' = c y - s x
            z_val[:, i] = arr[:, 2]
            xy_canon += [ci, ci + 1]
            z_canon.append(ci + 2)
        xy_canon = np.asarray(xy_canon, dtype=np.int64)
        self.z_canon_index = np.asarray(z_canon, dtype=np.int64)
        self.ref_z = torch.as_tensor(z_val)  # [R, NZ] float64, state independent
        mean64, std64 = mean.double().numpy(), std.double().numpy()
        self.mean64, self.std64, self.clip = mean64, std64, float(clip)
        # xy entries whose clamp can never act (|c cx + s cy - mean| <= sqrt(cx^2 + cy^2) + |mean| <= clip std
        # on every row, for every |(c, s)| <= 1): linear in (c, s), folded into the first layer's bias
        bound = np.sqrt(cx**2 + cy**2).max(0) + np.abs(mean64[xy_canon])
        lin = bound <= self.clip * std64[xy_canon] * (1.0 - 1e-9)
        self.lin_canon_index = xy_canon[lin]
        self.lin_cx, self.lin_cy = cx[:, lin], cy[:, lin]  # [R, NL] float64

        def fold_rows(a: np.ndarray, b: np.ndarray, const: np.ndarray) -> np.ndarray:
            return np.stack([a, -b, const], axis=1)  # (c, -s, 1) @ [a; -b; const] = c a + s b + const

        buf("_ref_xy", fold_rows(cx[:, ~lin], cy[:, ~lin], np.zeros((rows, int((~lin).sum())))))  # [R, 3, NX]
        self._ref_xy_full = torch.as_tensor(fold_rows(cx, cy, np.zeros_like(cx)))  # every xy entry
        self._xy_canon = xy_canon
        self.num_ref_xy = int((~lin).sum())
        # ---- internal order of the actor-visible entries -> canonical index (-1: base_pos x, y: zero weight)
        root_rot, body_rot, key_pos = sl["root_rot"].start, sl["body_rot"].start, sl["key_pos"].start
        canon = [-1, -1, sl["root_height"].start] + list(range(sl["joint_vel"].start, sl["joint_vel"].stop))
        for node in range(n):
            start = root_rot if node == nb else body_rot + 6 * node
            canon += list(range(start, start + 6))
        canon += list(range(key_pos, key_pos + 3 * nk))
        canon += list(range(sl["root_ang_vel"].start, sl["root_ang_vel"].stop))
        canon += list(range(sl["root_lin_vel"].start, sl["root_lin_vel"].stop))
        canon += list(range(sl["ref_root_pos"].start, sl["ref_root_pos"].stop))
        canon += xy_canon[~lin].tolist()
        self.canon_index = np.asarray(canon, dtype=np.int64)
        # the root's x axis in the heading frame has y = 0 exactly (c, s is its normalised xy): constant
        # entries, carried with zero weight and folded into the bias (their float32 rounding noise, ~1e-8,
        # times 1/std = 316 would otherwise reach the actions)
        self.zero_canon_index = np.asarray([root_rot + 1, body_rot + 1], dtype=np.int64)
        self.obs_dim = om.obs_dim
        cover = np.r_[self.canon_index[self.canon_index >= 0], self.z_canon_index, self.lin_canon_index]
        if sorted(cover.tolist()) != list(range(om.obs_dim)):
            raise ValueError("internal observation layout does not cover the training layout exactly once")
        vis = self.canon_index >= 0
        mv, sv = np.zeros(len(canon)), np.ones(len(canon))
        mv[vis], sv[vis] = mean64[self.canon_index[vis]], std64[self.canon_index[vis]]
        buf("_mean", mv)
        buf("_std", sv)
        self.n_head = 2 * n + nk + 2 + nf

    # ------------------------------------------------------------------ graph pieces

    def row_index(self, time_step: torch.Tensor) -> torch.Tensor:
        """Table row [B, 1] of the (truncated, clamped) time step (negative rows wrap to the table end)."""
        # truncate first, then clamp (as ObservationModule): a NaN or huge time step maps into the table
        return torch.clamp(time_step.long(), -self.max_future, self.num_frames - 1)

    def _kinematics(self, joint_pos: torch.Tensor) -> torch.Tensor:
        """[B, N, 16]: q_a q_b (at 4a + b) of every node's root-relative quaternion."""
        s = torch.sin(torch.addmm(self._phase, joint_pos, self._freq)) * self._amp
        s = s.reshape(-1, self._n, 4 * self._t)  # the chain products, as sinusoid terms per component
        prod = s
        for i in range(self._num_jumps):
            q_w, q_e = (s @ self._to_w, s @ self._to_e) if i == 0 else (prod @ self._sw, prod @ self._se)
            prod = q_w * q_e[:, getattr(self, f"_jump{i}")]  # summed over a: parent * child
        return (prod @ self._qq_i) * (prod @ self._qq_a)

    def features(
        self, inputs: dict[str, torch.Tensor], row: torch.Tensor, table: torch.Tensor, n_bias: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(un-normalised actor-visible entries [B, K], folded bias [B, n_bias]), in the buffers' dtype.

        ``table`` [R, 3, n_bias + NX]: per-row (c, -s, 1) coefficients of the bias (first ``n_bias``
        columns) and of the xy reference entries kept in the actor input (``self._ref_xy``)."""
        dt = self._freq.dtype
        x = {k: inputs[k] if inputs[k].dtype == dt else inputs[k].to(dt) for k in _X}
        qq = self._kinematics(x["joint_pos"])
        # root rotation R^T [B, 3, 3]; heading (c, s) from (R00, R10)
        qr = x["base_quat"]
        qqr = (qr @ self._rep_i) * (qr @ self._rep_a)
        rt = (qqr @ self._quad) / (qqr @ self._q_norm2)
        f = rt[:, 0:2]
        cs = f / torch.linalg.vector_norm(f, dim=-1, keepdim=True).clamp_min(1e-6)  # = f / sqrt(max(|f|^2, 1e-12))
        h = torch.addmm(self._h_const, cs, self._h_cs).reshape(-1, 3, 3)
        cols = (qq @ self._q_to_6d).reshape(-1, 6 * self._n)
        keys = qq.reshape(-1, 16 * self._n) @ self._q_to_key
        vecs = torch.cat((cols, keys, x["base_ang_vel"]), dim=-1).reshape(-1, 2 * self._n + self._nk + 1, 3)
        world = vecs @ rt.reshape(-1, 3, 3)
        dp = gather_rows(self._ref_pos, row) - x["base_pos"].reshape(-1, 1, 3)
        head = torch.cat((world, x["base_lin_vel"].reshape(-1, 1, 3), dp), dim=1) @ h
        width = table.shape[-1]
        tab = gather_rows(table, row)
        folded = (self._h_fold @ h @ (tab if tab.dtype == dt else tab.to(dt))).reshape(-1, width)
        parts = [x["base_pos"], x["joint_vel"], head.reshape(-1, 3 * self.n_head)]
        if width > n_bias:
            bias, ref = folded.split([n_bias, width - n_bias], dim=-1)
            parts.append(ref)
        else:
            bias = folded
        return torch.cat(parts, dim=-1), bias

    def normalise(self, z: torch.Tensor) -> torch.Tensor:
        return torch.clamp((z - self._mean) / self._std, -self.clip, self.clip)

    def observation(self, inputs: dict[str, torch.Tensor], time_step: torch.Tensor) -> torch.Tensor:
        """The full observation [B, 849], training layout (un-normalised), computed by a float64 twin."""
        twin = FastObservation(*self._twin_args[:5], dtype=torch.float64, chain=self._twin_args[5])
        row = twin.row_index(time_step)
        with torch.no_grad():
            z, _ = twin.features(inputs, row, twin._ref_xy_full, 0)
        nvis = len(self.canon_index) - self.num_ref_xy
        keep = np.flatnonzero(self.canon_index[:nvis] >= 0)
        obs = torch.zeros(row.shape[0], self.obs_dim, dtype=torch.float64)
        obs[:, torch.as_tensor(self.canon_index[keep])] = z[:, torch.as_tensor(keep)]
        obs[:, torch.as_tensor(self._xy_canon)] = z[:, nvis:]
        obs[:, torch.as_tensor(self.z_canon_index)] = self.ref_z[row[:, 0]]
        return obs


class FastActor(nn.Module):
    """``Actor.deterministic`` on the actor-visible entries; the folded entries in a per-row bias table."""

    def __init__(self, actor: Actor, obs: FastObservation) -> None:
        super().__init__()
        layers = list(actor.body) + [actor.mu]  # Linear, ELU, LayerNorm, ..., mu (mu alone without hidden)
        lin0 = layers[0]
        w = lin0.weight.detach().double().numpy()  # [H, 849]
        mean, std, clip = obs.mean64, obs.std64, obs.clip
        rows = obs.ref_z.shape[0]
        b0 = np.broadcast_to(lin0.bias.detach().double().numpy(), (rows, w.shape[0])).copy()
        zc, zero, lc = obs.z_canon_index, obs.zero_canon_index, obs.lin_canon_index
        b0 += np.clip((obs.ref_z.numpy() - mean[zc]) / std[zc], -clip, clip) @ w[:, zc].T
        b0 += np.clip((0.0 - mean[zero]) / std[zero], -clip, clip) @ w[:, zero].T
        wl = w[:, lc] / std[lc]
        b0 -= mean[lc] @ wl.T
        bc, bs = obs.lin_cx @ wl.T, obs.lin_cy @ wl.T  # the folded xy entries: c bc + s bs
        w0 = np.zeros((w.shape[0], len(obs.canon_index)))
        live = np.flatnonzero((obs.canon_index >= 0) & ~np.isin(obs.canon_index, zero))
        w0[:, live] = w[:, obs.canon_index[live]]
        table = np.concatenate([np.stack([bc, -bs, b0], axis=1), obs._ref_xy.double().numpy()], axis=-1)
        self.register_buffer("w0", torch.as_tensor(w0, dtype=lin0.weight.dtype))
        self.register_buffer("table", torch.as_tensor(table, dtype=obs._freq.dtype))  # [R, 3, H + NX]
        self.hidden = int(w.shape[0])
        self.rest = nn.Sequential(*layers[1:])

    def forward(self, z: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.rest(torch.addmm(bias, z, self.w0.t())))


class FastRawPolicy(nn.Module):
    """Raw MuJoCo-convention state + time_step -> actions, joint targets, reference frame (float32 I/O).

    ``dtype``: the observation's precision (float32, or float64 for the exporter's fallback)."""

    def __init__(
        self,
        om: ObservationModule,
        robot: RobotSpec,
        norm: dict[str, Any],
        actor: Actor,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.obs = FastObservation(om, robot, norm["mean"], norm["std"], float(norm["clip"]), dtype)
        self.actor = FastActor(actor, self.obs)
        self.obs_dim = om.obs_dim
        f32 = torch.float32
        self.register_buffer("offset", torch.as_tensor(robot.default_joint_pos, dtype=f32))
        self.register_buffer("scale", torch.as_tensor(np.diag(robot.action_scale), dtype=f32))  # diagonal
        self.register_buffer("lo", torch.as_tensor(robot.joint_range[:, 0], dtype=f32))
        self.register_buffer("hi", torch.as_tensor(robot.joint_range[:, 1], dtype=f32))
        t, fmax = om.num_frames, self.obs.max_future
        steps = np.r_[np.arange(t), np.arange(-fmax, 0)]
        cur = torch.as_tensor(np.clip(steps, 0, t - 1))
        for k in FRAME_ARRAYS:
            self.register_buffer(f"ref_{k}", getattr(om, f"ref_{k}")[cur].to(f32).clone())

    def actor_input(
        self, inputs: dict[str, torch.Tensor], time_step: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(normalised actor-visible entries, first-layer bias, both in the actor's dtype; table row [B, 1])."""
        row = self.obs.row_index(time_step)
        z, bias = self.obs.features(inputs, row, self.actor.table, self.actor.hidden)
        z = self.obs.normalise(z)
        adt = self.actor.w0.dtype
        return (z if z.dtype == adt else z.to(adt)), (bias if bias.dtype == adt else bias.to(adt)), row

    def act(self, z: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(actions, joint position targets clipped to the joint limits) from ``actor_input``'s output."""
        action = self.actor(z, bias)
        adt = action.dtype
        # one Gemm: offset + action @ diag(scale)
        target = torch.addmm(self.offset.to(adt), action, self.scale.to(adt))
        return action, torch.minimum(torch.maximum(target, self.lo), self.hi)

    def forward(self, base_pos, base_quat, base_lin_vel, base_ang_vel, joint_pos, joint_vel, time_step):
        inputs = {"base_pos": base_pos, "base_quat": base_quat, "base_lin_vel": base_lin_vel,
                  "base_ang_vel": base_ang_vel, "joint_pos": joint_pos, "joint_vel": joint_vel}  # fmt: skip
        z, bias, row = self.actor_input(inputs, time_step)
        action, target = self.act(z, bias)
        return (action, target) + tuple(gather_rows(getattr(self, f"ref_{k}"), row) for k in FRAME_ARRAYS)
