"""Built-in synthetic FIGHT: 15 s of boxing combinations and two front kicks.

The clip steps from the home pose into an orthodox stance (left foot forward, body turned right,
knees bent, guard up, bouncing at 2 Hz), then: jab, jab, cross; shuffle forward; left hook, right
uppercut; rear-leg (right) front kick; jab, cross, jab; shuffle back; lead-leg (left) front kick;
slip to the right, cross, hook, cross; back to the guard. Punches are fast joint pulses (out in
0.14 s, back in 0.22 s) of shoulder, elbow and waist, with the pelvis pivoting into the power shots.
During a kick the pelvis shifts over the standing foot and leans back while the kicking foot
chambers (knee up), extends forward to 0.5 m height and returns to its place.
"""

from __future__ import annotations

import numpy as np

from bcg_deploy.motions.builtin.plan import HIP_Y, Hold, Plan, foot_track, keyframes, minjerk, ramp
from bcg_deploy.robots import RobotSpec

DURATION_S = 15.0
STANCE_YAW = -0.45
STANCE_Z = 0.72
SHUFFLE = 0.15
GUARD = {"shoulder_pitch": -0.6, "shoulder_roll": 0.3, "elbow": -0.35}


def pulse(t: np.ndarray, t0: float, out: float = 0.14, back: float = 0.22, hold: float = 0.04) -> np.ndarray:
    """0 -> 1 in ``out`` s from ``t0``, held ``hold`` s, back to 0 in ``back`` s (minimum jerk)."""
    return minjerk((t - t0) / out) * (1.0 - minjerk((t - t0 - out - hold) / back))


def _rot(yaw: float, x: float, y: float) -> tuple[float, float]:
    return np.cos(yaw) * x - np.sin(yaw) * y, np.sin(yaw) * x + np.cos(yaw) * y


def plan_fight(robot: RobotSpec, fps: float) -> Plan:
    p = Plan.empty(robot, DURATION_S, fps)
    t = p.t
    guard_on = ramp(t, 0.2, 1.2) * (1.0 - ramp(t, 14.0, 14.8))

    # Stance geometry (pelvis at the origin of the stance frame, yawed STANCE_YAW).
    def feet_at(cx: float) -> tuple[tuple[float, float], tuple[float, float]]:
        lf = _rot(STANCE_YAW, 0.15, HIP_Y + 0.02)
        rf = _rot(STANCE_YAW, -0.15, -HIP_Y - 0.02)
        return (cx + lf[0], lf[1]), (cx + rf[0], rf[1])

    # Shuffle forward SHUFFLE m at 3.2-4.0 s, back at 9.0-9.65 s.
    (l0, r0), (l1, r1) = feet_at(0.0), feet_at(SHUFFLE)
    yaw_f = STANCE_YAW
    kick_r = (6.0, 7.6)  # right (rear) front kick
    kick_l = (10.6, 12.0)  # left (lead) front kick
    left = [
        Hold(0.0, 0.35, 0.0, HIP_Y, 0.0, swing_height=0.06, swing_pitch=0.3),
        Hold(0.75, 3.2, *l0, yaw_f, swing_height=0.05, swing_pitch=0.3),
        Hold(3.55, 9.0, *l1, yaw_f, swing_height=0.05, swing_pitch=0.3),
        Hold(9.35, kick_l[0], *l0, yaw_f, swing_height=0.0),
        Hold(kick_l[1], 14.0, *l0, yaw_f, swing_height=0.06, swing_pitch=0.3),
        Hold(14.5, DURATION_S + 1, 0.0, HIP_Y, 0.0),
    ]
    right = [
        Hold(0.0, 0.75, 0.0, -HIP_Y, 0.0, swing_height=0.06, swing_pitch=0.3),
        Hold(1.1, 3.7, *r0, yaw_f, swing_height=0.05, swing_pitch=0.3),
        Hold(4.0, kick_r[0], *r1, yaw_f, swing_height=0.0),
        Hold(kick_r[1], 9.3, *r1, yaw_f, swing_height=0.05, swing_pitch=0.3),
        Hold(9.65, 14.2, *r0, yaw_f, swing_height=0.06, swing_pitch=0.3),
        Hold(14.7, DURATION_S + 1, 0.0, -HIP_Y, 0.0),
    ]
    p.foot_pos[:, 0], p.foot_rpy[:, 0] = foot_track(t, left)
    p.foot_pos[:, 1], p.foot_rpy[:, 1] = foot_track(t, right)

    # Pelvis: between the feet, low, bouncing; shifts over the standing foot for the kicks.
    mid = 0.5 * (p.foot_pos[:, 0, :2] + p.foot_pos[:, 1, :2])
    p.root_pos[:, :2] = mid
    bounce = 0.012 * guard_on * np.sin(2 * np.pi * 2.0 * t) ** 2
    p.root_pos[:, 2] = 0.76 + (STANCE_Z - 0.76) * guard_on - bounce
    p.root_rpy[:, 2] = STANCE_YAW * guard_on
    p.root_rpy[:, 1] = 0.08 * guard_on

    # Kicks: pelvis over the standing foot, leaning back; kicking foot chambers, extends, returns.
    for (k0, k1), side, stand in ((kick_r, 1, 0), (kick_l, 0, 1)):
        w = ramp(t, k0 - 0.2, k0 + 0.25) * (1.0 - ramp(t, k1 - 0.25, k1 + 0.2))
        stand_xy = p.foot_pos[:, stand, :2]
        p.root_pos[:, :2] = p.root_pos[:, :2] * (1 - 0.8 * w[:, None]) + stand_xy * 0.8 * w[:, None]
        p.root_pos[:, 2] += 0.02 * w
        p.root_rpy[:, 1] -= 0.25 * w
        p.root_rpy[:, 2] += (0.2 if side == 1 else -0.1) * w
        base = p.foot_pos[int(k0 * fps), side].copy()
        mid_t = 0.5 * (k0 + k1)
        knots_t = [k0, k0 + 0.3, mid_t, k1 - 0.3, k1]
        # Chamber and apex in the pelvis' heading frame: forward of the hip of the kicking leg.
        ref = []
        for tk, fwd, z in ((k0 + 0.3, 0.25, 0.3), (mid_t, 0.5 if side == 1 else 0.45, 0.5), (k1 - 0.3, 0.25, 0.3)):
            k = int(round(tk * fps))
            yaw_k = p.root_rpy[k, 2]
            dx, dy = _rot(yaw_k, fwd, 0.09 if side == 0 else -0.09)
            ref.append((p.root_pos[k, 0] + dx, p.root_pos[k, 1] + dy, z))
        px = [base[0]] + [r[0] for r in ref] + [base[0]]
        py = [base[1]] + [r[1] for r in ref] + [base[1]]
        pz = [base[2]] + [r[2] for r in ref] + [base[2]]
        pitch = [0.0, 0.3, -1.2, 0.3, 0.0]
        sel = (t >= k0) & (t <= k1)
        ts = t[sel]
        p.foot_pos[sel, side, 0] = keyframes(ts, list(zip(knots_t, px, strict=True)))
        p.foot_pos[sel, side, 1] = keyframes(ts, list(zip(knots_t, py, strict=True)))
        p.foot_pos[sel, side, 2] = keyframes(ts, list(zip(knots_t, pz, strict=True)))
        p.foot_rpy[sel, side, 1] = keyframes(ts, list(zip(knots_t, pitch, strict=True)))
        yaw_w = minjerk((ts - k0) / 0.3) * (1.0 - minjerk((ts - k1 + 0.3) / 0.3))
        p.foot_rpy[sel, side, 2] = STANCE_YAW * (1 - yaw_w) + p.root_rpy[sel, 2] * yaw_w

    # Guard, then punches as pulses on top of it.
    for side in ("left", "right"):
        sgn = 1.0 if side == "left" else -1.0
        p.set_joint(robot, f"{side}_shoulder_pitch", 0.2 + (GUARD["shoulder_pitch"] - 0.2) * guard_on)
        p.set_joint(robot, f"{side}_shoulder_roll", sgn * (0.2 + (GUARD["shoulder_roll"] - 0.2) * guard_on))
        p.set_joint(robot, f"{side}_elbow", 1.28 + (GUARD["elbow"] - 1.28) * guard_on)
    p.set_joint(robot, "waist_yaw", 0.0)
    jab = (1.6, 2.15, 7.9, 8.6, 13.3)
    cross = (2.6, 8.25, 12.8, 13.75)
    hooks = (4.8, 13.3 + 0.9)
    uppercut = (5.4,)
    for t0 in jab:
        w = pulse(t, t0)
        p.add_joint(robot, "left_shoulder_pitch", -0.85 * w)
        p.add_joint(robot, "left_elbow", 1.75 * w)
        p.add_joint(robot, "left_shoulder_roll", -0.15 * w)
        p.add_joint(robot, "waist_yaw", -0.15 * w)
    for t0 in cross:
        w = pulse(t, t0, out=0.16)
        p.add_joint(robot, "right_shoulder_pitch", -0.85 * w)
        p.add_joint(robot, "right_elbow", 1.75 * w)
        p.add_joint(robot, "right_shoulder_roll", 0.15 * w)
        p.add_joint(robot, "waist_yaw", 0.55 * w)
        p.root_rpy[:, 2] += 0.25 * w
    for t0 in hooks:
        w = pulse(t, t0, out=0.18, back=0.25)
        p.add_joint(robot, "left_shoulder_roll", 1.0 * w)
        p.add_joint(robot, "left_shoulder_pitch", -0.55 * w)
        p.add_joint(robot, "left_elbow", 0.55 * w)
        p.add_joint(robot, "waist_yaw", -0.5 * w)
        p.root_rpy[:, 2] -= 0.15 * w
    for t0 in uppercut:
        w = pulse(t, t0, out=0.18, back=0.25)
        p.add_joint(robot, "right_shoulder_pitch", -0.7 * w)
        p.add_joint(robot, "right_elbow", 0.1 * w)
        p.add_joint(robot, "waist_yaw", 0.4 * w)
        p.root_pos[:, 2] += 0.04 * w - 0.03 * pulse(t, t0 - 0.25, out=0.2, back=0.2)
    # Slip right before the final combination: dip and lean.
    slip = pulse(t, 12.2, out=0.25, back=0.3, hold=0.1)
    p.root_pos[:, 2] -= 0.035 * slip
    p.root_rpy[:, 0] -= 0.15 * slip
    p.set_joint(robot, "waist_roll", -0.15 * slip)
    p.set_joint(robot, "waist_pitch", 0.1 * guard_on)
    p.meta = {"punches": len(jab) + len(cross) + len(hooks) + len(uppercut), "kicks": 2}
    return p
