"""Quaternion and rotation maths on numpy arrays, w x y z order, batched over leading dimensions.

Rotation vectors (``log``/``exp``) are axis * angle in radians. ``mul(a, b)`` composes ``a`` after ``b``
(rotate by ``b`` first), as MuJoCo's ``mju_mulQuat``.
"""

from __future__ import annotations

import mujoco
import numpy as np


def normalize(q: np.ndarray) -> np.ndarray:
    """Unit quaternions."""
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def conj(q: np.ndarray) -> np.ndarray:
    """Conjugate (the inverse of a unit quaternion)."""
    return q * np.array([1.0, -1.0, -1.0, -1.0])


def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product ``a * b``."""
    aw, ax, ay, az = np.moveaxis(a, -1, 0)
    bw, bx, by, bz = np.moveaxis(b, -1, 0)
    return np.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        axis=-1,
    )


def rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate vectors ``v`` [..., 3] by unit quaternions ``q`` [..., 4]."""
    w = q[..., :1]
    u = q[..., 1:]
    t = 2.0 * np.cross(u, v)
    return v + w * t + np.cross(u, t)


def exp(r: np.ndarray) -> np.ndarray:
    """Unit quaternion of the rotation vector ``r`` [..., 3] (axis * angle, rad)."""
    angle = np.linalg.norm(r, axis=-1, keepdims=True)
    half = 0.5 * angle
    # sin(half)/angle, with its Taylor series near zero.
    small = angle < 1e-8
    k = np.where(small, 0.5 - angle**2 / 48.0, np.sin(half) / np.where(small, 1.0, angle))
    return np.concatenate([np.cos(half), k * r], axis=-1)


def log(q: np.ndarray) -> np.ndarray:
    """Rotation vector [..., 3] (axis * angle, angle in [0, pi]) of unit quaternions."""
    q = np.where(q[..., :1] < 0.0, -q, q)  # shortest rotation
    v = q[..., 1:]
    s = np.linalg.norm(v, axis=-1, keepdims=True)
    angle = 2.0 * np.arctan2(s, q[..., :1])
    small = s < 1e-8
    k = np.where(small, 2.0 / np.clip(q[..., :1], 1e-12, None), angle / np.where(small, 1.0, s))
    return k * v


def make_continuous(q: np.ndarray) -> np.ndarray:
    """Flip signs along axis 0 so consecutive quaternions have a non-negative dot product."""
    dots = np.sum(q[1:] * q[:-1], axis=-1)
    flips = np.concatenate([np.ones((1,) + dots.shape[1:]), np.where(dots < 0.0, -1.0, 1.0)])
    return q * np.cumprod(flips, axis=0)[..., None]


def slerp(q0: np.ndarray, q1: np.ndarray, t: np.ndarray | float) -> np.ndarray:
    """Spherical interpolation from ``q0`` (t = 0) to ``q1`` (t = 1) along the shortest arc."""
    t = np.asarray(t, dtype=np.float64)[..., None] if np.ndim(t) else float(t)
    q1 = np.where(np.sum(q0 * q1, axis=-1, keepdims=True) < 0.0, -q1, q1)
    return normalize(mul(q0, exp(t * log(mul(conj(q0), q1)))))


def angular_velocity_world(q: np.ndarray, dt: float) -> np.ndarray:
    """World-frame angular velocity [T, 3] (rad/s) of a sampled orientation track [T, 4].

    Central differences through the quaternion log, omega_i = log(q_{i+1} q_{i-1}^*) / (2 dt), and
    one-sided differences at both ends. Second-order accurate inside.
    """
    q = make_continuous(normalize(q))
    w = np.zeros(q.shape[:-1] + (3,))
    if len(q) < 2:
        return w
    w[1:-1] = log(mul(q[2:], conj(q[:-2]))) / (2.0 * dt)
    w[0] = log(mul(q[1], conj(q[0]))) / dt
    w[-1] = log(mul(q[-1], conj(q[-2]))) / dt
    return w


def from_euler_zyx(roll: np.ndarray, pitch: np.ndarray, yaw: np.ndarray) -> np.ndarray:
    """Quaternion of R = Rz(yaw) Ry(pitch) Rx(roll) (intrinsic yaw, then pitch, then roll)."""
    z = np.zeros_like(np.asarray(roll, dtype=np.float64))
    qx = exp(np.stack([roll + z, z, z], axis=-1))
    qy = exp(np.stack([z, pitch + z, z], axis=-1))
    qz = exp(np.stack([z, z, yaw + z], axis=-1))
    return mul(qz, mul(qy, qx))


def to_matrix(q: np.ndarray) -> np.ndarray:
    """Rotation matrices [..., 3, 3] of unit quaternions."""
    w, x, y, z = np.moveaxis(q, -1, 0)
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], axis=-1),
            np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], axis=-1),
            np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], axis=-1),
        ],
        axis=-2,
    )


def to_matrix_mujoco(q: np.ndarray, normalize: bool = False) -> np.ndarray:
    """Rotation matrices [..., 3, 3] by MuJoCo's own ``mju_quat2Mat``: equal to MuJoCo's ``xmat`` to the bit
    (``to_matrix`` rounds differently in the last place). ``normalize``: each quaternion divided by its norm
    first (for inputs that are not exactly unit)."""
    q = np.asarray(q, dtype=np.float64)
    out = np.zeros((int(np.prod(q.shape[:-1])), 9))
    for i, x in enumerate(q.reshape(-1, 4)):
        mujoco.mju_quat2Mat(out[i], x / np.linalg.norm(x) if normalize else x)
    return out.reshape(q.shape[:-1] + (3, 3))


def rotate_inverse(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate vectors ``v`` [..., 3] by the inverse of unit quaternions ``q``: world vectors into their frame."""
    return rotate(conj(q), v)


def nlerp(q0: np.ndarray, q1: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Normalised linear interpolation of quaternions (shortest arc), ``a`` in [0, 1] per row."""
    s = np.where(np.sum(q0 * q1, axis=-1, keepdims=True) < 0.0, -1.0, 1.0)
    q = (1.0 - a) * q0 + a * s * q1
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def axis_rotation(axis: int, angle: float, dtype: type = np.float64) -> np.ndarray:
    """The rotation matrix [3, 3] by ``angle`` (rad) about coordinate axis ``axis`` (0 x, 1 y, 2 z); ``dtype``
    float32 for a runtime that computes in float32 (the cosine and sine rounded once, into the matrix)."""
    c, s = np.cos(angle), np.sin(angle)
    i, j = [(1, 2), (2, 0), (0, 1)][axis]
    r = np.eye(3, dtype=dtype)
    r[i, i], r[i, j], r[j, i], r[j, j] = c, -s, s, c
    return r
