"""Quaternion and rotation maths on torch tensors: w x y z quaternions, batched over leading dimensions,
differentiable, and made of few plain ops so that they export to ONNX.

- ``quat_mul``, ``quat_conj``, ``quat_normalize``, ``quat_to_mat``, ``quat_apply``, ``axis_angle_quat``.
- 6D encodings of a rotation matrix: ``mat_to_6d`` (columns 0 and 1, column by column), ``mat_to_6d_rows``
  (the same entries row by row) and ``tangent_normal`` (columns 0 and 2, ADD's features).
- ``heading_rot``: the yaw-only rotation of a frame.
"""

from __future__ import annotations

import torch


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
    """Yaw-only rotation [..., 3, 3] of frames ``mat`` [..., 3, 3]: heading = world-xy direction of the frame's
    x axis (no atan2: normalised (x, y), as Eigen's yaw of a quaternion; ``eps`` guards an x axis pointing
    straight up)."""
    c, s = mat[..., 0, 0], mat[..., 1, 0]
    n = torch.sqrt(c * c + s * s).clamp_min(eps)
    c, s = c / n, s / n
    z, o = torch.zeros_like(c), torch.ones_like(c)
    return torch.stack((c, -s, z, s, c, z, z, z, o), dim=-1).reshape(c.shape + (3, 3))


def mat_to_6d_rows(mat: torch.Tensor) -> torch.Tensor:
    """6D rotation [B, 6] = first two columns of R [B, 3, 3], row by row: (R00, R01, R10, R11, R20, R21)
    (the deploy stacks' ``motion_anchor_ori_b`` order)."""
    return mat[..., :, :2].reshape(mat.shape[0], 6)


def tangent_normal(mat: torch.Tensor) -> torch.Tensor:
    """The 6D tangent-normal rotation encoding of rotation matrices [..., 3, 3]: R e_x, then R e_z."""
    return torch.cat([mat[..., :, 0], mat[..., :, 2]], dim=-1)
