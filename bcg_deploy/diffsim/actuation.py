"""Stage 3b: PD actuation clamped to the effort limits, and the smooth generalised force.

tau = clamp(kp (q_target - q_mid) - kd qd, -effort, effort) on the actuated hinges (RobotSpec order),
evaluated at every physics substep with the substep's midpoint position and initial velocity.
qfrc_smooth = qfrc_actuator + qfrc_applied - qfrc_bias (MuJoCo's name; no passive forces here).

Optional implicit damping (``SimConfig.pd_damping = "implicit"``, like MuJoCo's implicitfast): the
velocity update becomes (M + dt Kd) (qd+ - qd) = dt qfrc_smooth + ..., i.e. the PD damping acts on the
new velocity. ``dof_damping`` = dt kd on the actuated dofs whose PD force is not saturated (0 elsewhere,
and 0 everywhere with explicit damping); the mass-matrix stage adds it to M's diagonal.
"""

# No ``from __future__ import annotations``: Warp reads the (closure) type annotations at definition.

from functools import cache
from types import SimpleNamespace

import warp as wp

from bcg_deploy.diffsim import math as dmath
from bcg_deploy.diffsim.types import Types


@cache
def build(t: Types) -> SimpleNamespace:
    S = t.scalar
    mod = dmath.module_name(t)

    @wp.func(module=mod)
    def actuation(
        # Model:
        dof_actid: wp.array(dtype=int),
        act_qposadr: wp.array(dtype=int),
        act_kp: wp.array2d(dtype=S),
        act_kd: wp.array2d(dtype=S),
        act_effort: wp.array2d(dtype=S),
        # Data in:
        e: int,
        q_mid_in: wp.array2d(dtype=S),
        qd_in: wp.array2d(dtype=S),
        q_target_in: wp.array2d(dtype=S),
        qfrc_applied_in: wp.array2d(dtype=S),
        qfrc_bias_in: wp.array2d(dtype=S),
        damping_dt: S,
        # Data out:
        qfrc_actuator_out: wp.array2d(dtype=S),
        qfrc_smooth_out: wp.array2d(dtype=S),
        dof_damping_out: wp.array2d(dtype=S),
    ):
        """PD torques (N m), the smooth force and the implicit damping (``damping_dt`` = dt for implicit
        damping, 0 for explicit); gains/limits are [*, NU], q_target and qfrc_applied [*, NU] / [*, NV]
        (row ``e % rows``)."""
        pkp = e % act_kp.shape[0]
        pkd = e % act_kd.shape[0]
        pef = e % act_effort.shape[0]
        pt = e % q_target_in.shape[0]
        pa = e % qfrc_applied_in.shape[0]
        for i in range(dof_actid.shape[0]):
            a = dof_actid[i]
            tau = S(0.0)
            damping = S(0.0)
            if a >= 0:
                lim = act_effort[pef, a]
                err = q_target_in[pt, a] - q_mid_in[e, act_qposadr[a]]
                raw = act_kp[pkp, a] * err - act_kd[pkd, a] * qd_in[e, i]
                tau = wp.clamp(raw, -lim, lim)
                if wp.abs(raw) < lim:
                    damping = damping_dt * act_kd[pkd, a]
            qfrc_actuator_out[e, i] = tau
            dof_damping_out[e, i] = damping
            qfrc_smooth_out[e, i] = tau + qfrc_applied_in[pa, i] - qfrc_bias_in[e, i]

    return SimpleNamespace(actuation=actuation)
