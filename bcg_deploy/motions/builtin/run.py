"""Built-in synthetic RUN: 15 s of running straight along +x with flight phases.

Gait: stride period 0.70 s (2.86 steps/s), each foot on the floor 34 % of the stride, so both feet
are off the floor about 32 % of the time (twice per stride). Speed ramps from a jog on the spot
(0 m/s, first 0.6 s standing) to 1.6 m/s by t = 3 s and back to a jog on the spot over the last
2.5 s. Each stance foot is planted flat under the pelvis' mid-stance position; the pelvis dips
4 cm at mid-stance and rises in flight, leans forward 0.12 rad at speed and counter-rotates with
the arms, which swing opposite to the legs with the elbows bent.
"""

from __future__ import annotations

import numpy as np

from bcg_deploy.motions.builtin.plan import Hold, Plan, foot_track, ramp
from bcg_deploy.robots import RobotSpec

DURATION_S = 15.0
PERIOD = 0.70
DUTY = 0.34
V_MAX = 1.6
START = 0.6  # s standing before the first lift-off
STAND_Z = 0.76
RUN_Z = 0.735
BOB = 0.02  # half the pelvis' vertical travel (m)
FOOT_Y = 0.10
TOE_OFF = 0.09  # s of heel rise at the end of each stance


def _speed(t: np.ndarray) -> np.ndarray:
    return V_MAX * ramp(t, START, 3.0) * (1.0 - ramp(t, DURATION_S - 3.0, DURATION_S - 0.5))


def plan_run(robot: RobotSpec, fps: float) -> Plan:
    p = Plan.empty(robot, DURATION_S, fps)
    t = p.t
    # Root path: integrate the speed profile on a fine grid.
    fine = np.arange(0.0, DURATION_S + 1.0, 1e-3)
    x_fine = np.concatenate([[0.0], np.cumsum(_speed(fine[:-1]) * 1e-3)])
    root_x = np.interp(t, fine, x_fine)
    gait = ramp(t, START - 0.3, START + 0.4) * (1.0 - ramp(t, DURATION_S - 0.6, DURATION_S - 0.1))

    # Footholds: left stance starts at START + k*PERIOD, right half a period later.
    holds: list[list[Hold]] = [[], []]
    for side, (offset, y) in enumerate(((0.0, FOOT_Y), (0.5, -FOOT_Y))):
        first_off = START + offset * PERIOD
        holds[side].append(Hold(0.0, first_off, 0.0, np.sign(y) * 0.1185, swing_height=0.10))
        k = 1
        while True:
            t0 = first_off + (1.0 - DUTY) * PERIOD + (k - 1) * PERIOD
            t1 = t0 + DUTY * PERIOD
            if t1 >= DURATION_S - 0.3:
                break
            mid = 0.5 * (t0 + t1)
            x = float(np.interp(mid, fine, x_fine)) - 0.06
            holds[side].append(Hold(t0, t1, x, y, swing_height=0.14, swing_pitch=0.4, toe_off=TOE_OFF, toe_pitch=0.35))
            k += 1
        # Come to rest: the final hold lands under the hip after the speed has decayed.
        last = holds[side][-1]
        t0 = last.t1 + (1.0 - DUTY) * PERIOD
        holds[side][-1] = Hold(last.t0, last.t1, last.x, last.y, swing_height=0.08, swing_pitch=0.2)
        holds[side].append(Hold(t0, DURATION_S + 1.0, float(x_fine[-1]), np.sign(y) * 0.1185))
    for side in range(2):
        p.foot_pos[:, side], p.foot_rpy[:, side] = foot_track(t, holds[side])

    # Stride phase of the left leg: 0 at left touchdown.
    phase = (t - START - (1.0 - DUTY) * PERIOD) / PERIOD
    step = np.mod(2.0 * phase, 1.0)  # 0 at each touchdown; stance is [0, 2*DUTY)
    mid = DUTY  # mid-stance in step units
    v = _speed(t) / V_MAX
    z = STAND_Z + (RUN_Z - STAND_Z) * gait - BOB * gait * np.cos(2 * np.pi * (step - mid))
    p.root_pos[:, 0] = root_x
    p.root_pos[:, 1] = 0.015 * gait * np.sin(2 * np.pi * phase - 0.5)
    p.root_pos[:, 2] = z
    swing = np.sin(2 * np.pi * (phase - DUTY / 2))  # -1 when the left leg reaches forward
    p.root_rpy[:, 1] = 0.05 * gait + 0.07 * v  # forward lean
    p.root_rpy[:, 2] = 0.06 * gait * swing
    p.root_rpy[:, 0] = 0.02 * gait * np.cos(2 * np.pi * (phase - DUTY / 2))

    amp = 0.25 + 0.35 * v
    p.set_joint(robot, "waist_yaw", -0.12 * gait * swing)
    p.set_joint(robot, "waist_pitch", 0.05 * gait)
    p.set_joint(robot, "left_shoulder_pitch", 0.1 - gait * amp * swing)
    p.set_joint(robot, "right_shoulder_pitch", 0.1 + gait * amp * swing)
    p.set_joint(robot, "left_shoulder_roll", 0.2 + 0.05 * gait)
    p.set_joint(robot, "right_shoulder_roll", -0.2 - 0.05 * gait)
    p.set_joint(robot, "left_elbow", 1.28 - gait * (0.75 + 0.25 * swing))
    p.set_joint(robot, "right_elbow", 1.28 - gait * (0.75 - 0.25 * swing))
    p.meta = {"speed_max": V_MAX, "stride_period": PERIOD, "duty": DUTY}
    return p
