"""Finite-difference velocities and resampling of a sampled motion to another rate.

Both work on the generalized trajectory (root and joints, a ``Motion`` without body arrays: they come from
forward kinematics afterwards).

Velocities are computed at the SOURCE rate by central differences (one-sided at the ends): joint
rates and root linear velocity from positions, root angular velocity (world frame) through the
quaternion log (:func:`quat.angular_velocity_world`). They are then resampled like the positions:
linear interpolation for positions, angles and velocities, slerp for the root orientation. For a
smooth motion this is second-order accurate: the errors are about dt^2/8 |x''| in position and
dt^2 (1/6 + 1/8) |x'''| in velocity, dt the source frame time.
"""

from __future__ import annotations

import numpy as np

from bcg_deploy.motions.motion import Motion
from bcg_deploy.rotations import quat_numpy as Q


def central_difference(x: np.ndarray, dt: float) -> np.ndarray:
    """d/dt along axis 0: central inside, one-sided at the ends (zeros for a single frame)."""
    if len(x) < 2:
        return np.zeros_like(x)
    return np.gradient(x, dt, axis=0, edge_order=1)


def with_velocities(fps: float, root_pos: np.ndarray, root_quat: np.ndarray, joint_pos: np.ndarray) -> Motion:
    """Attach finite-difference velocities to sampled positions (see the module docstring)."""
    dt = 1.0 / fps
    root_quat = Q.make_continuous(Q.normalize(root_quat))
    return Motion(
        fps=fps,
        root_pos=root_pos,
        root_quat=root_quat,
        joint_pos=joint_pos,
        joint_vel=central_difference(joint_pos, dt),
        root_lin_vel=central_difference(root_pos, dt),
        root_ang_vel=Q.angular_velocity_world(root_quat, dt),
    )


def sample_times(start_s: float, duration_s: float, fps: float) -> np.ndarray:
    """Times start, start + 1/fps, ... up to start + duration (inclusive when it falls on the grid)."""
    n = int(np.floor(duration_s * fps + 1e-6)) + 1
    return start_s + np.arange(n) / fps


def resample(track: Motion, times: np.ndarray, fps: float) -> Motion:
    """Values of ``track`` at ``times`` (s, from its first frame; spaced 1 / ``fps``), inside it.

    Linear interpolation for everything except the root orientation (slerp).
    """
    n = len(track.root_pos)
    u = np.asarray(times, dtype=np.float64) * track.fps
    if len(u) and (u.min() < -1e-6 or u.max() > n - 1 + 1e-6):
        raise ValueError(f"resample times [{times[0]}, {times[-1]}] s outside the track (0, {(n - 1) / track.fps}) s")
    u = np.clip(u, 0.0, n - 1)
    i0 = np.minimum(np.floor(u).astype(int), max(n - 2, 0))
    i1 = np.minimum(i0 + 1, n - 1)
    a = (u - i0)[:, None]

    def lerp(x: np.ndarray) -> np.ndarray:
        return (1.0 - a) * x[i0] + a * x[i1]

    return Motion(
        fps=fps,
        root_pos=lerp(track.root_pos),
        root_quat=Q.make_continuous(Q.slerp(track.root_quat[i0], track.root_quat[i1], a[:, 0])),
        joint_pos=lerp(track.joint_pos),
        joint_vel=lerp(track.joint_vel),
        root_lin_vel=lerp(track.root_lin_vel),
        root_ang_vel=lerp(track.root_ang_vel),
    )
