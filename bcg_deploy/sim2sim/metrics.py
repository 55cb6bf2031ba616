"""Tracking metrics of a sim2sim run: pure functions on recorded arrays.

Shapes: ``K`` evaluated control frames, ``NB`` bodies, ``J`` joints, ``N`` physics steps. Positions in
metres (world frame), angles in radians; the functions name the unit of what they return.
"""

from __future__ import annotations

import numpy as np


def body_position_error_series(body_pos_sim: np.ndarray, body_pos_ref: np.ndarray) -> np.ndarray:
    """Per-frame mean over bodies of ``||p_sim - p_ref||`` (m), world frame. [K, NB, 3] x2 -> [K]."""
    return np.linalg.norm(body_pos_sim - body_pos_ref, axis=-1).mean(axis=-1)


def e_track_cm(body_pos_sim: np.ndarray, body_pos_ref: np.ndarray) -> float:
    """The paper's E_track: global mean per-body position error in cm (mean over frames and bodies)."""
    if body_pos_sim.shape[0] == 0:
        return float("nan")
    return float(100.0 * body_position_error_series(body_pos_sim, body_pos_ref).mean())


def joint_error_series(joint_pos_sim: np.ndarray, joint_pos_ref: np.ndarray) -> np.ndarray:
    """Per-frame RMS joint-angle error (rad) over joints. [K, J] x2 -> [K]."""
    return np.sqrt(np.mean((joint_pos_sim - joint_pos_ref) ** 2, axis=-1))


def joint_rmse(joint_pos_sim: np.ndarray, joint_pos_ref: np.ndarray) -> float:
    """Joint-angle RMSE (rad) over all frames and joints."""
    if joint_pos_sim.shape[0] == 0:
        return float("nan")
    return float(np.sqrt(np.mean((joint_pos_sim - joint_pos_ref) ** 2)))


def root_position_error_series(root_pos_sim: np.ndarray, root_pos_ref: np.ndarray) -> np.ndarray:
    """Per-frame root (pelvis) position error ``||p_sim - p_ref||`` (m), world frame. [K, 3] x2 -> [K]."""
    return np.linalg.norm(root_pos_sim - root_pos_ref, axis=-1)


def root_position_error_cm(root_pos_sim: np.ndarray, root_pos_ref: np.ndarray) -> float:
    """Mean root position error over frames, in cm."""
    if root_pos_sim.shape[0] == 0:
        return float("nan")
    return float(100.0 * root_position_error_series(root_pos_sim, root_pos_ref).mean())


def mean_penetration_mm(penetration_sum_m: float, contact_count: int) -> float:
    """Mean foot penetration (mm) while in contact, from the sum of ``-dist`` (m) over ``contact_count``
    foot-floor contacts; NaN when the feet never touched the floor."""
    if contact_count == 0:
        return float("nan")
    return float(1000.0 * penetration_sum_m / contact_count)


def contact_penetration(dist: np.ndarray) -> np.ndarray:
    """Penetration (m, > 0 when penetrating) of contacts with signed distance ``dist`` (m): ``-dist``."""
    return -np.asarray(dist)


def sphere_floor_penetration(centre_z: np.ndarray, radius: np.ndarray) -> tuple[float, int]:
    """Sum (m) and count of the penetrations of spheres into the floor plane z = 0 while in contact.

    ``centre_z`` [N, S] sphere centre heights (m), ``radius`` [S] (m). A sphere touches the plane when
    its signed distance ``dist = z - r`` is negative (MuJoCo's contact criterion with zero margin);
    its penetration is ``-dist``, exactly what MuJoCo reports for a sphere-plane contact.
    """
    pen = radius - np.asarray(centre_z)
    touching = pen > 0.0
    return float(pen[touching].sum()), int(np.count_nonzero(touching))


def torque_saturation_fraction(torque: np.ndarray, effort_limit: np.ndarray, rtol: float = 1e-9) -> float:
    """Fraction of (physics step, joint) samples whose PD torque sits at its effort limit.

    ``torque`` [N, J] is the clamped torque (N m); a sample is saturated when
    ``|tau| >= limit * (1 - rtol)``.
    """
    if torque.shape[0] == 0:
        return float("nan")
    return float(np.mean(np.abs(torque) >= effort_limit * (1.0 - rtol)))


def fall_index(root_height: np.ndarray, threshold: float = 0.3) -> int | None:
    """First index whose root height (m) is below ``threshold`` (m), or None if it never is."""
    below = np.flatnonzero(np.asarray(root_height) < threshold)
    return int(below[0]) if below.size else None


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and population standard deviation (ddof 0) of the finite values; NaN if there are none."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=np.float64)
    if v.size == 0:
        return float("nan"), float("nan")
    return float(v.mean()), float(v.std())
