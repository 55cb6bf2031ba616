"""The 849-dim policy/critic observation (METHOD.md section 6) as ONE torch module.

API summary (for training / export):

- ``ObservationModule(robot, motion_arrays, future_steps=(1, 2, 3), dtype=torch.float32)``: an
  ``nn.Module`` holding the reference clip as buffers (``motion_arrays``: a ``Motion`` or a mapping
  with at least ``root_pos``, ``root_quat``, ``body_pos_w``, ``body_quat_w``, and for
  ``reference_frame`` also ``joint_pos``, ``joint_vel``, ``body_lin_vel_w``, ``body_ang_vel_w``;
  numpy arrays or tensors, Motion layout).
- ``forward(q, qd, time_step, transforms=None) -> obs [B, 849]``: ``q`` [B, 36], ``qd`` [B, 35] (MuJoCo layout: base
  linear velocity world, base angular velocity BODY frame), ``time_step`` [B] or [B, 1] (int or float,
  truncated to an integer) = index of the CURRENT reference frame t; the observation shows frames
  t+1, t+2, t+3, each clamped to the last frame of the clip. Noise-free and deterministic (critic
  input, ONNX export); the actor's training input is ``add_noise(obs)``.
- ``add_noise(obs, generator=None)``: obs + U(-n, n) per entry (n = ``noise_vector``, per term).
- ``robot_terms(q, qd)``: dict of the robot-only terms + ``heading_transform`` [B, 4, 4] (world ->
  heading frame) + ``transforms`` [B, 30, 4, 4] (world body transforms, reusable, e.g. ADD features).
- ``heading_transform(root_transform)``: world -> robot heading frame (see Frames below).
- ``reference_frame(time_step)``: dict of the clip at the clamped frame t (``joint_pos``, ``joint_vel``,
  ``body_pos_w``, ``body_quat_w`` w-first, ``body_lin_vel_w``, ``body_ang_vel_w``).
- ``terms`` (tuple of ``ObsTerm``), ``spec()`` (JSON-able list: name, size, offset, noise, units, frame,
  future_steps, description), ``obs_dim``, ``noise_vector`` (buffer [obs_dim]).
- ``make_obs_terms(num_bodies, num_joints, num_key_points, future_steps)``: the declaration itself.
- ``raw_input_noise(spec_or_terms)``: obs-term noise mapped onto the raw ONNX inputs (sim2sim).

Frames (all robot-centred terms use the robot's HEADING frame H = yaw-only rotation of the root,
whose x axis is the world-xy direction of the pelvis x axis; positions are relative to the robot root):

| term | size | definition | noise U(-n, n) |
|---|---|---|---|
| root_height | 1 | root z, world, m | 0.01 m (decision: METHOD lists no level; a position, as key_pos) |
| root_rot | 6 | 6D of H^T R_root | 0.05 rad |
| root_lin_vel | 3 | H^T v_root(world), m/s | 0.5 m/s |
| root_ang_vel | 3 | H^T R_root w_root(body), rad/s | 0.2 rad/s |
| body_rot | 180 | 6D of H^T R_b, 30 bodies (body_names order) | 0.01 rad |
| joint_vel | 29 | hinge rates, rad/s | 0.5 rad/s |
| key_pos | 15 | H^T (p_k - p_root), 5 key points, m | 0.01 m |
| ref_root_pos | 3x3 | H^T (p_ref_root(t+k) - p_root), m | 0.25 m |
| ref_root_rot | 3x6 | 6D of H^T R_ref_root(t+k) | 0 |
| ref_body_rot | 3x180 | 6D of H^T R_ref_b(t+k) | 0 |
| ref_key_pos | 3x15 | H^T (p_ref_k(t+k) - p_ref_root(t+k)), m | 0 |

The ref terms are term-major: [t+1 | t+2 | t+3] inside each term. 6D rotation = the first two
columns of the rotation matrix, column 0 then column 1 (called "tangent-normal" in our docs; note
MimicKit's tan_norm uses columns 0 and 2). Noise is additive on the observation entries, in the
term's units (a 6D entry perturbed by n is a rotation error of about n rad). METHOD's list
(0.05 rad, 0.5 m/s, 0.2 rad/s, 0.01 rad, 0.5 rad/s, 0.01 m, ref root position 0.25 m) maps in order
onto root_rot, root_lin_vel, root_ang_vel, body_rot, joint_vel, key_pos, ref_root_pos; the reference
rotation/key terms carry no sensor noise of their own (decision).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from bcg_deploy.observations.kinematics import Kinematics
from bcg_deploy.profiles.declarations import FUTURE_STEPS, ObsTerm, make_obs_terms, term_spec
from bcg_deploy.robots import RobotSpec
from bcg_deploy.rotations.quat_torch import quat_to_mat


def _terms_from(spec_or_terms: Sequence[ObsTerm] | Sequence[Mapping[str, Any]]) -> dict[str, float]:
    return {(t.name if isinstance(t, ObsTerm) else t["name"]): float(t.noise if isinstance(t, ObsTerm) else t["noise"])
            for t in spec_or_terms}  # fmt: skip


def raw_input_noise(spec_or_terms: Sequence[ObsTerm] | Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Noise levels U(-n, n) on the raw inputs that correspond to the observation-term noise.

    Returns ``{"base_pos": [nx, ny, nz] (m, world; xy from ref_root_pos, z from root_height),
    "base_quat": n (rad; rotation-vector components U(-n, n) composed on the body side,
    q_meas = q * exp(dtheta)), "base_lin_vel": n (m/s, world), "base_ang_vel": n (rad/s, body),
    "joint_pos": n (rad; body_rot noise = joint-angle error), "joint_vel": n (rad/s)}``.
    Scalars apply to every component.
    """
    n = _terms_from(spec_or_terms)
    return {
        "base_pos": [n["ref_root_pos"], n["ref_root_pos"], n["root_height"]],
        "base_quat": n["root_rot"],
        "base_lin_vel": n["root_lin_vel"],
        "base_ang_vel": n["root_ang_vel"],
        "joint_pos": n["body_rot"],
        "joint_vel": n["joint_vel"],
    }


REQUIRED_ARRAYS = ("root_pos", "root_quat", "body_pos_w", "body_quat_w")
FRAME_ARRAYS = ("joint_pos", "joint_vel", "body_pos_w", "body_quat_w", "body_lin_vel_w", "body_ang_vel_w")


def motion_array(arrays: Any, key: str) -> torch.Tensor | None:
    """``arrays[key]`` (a mapping) or ``arrays.key`` (a ``Motion``) as a float64 CPU tensor; None when absent."""
    v = arrays.get(key) if isinstance(arrays, Mapping) else getattr(arrays, key, None)
    if v is None:
        return None
    return torch.as_tensor(np.asarray(v.detach().cpu() if isinstance(v, torch.Tensor) else v, dtype=np.float64))


class ObservationModule(nn.Module):
    """Raw state + baked reference clip -> observation; see the module docstring."""

    def __init__(
        self,
        robot: RobotSpec,
        motion_arrays: Any,
        future_steps: Sequence[int] = FUTURE_STEPS,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.kinematics = Kinematics(robot, torch.float64)
        nb, nj, nk = self.kinematics.num_bodies, robot.num_joints, len(robot.key_bodies)
        self.terms = make_obs_terms(nb, nj, nk, future_steps)
        self.future_steps = tuple(int(k) for k in future_steps)
        self.obs_dim = sum(t.size for t in self.terms)
        arr = {k: motion_array(motion_arrays, k) for k in REQUIRED_ARRAYS + FRAME_ARRAYS}
        missing = [k for k in REQUIRED_ARRAYS if arr[k] is None]
        if missing:
            raise ValueError(f"motion arrays lack {', '.join(missing)}")
        root_pos, body_pos, body_quat = arr["root_pos"], arr["body_pos_w"], arr["body_quat_w"]
        num_frames = int(root_pos.shape[0])
        if body_pos.shape != (num_frames, nb, 3) or body_quat.shape != (num_frames, nb, 4):
            raise ValueError(f"motion body arrays must be [T, {nb}, 3|4], got {tuple(body_pos.shape)}")
        self.num_frames = num_frames
        body_mat = quat_to_mat(body_quat / body_quat.norm(dim=-1, keepdim=True))
        key_w = self.kinematics.key_points(body_pos, body_mat)
        # Reference table [T, 1 + 2 NB + K, 4] of homogeneous world vectors, turned into the robot's
        # heading frame by ONE matmul at run time: the root position (a point, w = 1), the first two
        # columns of every body rotation and the key points relative to the root (directions, w = 0).
        cols = body_mat[..., :, :2].transpose(-1, -2).reshape(num_frames, 2 * nb, 3)
        vecs = torch.cat((root_pos[:, None], cols, key_w - root_pos[:, None]), dim=1)
        w = torch.zeros(vecs.shape[:2] + (1,), dtype=torch.float64)
        w[:, 0] = 1.0
        self.register_buffer("ref_table", torch.cat((vecs, w), dim=-1))
        self.register_buffer("ref_root_pos", root_pos)
        self._nb, self._nk = nb, nk
        # H^T (yaw-only, homogeneous, flat 16) from (cos, sin) of the heading, and Trans(-p) from p.
        cs = torch.zeros(2, 16, dtype=torch.float64)
        cs[0, 0], cs[0, 5], cs[1, 1], cs[1, 4] = 1.0, 1.0, 1.0, -1.0
        const = torch.zeros(16, dtype=torch.float64)
        const[10], const[15] = 1.0, 1.0
        neg = torch.zeros(3, 16, dtype=torch.float64)
        neg[0, 3], neg[1, 7], neg[2, 11] = -1.0, -1.0, -1.0
        self.register_buffer("_cs_to_ht", cs, persistent=False)
        self.register_buffer("_ht_const", const, persistent=False)
        self.register_buffer("_neg_trans", neg, persistent=False)
        self.register_buffer("_eye16", torch.eye(4, dtype=torch.float64).reshape(16), persistent=False)
        for k in FRAME_ARRAYS:
            if arr[k] is not None:
                self.register_buffer(f"ref_{k}", arr[k])
        self.register_buffer("_future", torch.as_tensor(self.future_steps, dtype=torch.long), persistent=False)
        noise = torch.cat([torch.full((t.size,), t.noise, dtype=torch.float64) for t in self.terms])
        self.register_buffer("noise_vector", noise)
        self.to(dtype)

    # ------------------------------------------------------------------ declaration

    def spec(self) -> list[dict[str, Any]]:
        """JSON-able term list with offsets (what run.pt and the ONNX metadata store)."""
        return term_spec(self.terms)

    def term_slices(self) -> dict[str, slice]:
        out, off = {}, 0
        for t in self.terms:
            out[t.name] = slice(off, off + t.size)
            off += t.size
        return out

    # ------------------------------------------------------------------ computation

    def _frame_index(self, time_step: torch.Tensor, steps: torch.Tensor | None) -> torch.Tensor:
        t = time_step.reshape(-1).to(torch.long)
        idx = t[:, None] if steps is None else t[:, None] + steps
        return idx.clamp(0, self.num_frames - 1)

    def heading_transform(self, root: torch.Tensor) -> torch.Tensor:
        """World -> robot heading frame [B, 4, 4]: T_h = [H^T, -H^T p_root; 0 1] from the root transform
        [B, 4, 4]; H = yaw-only rotation whose x axis is the world-xy direction of the root x axis."""
        b = root.shape[0]
        f = root[:, 0:2, 0]
        cs = f * torch.rsqrt((f * f).sum(-1, keepdim=True).clamp_min(1e-12))
        ht = (cs @ self._cs_to_ht + self._ht_const).reshape(b, 4, 4)
        trans = (root[:, 0:3, 3] @ self._neg_trans + self._eye16).reshape(b, 4, 4)
        return ht @ trans

    def _robot(
        self, q: torch.Tensor, qd: torch.Tensor, transforms: torch.Tensor | None = None
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
        a = self.kinematics.transforms(q) if transforms is None else transforms  # [B, NB, 4, 4] world
        b = q.shape[0]
        th = self.heading_transform(a[:, 0])
        m = th[:, None] @ a  # bodies in the heading frame, origins relative to the root
        body6 = m[..., :3, :2].transpose(-1, -2).reshape(b, -1)
        key = self.kinematics.key_points_from_transforms(m)
        terms = {
            "root_height": q[:, 2:3],
            "root_rot": body6[:, :6],
            "root_lin_vel": (th[:, :3, :3] @ qd[:, 0:3, None]).reshape(b, 3),
            "root_ang_vel": (m[:, 0, :3, :3] @ qd[:, 3:6, None]).reshape(b, 3),
            "body_rot": body6,
            "joint_vel": qd[:, 6:],
            "key_pos": key.reshape(b, -1),
        }
        return terms, th, a

    def robot_terms(self, q: torch.Tensor, qd: torch.Tensor) -> dict[str, torch.Tensor]:
        """Robot-only terms (flattened per env) plus ``heading_transform`` [B, 4, 4] (world -> heading
        frame) and ``transforms`` [B, NB, 4, 4] (world body transforms)."""
        terms, th, a = self._robot(q, qd)
        return {**terms, "heading_transform": th, "transforms": a}

    def forward(
        self, q: torch.Tensor, qd: torch.Tensor, time_step: torch.Tensor, transforms: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Observation [B, obs_dim] (noise-free); frames t+k clamped to the clip end. ``transforms``: the
        world body transforms of ``q`` [B, NB, 4, 4] when the caller already has them (one FK, reused)."""
        terms, th, _ = self._robot(q, qd, transforms)
        b = q.shape[0]
        idx = self._frame_index(time_step, self._future)  # [B, F]
        nf, nb = idx.shape[1], self._nb
        ref = (self.ref_table[idx] @ th[:, None].transpose(-1, -2))[..., :3]  # [B, F, 1 + 2 NB + K, 3]
        terms["ref_root_pos"] = ref[:, :, 0].reshape(b, 3 * nf)
        terms["ref_root_rot"] = ref[:, :, 1:3].reshape(b, 6 * nf)
        terms["ref_body_rot"] = ref[:, :, 1 : 1 + 2 * nb].reshape(b, 6 * nb * nf)
        terms["ref_key_pos"] = ref[:, :, 1 + 2 * nb :].reshape(b, 3 * self._nk * nf)
        return torch.cat([terms[t.name] for t in self.terms], dim=-1)

    def add_noise(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """obs + U(-n, n) per entry (training-time sensor noise of the actor input)."""
        u = torch.rand(obs.shape, generator=generator, dtype=obs.dtype, device=obs.device)
        return obs + (2.0 * u - 1.0) * self.noise_vector

    def reference_frame(self, time_step: torch.Tensor) -> dict[str, torch.Tensor]:
        """The clip at the clamped current frame t: Motion arrays per env (w-first quaternions)."""
        idx = self._frame_index(time_step, None)[:, 0]
        out = {}
        for k in FRAME_ARRAYS:
            buf = getattr(self, f"ref_{k}", None)
            if buf is None:
                raise ValueError(f"motion arrays lack {k}")
            out[k] = buf[idx]
        return out
