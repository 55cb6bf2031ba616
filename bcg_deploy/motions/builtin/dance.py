"""Built-in synthetic DANCE: 15 s at 120 beats per minute (one beat = 0.5 s), four figures.

1. 0-4 s, step-touch: the right foot steps 0.2 m to the right and the left closes, then back to
   the left, twice; the pelvis follows the feet and dips on every beat; the arm on the stepping
   side sweeps up and waves.
2. 4-8 s, turn: one full turn to the left in eight steps (the feet take turns, a quarter turn each),
   arms spread out.
3. 8-12 s, groove: feet wide, the pelvis sways side to side once a second and bounces on the beat,
   hips roll, both arms pump overhead on the beat.
4. 12-15 s, knee lifts: feet back together, left-right-left knee lifts with opposite arm swings,
   finishing with both arms up in a V.
"""

from __future__ import annotations

import numpy as np

from bcg_deploy.motions.builtin.plan import HIP_Y, Hold, Plan, foot_track, ramp
from bcg_deploy.robots import RobotSpec

DURATION_S = 15.0
BEAT = 0.5
STAND_Z = 0.745
SWING = 0.3  # s a foot is in the air per step


def _window(t: np.ndarray, t0: float, t1: float, edge: float = 0.3) -> np.ndarray:
    """1 inside [t0, t1], blending in/out over ``edge`` s (minimum jerk)."""
    return ramp(t, t0 - edge, t0) * (1.0 - ramp(t, t1, t1 + edge))


def _at(yaw: float, side: float, half_width: float = HIP_Y) -> tuple[float, float]:
    return -np.sin(yaw) * side * half_width, np.cos(yaw) * side * half_width


def plan_dance(robot: RobotSpec, fps: float) -> Plan:
    p = Plan.empty(robot, DURATION_S, fps)
    t = p.t
    # Footsteps: (side 0 = left / 1 = right, landing time, x, y, yaw, swing height, swing pitch).
    steps: list[tuple[int, float, float, float, float, float, float]] = []
    # 1. Step-touch: beats at 0.5, 1.0, ... 4.0.
    y = [HIP_Y, -HIP_Y]
    for k, (side, dy) in enumerate([(1, -0.2), (0, -0.2), (0, 0.2), (1, 0.2)] * 2):
        y[side] += dy
        steps.append((side, 0.5 + BEAT * k + 0.15, 0.0, y[side], 0.0, 0.07, 0.25))
    # 2. Turn: eight steps from 4.5 s, a quarter turn per foot step (the pelvis follows the feet).
    for k in range(8):
        side = k % 2
        t_land = 4.5 + BEAT * k + 0.15
        yaw = 2 * np.pi * (k + 1) / 8
        steps.append((side, t_land, *_at(yaw, 1.0 if side == 0 else -1.0), yaw, 0.06, 0.25))
    # 3. Groove: step wide.
    for k, side in enumerate((0, 1)):
        steps.append(
            (side, 8.5 + BEAT * k + 0.15, *_at(2 * np.pi, 1.0 if side == 0 else -1.0, 0.2), 2 * np.pi, 0.06, 0.25)
        )
    # 4. Knee lifts: feet together, then lifts on 12.75, 13.25, 13.75 s.
    for k, side in enumerate((1, 0)):
        steps.append((side, 12.0 + 0.4 * k + 0.15, *_at(2 * np.pi, -1.0 if side else 1.0), 2 * np.pi, 0.06, 0.25))
    for k, side in enumerate((0, 1, 0)):
        steps.append((side, 12.75 + BEAT * k + 0.45, *_at(2 * np.pi, -1.0 if side else 1.0), 2 * np.pi, 0.26, 0.45))

    for side in range(2):
        holds = [Hold(0.0, 0.0, 0.0, HIP_Y if side == 0 else -HIP_Y, 0.0)]
        mine = [s for s in steps if s[0] == side]
        for _, t_land, x, yy, yaw, h, pitch in mine:
            air = 0.45 if h > 0.2 else SWING
            prev = holds[-1]
            holds[-1] = Hold(prev.t0, t_land - air, prev.x, prev.y, prev.yaw, swing_height=h, swing_pitch=pitch)
            holds.append(Hold(t_land, t_land, x, yy, yaw))
        last = holds[-1]
        holds[-1] = Hold(last.t0, DURATION_S + 1.0, last.x, last.y, last.yaw)
        p.foot_pos[:, side], p.foot_rpy[:, side] = foot_track(t, holds)

    # Pelvis: over the feet (weighted to the supporting one), bouncing on the beat.
    p.root_pos[:, :2] = 0.5 * (p.foot_pos[:, 0, :2] + p.foot_pos[:, 1, :2])
    groove = _window(t, 9.0, 12.0, 0.5)
    bounce = 0.025 * np.sin(np.pi * t / BEAT) ** 2 * ramp(t, 0.2, 0.6) * (1.0 - ramp(t, 14.2, 14.6))
    sway = 0.05 * groove * np.sin(2 * np.pi * (t - 9.0))
    p.root_pos[:, 1] += sway
    p.root_pos[:, 2] = STAND_Z - bounce - 0.02 * groove
    p.root_rpy[:, 0] = -1.2 * sway
    p.root_rpy[:, 2] = 0.5 * (p.foot_rpy[:, 0, 2] + p.foot_rpy[:, 1, 2])
    p.root_rpy[:, 1] = 0.04
    p.set_joint(robot, "waist_roll", 1.6 * sway)

    # Arms. 1: the arm on the stepping side sweeps up and waves.
    step_touch = _window(t, 0.3, 4.2)
    s = np.sin(np.pi * (t - 0.35))  # > 0 while travelling right, < 0 while travelling left
    wave = 0.4 * np.sin(2 * np.pi * 2.0 * t)
    lift_r = step_touch * s**2 * (s > 0)
    lift_l = step_touch * s**2 * (s < 0)
    # 2: arms spread. 3: pump overhead. 4: opposite-arm swings then a V.
    spread = _window(t, 4.4, 7.9)
    pump = _window(t, 8.6, 11.9)
    pump_beat = np.sin(np.pi * t / BEAT) ** 2
    knees = _window(t, 12.6, 14.1)
    v_pose = ramp(t, 14.2, 14.7)
    swing4 = np.sin(2 * np.pi * (t - 12.75)) * knees
    for side, sgn, lift in (("left", 1.0, lift_l), ("right", -1.0, lift_r)):
        pitch = 0.2 + lift * (-0.4) + pump * (-2.6 + 0.35 * pump_beat - 0.2) + knees * (0.5 * sgn * swing4 - 0.2)
        pitch += v_pose * (-2.7 - 0.2)
        roll = sgn * (0.2 + lift * 1.6 + spread * 1.2 + pump * 0.15 + v_pose * 0.5)
        elbow = 1.28 + lift * (wave - 0.5) + spread * 0.2 + pump * (-0.9 - 0.5 * pump_beat) + knees * (-0.9)
        elbow += v_pose * 0.1
        p.set_joint(robot, f"{side}_shoulder_pitch", pitch)
        p.set_joint(robot, f"{side}_shoulder_roll", roll)
        p.set_joint(robot, f"{side}_elbow", elbow)
        p.set_joint(robot, f"{side}_wrist_roll", sgn * 0.6 * lift * np.sin(2 * np.pi * 2.0 * t))
    p.set_joint(robot, "waist_yaw", 0.25 * spread * np.sin(np.pi * (t - 4.5)) + 0.15 * knees * swing4)
    p.set_joint(robot, "waist_pitch", 0.05 * pump)
    p.meta = {"bpm": 60.0 / BEAT, "figures": ["step-touch", "turn", "groove", "knee lifts"]}
    return p
