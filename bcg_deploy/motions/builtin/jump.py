"""Built-in synthetic JUMP: 15 s, six two-footed jumps with countermovement and landing.

Sequence: straight up, forward 0.45 m, quarter turn left, forward 0.45 m, quarter turn right,
straight up. Each jump: crouch 0.5 s (pelvis 0.76 -> 0.62 m, hips back, arms swing back), push
0.3 s (heels rise about the toes in the last 0.15 s, arms swing forward-up), ballistic flight
(g = 9.81, apex 0.15 m above take-off, feet tucked 6 cm and carried with the pelvis), flat landing
at 0.75 m, absorb 0.3 s down to 0.63 m, recover 0.5 s, pause. Feet are planted exactly between
jumps.
"""

from __future__ import annotations

import numpy as np

from bcg_deploy.motions.builtin.plan import HIP_Y, Hold, Plan, bump, foot_track, keyframes, minjerk
from bcg_deploy.robots import RobotSpec
from bcg_deploy.rotations.quat_numpy import from_euler_zyx, rotate

DURATION_S = 15.0
G = 9.81
STAND_Z = 0.76
CROUCH_Z = 0.62
TAKEOFF_Z = 0.785
LAND_Z = 0.75
ABSORB_Z = 0.63
APEX = 0.15
T_CROUCH, T_PUSH, T_ABSORB, T_RECOVER, T_PAUSE = 0.5, 0.3, 0.3, 0.5, 0.28
TOE_OFF, TOE_PITCH = 0.15, 0.45
TUCK = 0.06
# (forward distance of the flight in m, turn in rad)
JUMPS = ((0.0, 0.0), (0.45, 0.0), (0.1, np.pi / 2), (0.45, 0.0), (0.0, -np.pi / 2), (0.0, 0.0))


def _rot(yaw: float, v: tuple[float, float]) -> np.ndarray:
    c, s = np.cos(yaw), np.sin(yaw)
    return np.array([c * v[0] - s * v[1], s * v[0] + c * v[1]])


def plan_jump(robot: RobotSpec, fps: float) -> Plan:
    p = Plan.empty(robot, DURATION_S, fps)
    t = p.t
    v0 = np.sqrt(2 * G * APEX)
    v_land = np.sqrt(v0**2 + 2 * G * (TAKEOFF_Z - LAND_Z))
    t_flight = (v0 + v_land) / G

    # Knots (time, value, slope) for the root and the arm/torso patterns; holds for the feet.
    kz, kx, ky, kyaw, kpitch, karm, kelbow = ([] for _ in range(7))
    holds: list[list[Hold]] = [[], []]
    xy = np.zeros(2)
    yaw = 0.0
    tj = 0.8
    for k, v in ((kz, STAND_Z), (kx, 0.0), (ky, 0.0), (kyaw, 0.0), (kpitch, 0.03), (karm, 0.2), (kelbow, 1.28)):
        k.append((0.0, v, 0.0))
    hold_start = 0.0
    flights = []
    for dist, turn in JUMPS:
        t_c = tj + T_CROUCH
        t_to = t_c + T_PUSH
        t_l = t_to + t_flight
        t_a = t_l + T_ABSORB
        t_r = t_a + T_RECOVER
        yaw1 = yaw + turn
        fwd = _rot(yaw, (1.0, 0.0))
        vxy = fwd * dist / t_flight
        wyaw = turn / t_flight if turn else 0.0
        # Pelvis: hips back in the crouch, over the toes at take-off, ballistic in the air, then it
        # decelerates over the absorb; the feet land where the pelvis comes to rest.
        c_xy = xy - fwd * 0.04
        to_xy = xy + fwd * 0.04
        l_xy = to_xy + vxy * t_flight
        xy1 = l_xy + vxy * 0.5 * T_ABSORB
        pelvis_xy = [  # x, then y: crouch back, over the toes, ballistic, absorb, rest
            (k, ((tj, xy[i], 0), (t_c, c_xy[i], 0), (t_to, to_xy[i], vxy[i]), (t_l, l_xy[i], vxy[i]),
                 (t_a, xy1[i], 0), (t_r, xy1[i], 0)))
            for i, k in enumerate((kx, ky))
        ]  # fmt: skip
        for k, vals in (
            (
                kz,
                (
                    (tj, STAND_Z, 0),
                    (t_c, CROUCH_Z, 0),
                    (t_to, TAKEOFF_Z, v0),
                    (t_l, LAND_Z, -v_land),
                    (t_a, ABSORB_Z, 0),
                    (t_r, STAND_Z, 0),
                ),
            ),
            *pelvis_xy,
            (
                kyaw,
                (
                    (tj, yaw, 0),
                    (t_c, yaw - 0.15 * np.sign(turn), 0),
                    (t_to, yaw + 0.1 * np.sign(turn), wyaw),
                    (t_l, yaw1 - 0.1 * np.sign(turn), wyaw),
                    (t_a, yaw1, 0),
                    (t_r, yaw1, 0),
                ),
            ),
            (kpitch, ((tj, 0.03, 0), (t_c, 0.38, 0), (t_to, 0.0, 0), (t_l, 0.1, 0), (t_a, 0.3, 0), (t_r, 0.03, 0))),
            (karm, ((tj, 0.2, 0), (t_c, 0.7, 0), (t_to, -2.3, 0), (t_l, -0.9, 0), (t_a, -0.5, 0), (t_r, 0.2, 0))),
            (kelbow, ((tj, 1.28, 0), (t_c, 1.1, 0), (t_to, 0.6, 0), (t_l, 0.5, 0), (t_a, 0.6, 0), (t_r, 1.28, 0))),
        ):
            k.extend(vals)
        for side, sy in enumerate((HIP_Y, -HIP_Y)):
            a = xy + _rot(yaw, (0.0, sy))
            holds[side].append(Hold(hold_start, t_to, a[0], a[1], yaw, toe_off=TOE_OFF, toe_pitch=TOE_PITCH))
        flights.append((t_to, t_l))
        xy, yaw, hold_start = xy1, yaw1, t_l
        tj = t_r + T_PAUSE
    for side, sy in enumerate((HIP_Y, -HIP_Y)):
        a = xy + _rot(yaw, (0.0, sy))
        holds[side].append(Hold(hold_start, DURATION_S + 1.0, a[0], a[1], yaw))
    end = DURATION_S + 1.0
    for k, v in ((kz, STAND_Z), (kx, xy[0]), (ky, xy[1]), (kyaw, yaw), (kpitch, 0.03), (karm, 0.2), (kelbow, 1.28)):
        k.append((end, v, 0.0))

    def curve(knots):
        return keyframes(t, [(a, b) for a, b, _ in knots], [c for _, _, c in knots])

    p.root_pos[:] = np.stack([curve(kx), curve(ky), curve(kz)], axis=1)
    p.root_rpy[:, 1] = curve(kpitch)
    p.root_rpy[:, 2] = curve(kyaw)
    arm, elbow = curve(karm), curve(kelbow)
    p.set_joint(robot, "left_shoulder_pitch", arm)
    p.set_joint(robot, "right_shoulder_pitch", arm)
    p.set_joint(robot, "left_elbow", elbow)
    p.set_joint(robot, "right_elbow", elbow)
    p.set_joint(robot, "left_shoulder_roll", 0.2 + 0.15 * np.clip(-arm, 0, None) / 2.3)
    p.set_joint(robot, "right_shoulder_roll", -0.2 - 0.15 * np.clip(-arm, 0, None) / 2.3)
    p.set_joint(robot, "waist_pitch", 0.5 * (p.root_rpy[:, 1] - 0.03))

    # Feet: planted holds, then in the air carried with the pelvis (yaw frame), tucked.
    root_q = from_euler_zyx(0.0 * t, 0.0 * t, p.root_rpy[:, 2])
    for side in range(2):
        p.foot_pos[:, side], p.foot_rpy[:, side] = foot_track(t, holds[side])
    for t_to, t_l in flights:
        sel = (t > t_to) & (t < t_l)
        k_to, k_l = int(np.floor(t_to * fps)), int(np.ceil(t_l * fps))
        s = (t[sel] - t_to) / (t_l - t_to)
        w = minjerk(s)[:, None]
        for side in range(2):
            # Foot position in the pelvis' heading frame at take-off and at landing.
            rel = [
                rotate(from_euler_zyx(0.0, 0.0, -p.root_rpy[kk, 2]), p.foot_pos[kk, side] - p.root_pos[kk])
                for kk in (k_to, k_l)
            ]
            rel_s = rel[0] * (1 - w) + rel[1] * w
            p.foot_pos[sel, side] = p.root_pos[sel] + rotate(root_q[sel], rel_s)
            p.foot_pos[sel, side, 2] += TUCK * bump(s)
            rel_yaw = [p.foot_rpy[kk, side, 2] - p.root_rpy[kk, 2] for kk in (k_to, k_l)]
            p.foot_rpy[sel, side, 2] = p.root_rpy[sel, 2] + rel_yaw[0] * (1 - w[:, 0]) + rel_yaw[1] * w[:, 0]
            p.foot_rpy[sel, side, 1] = p.foot_rpy[k_to, side, 1] * (1 - w[:, 0])
    p.meta = {"jumps": len(JUMPS), "apex_m": APEX, "flight_s": t_flight}
    return p
