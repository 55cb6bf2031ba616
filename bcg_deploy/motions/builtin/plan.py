"""Building blocks of the procedural clips: smooth curves, footstep plans, and the IK realisation.

A :class:`Plan` prescribes, at the control rate, the root pose, the upper-body joints and a pose
target for each foot (the ankle_roll_link origin; soles flat unless a pitch is given). Legs are
then solved by :class:`~bcg_deploy.motions.builtin.ik.LegIK`, so planted feet stay exactly where
the plan put them (on the floor: sphere bottoms at z = 0) and never slide.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bcg_deploy.motions.builtin.ik import LegIK
from bcg_deploy.motions.motion import Motion
from bcg_deploy.motions.resample import with_velocities
from bcg_deploy.robots import RobotSpec
from bcg_deploy.rotations import quat_numpy as Q

# Height (m) of the ankle_roll_link origin above the floor when the sole is flat on it: contact
# sphere centres sit 0.03 m below the origin and have radius 0.005 m.
FOOT_Z = 0.035
HIP_Y = 0.1185  # lateral offset (m) of the feet under the hips in the home pose


def minjerk(s: np.ndarray) -> np.ndarray:
    """Minimum-jerk blend 0 -> 1 on s in [0, 1] (zero velocity and acceleration at both ends)."""
    s = np.clip(s, 0.0, 1.0)
    return s**3 * (10 - 15 * s + 6 * s**2)


def bump(s: np.ndarray) -> np.ndarray:
    """Smooth bump sin^2(pi s) on [0, 1]: 0 with zero slope at both ends, 1 at s = 0.5."""
    s = np.clip(s, 0.0, 1.0)
    return np.sin(np.pi * s) ** 2


def keyframes(t: np.ndarray, knots: list[tuple[float, float]], v: list[float] | None = None) -> np.ndarray:
    """Piecewise cubic Hermite through (time, value) knots; slopes ``v`` (default 0), held at both ends."""
    kt = np.array([k[0] for k in knots], dtype=np.float64)
    kv = np.array([k[1] for k in knots], dtype=np.float64)
    kd = np.zeros_like(kv) if v is None else np.asarray(v, dtype=np.float64)
    out = np.empty_like(t, dtype=np.float64)
    out[t <= kt[0]] = kv[0]
    out[t >= kt[-1]] = kv[-1]
    for i in range(len(kt) - 1):
        sel = (t > kt[i]) & (t <= kt[i + 1]) if i else (t >= kt[i]) & (t <= kt[i + 1])
        h = kt[i + 1] - kt[i]
        s = (t[sel] - kt[i]) / h
        out[sel] = (
            (2 * s**3 - 3 * s**2 + 1) * kv[i]
            + (s**3 - 2 * s**2 + s) * h * kd[i]
            + (-2 * s**3 + 3 * s**2) * kv[i + 1]
            + (s**3 - s**2) * h * kd[i + 1]
        )
    return out


def ramp(t: np.ndarray, t0: float, t1: float) -> np.ndarray:
    """Minimum-jerk ramp from 0 (t <= t0) to 1 (t >= t1)."""
    return minjerk((t - t0) / (t1 - t0))


TOE = np.array([0.12, 0.0, -0.03])  # toe contact line (sphere centres) in the ankle_roll_link frame, m


@dataclass(frozen=True)
class Hold:
    """A foot planted on the floor from ``t0`` to ``t1`` (s) at (x, y) (m, ankle origin) with heading ``yaw``.

    The sole is flat, except during the last ``toe_off`` s of the hold, when the heel rises (pitch
    0 -> ``toe_pitch`` rad, minimum jerk) about the fixed toe contact line. ``swing_height`` (m) and
    ``swing_pitch`` (rad, toes down) shape the swing that LEAVES this hold.
    """

    t0: float
    t1: float
    x: float
    y: float
    yaw: float = 0.0
    swing_height: float = 0.08
    swing_pitch: float = 0.0
    toe_off: float = 0.0
    toe_pitch: float = 0.0


def _toe_pose(h: Hold, pitch: np.ndarray) -> np.ndarray:
    """Ankle positions [n, 3] with the sole pitched by ``pitch`` about the planted toe line of ``h``."""
    c, s = np.cos(h.yaw), np.sin(h.yaw)
    toe_w = np.array([h.x + c * TOE[0], h.y + s * TOE[0], FOOT_Z + TOE[2]])
    # R = Rz(yaw) Ry(pitch) applied to TOE, then ankle = toe_w - R TOE.
    lx = np.cos(pitch) * TOE[0] + np.sin(pitch) * TOE[2]
    lz = -np.sin(pitch) * TOE[0] + np.cos(pitch) * TOE[2]
    return np.stack([toe_w[0] - c * lx, toe_w[1] - s * lx, toe_w[2] - lz], axis=-1)


def _hold_pose(h: Hold, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ankle positions [n, 3] and sole pitch [n] of a planted foot at times ``t`` within the hold."""
    pitch = np.zeros(len(t))
    if h.toe_off > 0:
        pitch = h.toe_pitch * minjerk((t - (h.t1 - h.toe_off)) / h.toe_off)
    return _toe_pose(h, pitch), pitch


def foot_track(t: np.ndarray, holds: list[Hold]) -> tuple[np.ndarray, np.ndarray]:
    """Foot target positions [T, 3] (ankle origin, m) and roll/pitch/yaw [T, 3] from consecutive holds.

    Between holds the foot swings from the end pose of one hold to the flat start pose of the next:
    horizontal position, pitch and yaw blend by minimum jerk; height rises by
    ``swing_height * bump(s)`` and pitch by ``swing_pitch * bump(s)``. Before the first / after the
    last hold the foot stays planted.
    """
    pos = np.empty((len(t), 3))
    rpy = np.zeros((len(t), 3))
    first, last = holds[0], holds[-1]
    spans = [(h, (t >= h.t0) & (t <= h.t1)) for h in holds]
    spans += [(first, t < first.t0), (last, t > last.t1)]
    for h, sel in spans:
        tt = np.clip(t[sel], h.t0, h.t1)
        pos[sel], rpy[sel, 1] = _hold_pose(h, tt)
        rpy[sel, 2] = h.yaw
    for a, b in zip(holds[:-1], holds[1:], strict=True):
        if b.t0 <= a.t1:
            raise ValueError(f"holds overlap at t = {b.t0}")
        sel = (t > a.t1) & (t < b.t0)
        s = (t[sel] - a.t1) / (b.t0 - a.t1)
        w = minjerk(s)[:, None]
        pa, qa = _hold_pose(a, np.array([a.t1]))
        pb = np.array([b.x, b.y, FOOT_Z])
        pos[sel] = pa * (1 - w) + pb * w
        pos[sel, 2] += a.swing_height * bump(s)
        rpy[sel, 1] = qa[0] * (1 - w[:, 0]) + a.swing_pitch * bump(s)
        rpy[sel, 2] = a.yaw + (b.yaw - a.yaw) * w[:, 0]
    return pos, rpy


@dataclass
class Plan:
    """Prescribed clip at ``fps``: root pose, upper-body joints and foot pose targets (see module doc).

    Attributes:
        t: [T] times (s).
        root_pos: [T, 3] pelvis position (m, world).
        root_rpy: [T, 3] pelvis roll, pitch, yaw (rad; R = Rz Ry Rx).
        joint_pos: [T, J] joints; the legs' entries are the IK's initial guess, the rest are kept.
        foot_pos: [T, 2, 3] ankle_roll_link origin targets (left, right).
        foot_rpy: [T, 2, 3] foot roll, pitch, yaw (rad).
    """

    fps: float
    t: np.ndarray
    root_pos: np.ndarray
    root_rpy: np.ndarray
    joint_pos: np.ndarray
    foot_pos: np.ndarray
    foot_rpy: np.ndarray
    meta: dict = field(default_factory=dict)

    @classmethod
    def empty(cls, robot: RobotSpec, duration_s: float, fps: float) -> Plan:
        """A plan of ``duration_s`` standing in the home pose (feet under the hips)."""
        t = np.arange(int(round(duration_s * fps)) + 1) / fps
        n = len(t)
        foot = np.zeros((n, 2, 3))
        foot[:, 0] = (0.0, HIP_Y, FOOT_Z)
        foot[:, 1] = (0.0, -HIP_Y, FOOT_Z)
        root = np.zeros((n, 3))
        root[:, 2] = robot.default_root_pos[2]
        return cls(
            fps=fps,
            t=t,
            root_pos=root,
            root_rpy=np.zeros((n, 3)),
            joint_pos=np.tile(robot.default_joint_pos, (n, 1)),
            foot_pos=foot,
            foot_rpy=np.zeros((n, 2, 3)),
        )

    def joint(self, robot: RobotSpec, name: str) -> int:
        """Index of ``name`` (with or without the ``_joint`` suffix) in the joint order."""
        full = name if name.endswith("_joint") else f"{name}_joint"
        return robot.joint_names.index(full)

    def set_joint(self, robot: RobotSpec, name: str, values: np.ndarray | float) -> None:
        self.joint_pos[:, self.joint(robot, name)] = values

    def add_joint(self, robot: RobotSpec, name: str, values: np.ndarray | float) -> None:
        self.joint_pos[:, self.joint(robot, name)] += values


def realise(plan: Plan, robot: RobotSpec, max_residual: float = 1e-4) -> tuple[Motion, np.ndarray]:
    """Solve the legs by IK, clamp all joints to their ranges and attach velocities.

    Returns (track, per-frame IK residual). Raises RuntimeError when a foot target is unreachable
    (residual above ``max_residual``): a generator bug, never user input.
    """
    lo, hi = robot.joint_range[:, 0], robot.joint_range[:, 1]
    root_quat = Q.from_euler_zyx(plan.root_rpy[:, 0], plan.root_rpy[:, 1], plan.root_rpy[:, 2])
    foot_quat = Q.from_euler_zyx(plan.foot_rpy[..., 0], plan.foot_rpy[..., 1], plan.foot_rpy[..., 2])
    qpos = np.concatenate([plan.root_pos, root_quat, np.clip(plan.joint_pos, lo, hi)], axis=1)
    qpos, resid = LegIK(robot).solve(qpos, plan.foot_pos, foot_quat)
    worst = int(np.argmax(resid))
    if resid[worst] > max_residual:
        raise RuntimeError(f"leg IK residual {resid[worst]:.2e} at t = {plan.t[worst]:.2f} s: foot target unreachable")
    joints = np.clip(qpos[:, 7:], lo, hi)
    return with_velocities(plan.fps, plan.root_pos.copy(), root_quat, joints), resid
