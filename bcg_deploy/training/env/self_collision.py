"""Differentiable self-penetration of the robot's collision capsules and spheres (a training penalty).

The training simulator's contact model covers the soles and the floor only; the robot's body does collide
with itself, and MuJoCo replays (ours, mjlab's model) do too. A policy that never paid for crossing its
legs learns gaits whose foot meets the other shin, which MuJoCo turns into a trip. The penalty makes those
poses cost something in the simulator we differentiate through.

Geometry: every sphere and capsule of the MJCF that takes part in contacts is a segment (a sphere's has
length 0) with a radius, fixed in its body frame. The pairs are the ones MuJoCo itself would test between
two bodies of the robot: contype / conaffinity compatible, not in one body, not parent and child
(MuJoCo's parent filter), not excluded by the model's ``<exclude>``. Penetration of a pair is
``max(0, r1 + r2 - d)`` with ``d`` the closest distance between the two segments (Ericson, Real-Time
Collision Detection 5.1.9, clamped form), which for these shapes equals MuJoCo's contact depth.
"""

from __future__ import annotations

import mujoco
import numpy as np
import torch
from torch import nn

_SPHERE, _CAPSULE = int(mujoco.mjtGeom.mjGEOM_SPHERE), int(mujoco.mjtGeom.mjGEOM_CAPSULE)


def self_collision_pairs(m: mujoco.MjModel) -> list[tuple[int, int]]:
    """Geom id pairs (sphere or capsule, both on robot bodies) that MuJoCo's broad phase would pass to
    narrow phase between two bodies of the robot, ignoring distance; see the module docstring."""
    geoms = [
        g
        for g in range(m.ngeom)
        if m.geom_bodyid[g] != 0
        and int(m.geom_type[g]) in (_SPHERE, _CAPSULE)
        and (m.geom_contype[g] or m.geom_conaffinity[g])
    ]
    excluded = {(int(s) >> 16, int(s) & 0xFFFF) for s in m.exclude_signature[: m.nexclude]}
    pairs = []
    for i, a in enumerate(geoms):
        for b in geoms[i + 1 :]:
            ba, bb = int(m.geom_bodyid[a]), int(m.geom_bodyid[b])
            if ba == bb or m.body_weldid[ba] == m.body_weldid[bb]:
                continue
            if m.body_parentid[ba] == bb or m.body_parentid[bb] == ba:
                continue
            if not (m.geom_contype[a] & m.geom_conaffinity[b] or m.geom_contype[b] & m.geom_conaffinity[a]):
                continue
            if (min(ba, bb), max(ba, bb)) in excluded:
                continue
            pairs.append((a, b))
    return pairs


def segment_distance(p1: torch.Tensor, q1: torch.Tensor, p2: torch.Tensor, q2: torch.Tensor) -> torch.Tensor:
    """Closest distance between segments p1-q1 and p2-q2 ([..., 3] each; a point is a segment of length 0),
    differentiable wherever the closest points are unique."""
    eps = 1e-12
    d1, d2, r = q1 - p1, q2 - p2, p1 - p2
    a, e = (d1 * d1).sum(-1), (d2 * d2).sum(-1)
    b, c, f = (d1 * d2).sum(-1), (d1 * r).sum(-1), (d2 * r).sum(-1)
    a_safe, e_safe = a.clamp_min(eps), e.clamp_min(eps)
    denom = a * e - b * b
    s = torch.where(denom > eps, ((b * f - c * e) / denom.clamp_min(eps)).clamp(0, 1), torch.zeros_like(a))
    t = (b * s + f) / e_safe
    s = torch.where(t < 0, (-c / a_safe).clamp(0, 1), torch.where(t > 1, ((b - c) / a_safe).clamp(0, 1), s))
    t = t.clamp(0, 1)
    s = torch.where(a <= eps, torch.zeros_like(s), s)  # first segment a point
    t = torch.where(a <= eps, (f / e_safe).clamp(0, 1), t)
    t = torch.where(e <= eps, torch.zeros_like(t), t)  # second segment a point
    s = torch.where((e <= eps) & (a > eps), (-c / a_safe).clamp(0, 1), s)
    gap = p1 + d1 * s[..., None] - p2 - d2 * t[..., None]
    return (gap.square().sum(-1) + eps).sqrt()


class SelfCollision(nn.Module):
    """Per-pair self-penetration [B, P] (m) from world body transforms [B, NB, 4, 4] (``Kinematics.transforms``,
    bodies in MuJoCo order without the world body)."""

    def __init__(self, m: mujoco.MjModel, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        pairs = self_collision_pairs(m)
        self.num_pairs = len(pairs)
        geoms = sorted({g for pair in pairs for g in pair})
        slot = {g: i for i, g in enumerate(geoms)}
        ends = np.zeros((len(geoms), 2, 4))
        for i, g in enumerate(geoms):
            axis = np.zeros(9)
            mujoco.mju_quat2Mat(axis, m.geom_quat[g])
            half = m.geom_size[g, 1] if int(m.geom_type[g]) == _CAPSULE else 0.0
            for k, sign in enumerate((-1.0, 1.0)):
                ends[i, k, :3] = m.geom_pos[g] + sign * half * axis.reshape(3, 3)[:, 2]
                ends[i, k, 3] = 1.0
        self.register_buffer("_ends", torch.as_tensor(ends, dtype=dtype))
        self.register_buffer("_body", torch.as_tensor([int(m.geom_bodyid[g]) - 1 for g in geoms], dtype=torch.long))
        self.register_buffer("_radius", torch.as_tensor(m.geom_size[geoms, 0], dtype=dtype))
        self.register_buffer("_a", torch.as_tensor([slot[a] for a, _ in pairs], dtype=torch.long))
        self.register_buffer("_b", torch.as_tensor([slot[b] for _, b in pairs], dtype=torch.long))
        self.pair_geoms = pairs

    def forward(self, transforms: torch.Tensor) -> torch.Tensor:
        t = transforms.index_select(1, self._body).to(self._ends.dtype)  # [B, G, 4, 4]
        ends = (t[:, :, None, :3, :] @ self._ends[None, :, :, :, None])[..., 0]  # [B, G, 2, 3]
        ea, eb = ends.index_select(1, self._a), ends.index_select(1, self._b)
        dist = segment_distance(ea[:, :, 0], ea[:, :, 1], eb[:, :, 0], eb[:, :, 1])
        return torch.relu(self._radius[self._a] + self._radius[self._b] - dist)
