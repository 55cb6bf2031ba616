"""Moreau midpoint stepping: the per-substep kernels and the recorded launch sequence of a control step.

One physics substep (METHOD.md section 2) is two kernels, one thread per env:
  ``smooth_kernel``  q_mid = q + (dt/2) qd; at q_mid: kinematics, cinert, cdof, RNE bias (with qd),
                     PD torques, CRB mass matrix (+ armature, + dt kd if implicit PD damping),
                     qfrc_smooth = tau - bias                                           [Warp autodiff]
                     and qLD = L^T D L of qM                                             [forward only]
  -- contact stage slot (see "Contact plug-in" below) --
  ``update_kernel``  dqd = M^-1 (dt qfrc_smooth + qfrc_impulse), qd+ = qd + dqd         [hand adjoint]
                     q+ = q + dt (qd + qd+)/2, the free quaternion rotated by the averaged local
                     angular velocity and renormalised                                   [Warp autodiff]
Launches are recorded once per ``StepData`` (``wp.launch(record_cmd=True)``); the adjoint launches, in
reverse order, are the tape of the control step. The simulator replays both (on CPU as captured graphs).

Contact plug-in (between the two kernels of ``record_substep``, recorded with ``rec.add(kernel, inputs,
outputs, adj_inputs, adj_outputs)`` so that their adjoints replay in reverse automatically):
  - read, for substep s: ``d.ref_pos[s]`` [E] (world position of the base at q_mid; a point's world height
    is ref_pos.z + its relative z), ``d.xpos[s]``/``d.xquat[s]`` [E, NB] (body frames, origin relative to
    ref_pos), ``d.cdof[s]`` [E, NV] (dof axes about ref_pos: the world velocity Jacobian column of dof j at
    a point p (relative to ref_pos) on a body it moves is lin_j + ang_j x p), ``d.qLD[s]`` (L^T D L of M,
    incl. armature and implicit PD damping; ``solve.build(t).ldl_solve`` applies M^-1), ``d.qd[s]`` and the
    smooth force the update uses (``qfrc_smooth``, or ``qfrc_smooth_mid`` with bias_velocity="midpoint");
  - write ``qfrc_impulse`` = Jc^T p [S, E, NV] (N s), declared in ``io.step_layout`` (then it is stored
    substep-major and its adjoint is zeroed per substep with the rest), and pass ``d.qfrc_impulse[s]`` and
    ``d.grads["qfrc_impulse"][s]`` as ``qfrc_impulse``/``adj_qfrc_impulse`` (the update's adjoint adds
    M^-1 adj_qd+ into it);
  - differentiate uses of M^-1 by hand like ``solve.py``: adj_b += M^-1 adj_x and adj_M -= sym(adj_b x^T),
    accumulated into ``d.grads["qM"][s]`` (the array the update's adjoint and Warp's adjoint of the mass
    matrix share), never through the factorisation.
"""

# No ``from __future__ import annotations``: Warp reads the (closure) type annotations at definition.

from functools import cache
from types import SimpleNamespace

import warp as wp

from bcg_deploy.diffsim import actuation as dact
from bcg_deploy.diffsim import contact as dcontact
from bcg_deploy.diffsim import inertia as dinertia
from bcg_deploy.diffsim import kinematics as dkin
from bcg_deploy.diffsim import math as dmath
from bcg_deploy.diffsim import rne as drne
from bcg_deploy.diffsim import solve as dsolve
from bcg_deploy.diffsim.tape import Recorder, ZeroCmd, keep_outputs_on_replay
from bcg_deploy.diffsim.types import JNT_FREE, JNT_HINGE, Model, StepData, Types


@cache
def build(t: Types, max_children: int, tree: tuple, has_jnt_pos: bool = True) -> SimpleNamespace:
    """All kernels of precision ``t`` for a model with ``max_children``, mass-matrix sparsity ``tree``
    (``solve.tree_key``) and (non)zero hinge anchors; one Warp module, compiled once."""
    S, vec3, vec6, vec10, quat, mat33 = t.scalar, t.vec3, t.vec6, t.vec10, t.quat, t.mat33
    mod = dmath.module_name(t)
    kin = dkin.build(t, has_jnt_pos)
    inr = dinertia.build(t, max_children)
    rn = drne.build(t, max_children)
    act = dact.build(t)
    quat_integrate = dmath.build(t).quat_integrate
    native = dsolve.build_native(t, tree)
    factor, solve_velocity = native.factor, native.solve_velocity
    midpoint, kinematics, com_vel, rne = kin.midpoint, kin.kinematics, rn.com_vel, rn.rne
    crb, mass_matrix, actuation = inr.crb, inr.mass_matrix, act.actuation
    FREE = wp.constant(JNT_FREE)
    HINGE = wp.constant(JNT_HINGE)
    for fn in (midpoint, kinematics, com_vel, rne, crb, mass_matrix, actuation):
        keep_outputs_on_replay(fn)

    @wp.kernel(module=mod)
    def smooth_kernel(
        # Model:
        body_parentid: wp.array(dtype=int),
        body_children: wp.array2d(dtype=int),
        body_jnttype: wp.array(dtype=int),
        body_qposadr: wp.array(dtype=int),
        body_dofadr: wp.array(dtype=int),
        body_pos: wp.array(dtype=vec3),
        body_quat: wp.array(dtype=quat),
        jnt_pos: wp.array(dtype=vec3),
        jnt_axis: wp.array(dtype=vec3),
        body_mass: wp.array2d(dtype=S),
        body_ipos: wp.array2d(dtype=vec3),
        body_inertia_mat: wp.array2d(dtype=mat33),
        dof_bodyid: wp.array(dtype=int),
        dof_Madr: wp.array(dtype=int),
        dof_Mnum: wp.array(dtype=int),
        M_colind: wp.array(dtype=int),
        dof_armature: wp.array2d(dtype=S),
        dof_actid: wp.array(dtype=int),
        act_qposadr: wp.array(dtype=int),
        act_kp: wp.array2d(dtype=S),
        act_kd: wp.array2d(dtype=S),
        act_effort: wp.array2d(dtype=S),
        gravity: vec3,
        # Data in:
        q_in: wp.array2d(dtype=S),
        qd_in: wp.array2d(dtype=S),
        q_target_in: wp.array2d(dtype=S),
        qfrc_applied_in: wp.array2d(dtype=S),
        h: S,
        damping_dt: S,
        # Data out:
        q_mid_out: wp.array2d(dtype=S),
        ref_pos_out: wp.array(dtype=vec3),
        xpos_out: wp.array2d(dtype=vec3),
        xquat_out: wp.array2d(dtype=quat),
        cinert_out: wp.array2d(dtype=vec10),
        cdof_out: wp.array2d(dtype=vec6),
        cvel_out: wp.array2d(dtype=vec6),
        cacc_out: wp.array2d(dtype=vec6),
        cfrc_out: wp.array2d(dtype=vec6),
        crb_out: wp.array2d(dtype=vec10),
        qM_out: wp.array2d(dtype=S),
        qfrc_bias_out: wp.array2d(dtype=S),
        qfrc_actuator_out: wp.array2d(dtype=S),
        qfrc_smooth_out: wp.array2d(dtype=S),
        dof_damping_out: wp.array2d(dtype=S),
        qLD_out: wp.array2d(dtype=S),
    ):
        e = wp.tid()
        midpoint(body_jnttype, body_qposadr, body_dofadr, e, q_in, qd_in, h, q_mid_out, ref_pos_out)
        kinematics(
            body_parentid, body_jnttype, body_qposadr, body_dofadr, body_pos, body_quat, jnt_pos, jnt_axis,
            body_mass, body_ipos, body_inertia_mat,
            e, q_mid_out, ref_pos_out, xpos_out, xquat_out, cinert_out, cdof_out,
        )  # fmt: skip
        com_vel(body_parentid, body_jnttype, body_dofadr, gravity, e, qd_in, cdof_out, cvel_out, cacc_out)
        rne(body_children, dof_bodyid, e, cinert_out, cvel_out, cacc_out, cdof_out, cfrc_out, qfrc_bias_out)
        actuation(
            dof_actid, act_qposadr, act_kp, act_kd, act_effort,
            e, q_mid_out, qd_in, q_target_in, qfrc_applied_in, qfrc_bias_out, damping_dt,
            qfrc_actuator_out, qfrc_smooth_out, dof_damping_out,
        )  # fmt: skip
        crb(body_children, e, cinert_out, crb_out)
        mass_matrix(
            dof_bodyid, dof_Madr, dof_Mnum, M_colind, dof_armature, e, cdof_out, crb_out, dof_damping_out, qM_out
        )
        factor(qM_out, e, qLD_out)

    @wp.kernel(module=mod)
    def midpoint_bias_kernel(
        # Model:
        body_parentid: wp.array(dtype=int),
        body_children: wp.array2d(dtype=int),
        body_jnttype: wp.array(dtype=int),
        body_dofadr: wp.array(dtype=int),
        dof_bodyid: wp.array(dtype=int),
        dof_actid: wp.array(dtype=int),
        act_qposadr: wp.array(dtype=int),
        act_kp: wp.array2d(dtype=S),
        act_kd: wp.array2d(dtype=S),
        act_effort: wp.array2d(dtype=S),
        gravity: vec3,
        # Data in:
        q_mid_in: wp.array2d(dtype=S),
        qd_in: wp.array2d(dtype=S),
        q_target_in: wp.array2d(dtype=S),
        qfrc_applied_in: wp.array2d(dtype=S),
        cinert_in: wp.array2d(dtype=vec10),
        cdof_in: wp.array2d(dtype=vec6),
        qLD_in: wp.array2d(dtype=S),
        qM_in: wp.array2d(dtype=S),
        qfrc_smooth_in: wp.array2d(dtype=S),
        qfrc_zero_in: wp.array2d(dtype=S),
        h: S,
        damping_dt: S,
        # Data out:
        dqd_pred_out: wp.array2d(dtype=S),
        qd_pred_out: wp.array2d(dtype=S),
        cvel_out: wp.array2d(dtype=vec6),
        cacc_out: wp.array2d(dtype=vec6),
        cfrc_out: wp.array2d(dtype=vec6),
        qfrc_bias_out: wp.array2d(dtype=S),
        qfrc_actuator_out: wp.array2d(dtype=S),
        qfrc_smooth_out: wp.array2d(dtype=S),
        dof_damping_out: wp.array2d(dtype=S),
    ):
        """Option ``bias_velocity="midpoint"``: predict qd_mid = qd + h M^-1 qfrc_smooth(q_mid, qd) and
        re-evaluate the velocity-dependent forces (bias, PD damping) at (q_mid, qd_mid)."""
        e = wp.tid()
        solve_velocity(qLD_in, qM_in, qfrc_smooth_in, qfrc_zero_in, qd_in, h, e, dqd_pred_out, qd_pred_out)
        com_vel(body_parentid, body_jnttype, body_dofadr, gravity, e, qd_pred_out, cdof_in, cvel_out, cacc_out)
        rne(body_children, dof_bodyid, e, cinert_in, cvel_out, cacc_out, cdof_in, cfrc_out, qfrc_bias_out)
        actuation(
            dof_actid, act_qposadr, act_kp, act_kd, act_effort,
            e, q_mid_in, qd_pred_out, q_target_in, qfrc_applied_in, qfrc_bias_out, damping_dt,
            qfrc_actuator_out, qfrc_smooth_out, dof_damping_out,
        )  # fmt: skip

    @wp.kernel(module=mod)
    def update_kernel(
        # Model:
        body_jnttype: wp.array(dtype=int),
        body_qposadr: wp.array(dtype=int),
        body_dofadr: wp.array(dtype=int),
        # Data in:
        q_in: wp.array2d(dtype=S),
        qd_in: wp.array2d(dtype=S),
        qLD_in: wp.array2d(dtype=S),
        qM_in: wp.array2d(dtype=S),
        qfrc_smooth_in: wp.array2d(dtype=S),
        qfrc_impulse_in: wp.array2d(dtype=S),
        dt: S,
        # Data out:
        dqd_out: wp.array2d(dtype=S),
        qd_out: wp.array2d(dtype=S),
        q_out: wp.array2d(dtype=S),
    ):
        """qd+ = qd + M^-1 (dt qfrc_smooth + qfrc_impulse); q+ = q + dt (qd + qd+)/2 (free joint:
        world-frame position, quaternion rotated by the averaged LOCAL angular velocity, renormalised)."""
        e = wp.tid()
        solve_velocity(qLD_in, qM_in, qfrc_smooth_in, qfrc_impulse_in, qd_in, dt, e, dqd_out, qd_out)
        half = S(0.5)
        for b in range(1, body_jnttype.shape[0]):
            jt = body_jnttype[b]
            a = body_qposadr[b]
            d = body_dofadr[b]
            if jt == FREE:
                for i in range(3):
                    q_out[e, a + i] = q_in[e, a + i] + dt * half * (qd_in[e, d + i] + qd_out[e, d + i])
                w = half * vec3(
                    qd_in[e, d + 3] + qd_out[e, d + 3],
                    qd_in[e, d + 4] + qd_out[e, d + 4],
                    qd_in[e, d + 5] + qd_out[e, d + 5],
                )
                rot = wp.normalize(quat(q_in[e, a + 4], q_in[e, a + 5], q_in[e, a + 6], q_in[e, a + 3]))
                rot = wp.normalize(quat_integrate(rot, w, dt))
                q_out[e, a + 3] = rot[3]
                q_out[e, a + 4] = rot[0]
                q_out[e, a + 5] = rot[1]
                q_out[e, a + 6] = rot[2]
            elif jt == HINGE:
                q_out[e, a] = q_in[e, a] + dt * half * (qd_in[e, d] + qd_out[e, d])

    @wp.func(module=mod)
    def dexp_inv(theta: vec3, w: vec3) -> vec3:
        """d theta / dt for R = R0 Exp(theta) moving with the BODY angular velocity w (inverse right Jacobian
        of SO(3), series to second order in theta: exact enough for 4th-order Runge-Kutta-Munthe-Kaas)."""
        tw = wp.cross(theta, w)
        return w + S(0.5) * tw + wp.cross(theta, tw) / S(12.0)

    @wp.func(module=mod)
    def angular(v: wp.array2d(dtype=S), e: int, d: int) -> vec3:
        return vec3(v[e, d + 3], v[e, d + 4], v[e, d + 5])

    @wp.func(module=mod)
    def rk4_increment(
        stage: int,
        h: S,
        x0: wp.array2d(dtype=S),
        x1: wp.array2d(dtype=S),
        x2: wp.array2d(dtype=S),
        x3: wp.array2d(dtype=S),
        e: int,
        i: int,
    ) -> S:
        """Component i of the increment to stage point ``stage`` (1..3: c h x_(stage-1), c = 1/2, 1/2, 1)
        or to the result (4: h (x0 + 2 x1 + 2 x2 + x3) / 6) of classic Runge-Kutta."""
        if stage == 1:
            return S(0.5) * h * x0[e, i]
        if stage == 2:
            return S(0.5) * h * x1[e, i]
        if stage == 3:
            return h * x2[e, i]
        return h * (x0[e, i] + S(2.0) * (x1[e, i] + x2[e, i]) + x3[e, i]) / S(6.0)

    @wp.kernel(module=mod)
    def rk4_kernel(
        # Model:
        body_jnttype: wp.array(dtype=int),
        body_qposadr: wp.array(dtype=int),
        body_dofadr: wp.array(dtype=int),
        # Data in:
        q0_in: wp.array2d(dtype=S),
        qd0_in: wp.array2d(dtype=S),
        v0_in: wp.array2d(dtype=S),
        v1_in: wp.array2d(dtype=S),
        v2_in: wp.array2d(dtype=S),
        v3_in: wp.array2d(dtype=S),
        a0_in: wp.array2d(dtype=S),
        a1_in: wp.array2d(dtype=S),
        a2_in: wp.array2d(dtype=S),
        a3_in: wp.array2d(dtype=S),
        stage: int,
        h: S,
        # Data out:
        q_out: wp.array2d(dtype=S),
        qd_out: wp.array2d(dtype=S),
    ):
        """Classic 4th-order Runge-Kutta from the base point (q0, qd0) = stage 0 with stage velocities v_i and
        accelerations a_i: ``stage`` 1..3 writes stage point i (qd0 + c_i h a_(i-1), positions advanced by
        c_i h v_(i-1); c = 1/2, 1/2, 1), ``stage`` 4 the result (weights h (1, 2, 2, 1) / 6). The free joint's
        rotation is Runge-Kutta-Munthe-Kaas: q0 Exp(Theta) with Theta_i = c_i K_(i-1),
        K_i = h dexp_inv(Theta_i, w_i) (plain q0 Exp(c h w) stages are only second order in the rotation).
        Arrays of stages not yet computed may alias others: they are not read."""
        e = wp.tid()
        for i in range(qd0_in.shape[1]):
            qd_out[e, i] = qd0_in[e, i] + rk4_increment(stage, h, a0_in, a1_in, a2_in, a3_in, e, i)
        for b in range(1, body_jnttype.shape[0]):
            jt = body_jnttype[b]
            a = body_qposadr[b]
            d = body_dofadr[b]
            if jt == FREE:
                for i in range(3):
                    q_out[e, a + i] = q0_in[e, a + i] + rk4_increment(stage, h, v0_in, v1_in, v2_in, v3_in, e, d + i)
                k0 = h * angular(v0_in, e, d)
                theta = S(0.5) * k0
                if stage >= 2:
                    k1 = h * dexp_inv(S(0.5) * k0, angular(v1_in, e, d))
                    theta = S(0.5) * k1
                    if stage >= 3:
                        k2 = h * dexp_inv(S(0.5) * k1, angular(v2_in, e, d))
                        theta = k2
                        if stage == 4:
                            k3 = h * dexp_inv(k2, angular(v3_in, e, d))
                            theta = (k0 + S(2.0) * (k1 + k2) + k3) / S(6.0)
                rot = wp.normalize(quat(q0_in[e, a + 4], q0_in[e, a + 5], q0_in[e, a + 6], q0_in[e, a + 3]))
                rot = wp.normalize(quat_integrate(rot, theta, S(1.0)))
                q_out[e, a + 3] = rot[3]
                q_out[e, a + 4] = rot[0]
                q_out[e, a + 5] = rot[1]
                q_out[e, a + 6] = rot[2]
            elif jt == HINGE:
                q_out[e, a] = q0_in[e, a] + rk4_increment(stage, h, v0_in, v1_in, v2_in, v3_in, e, d)

    @wp.kernel(module=mod)
    def acceleration_kernel(
        # Data in:
        qLD_in: wp.array2d(dtype=S),
        qM_in: wp.array2d(dtype=S),
        qfrc_smooth_in: wp.array2d(dtype=S),
        qfrc_zero_in: wp.array2d(dtype=S),
        qd_in: wp.array2d(dtype=S),
        # Data out:
        qacc_out: wp.array2d(dtype=S),
        qd_scratch_out: wp.array2d(dtype=S),
    ):
        """qacc = M^-1 qfrc_smooth (the Runge-Kutta stage derivative; ``qd_scratch_out`` = qd + qacc is unused)."""
        e = wp.tid()
        solve_velocity(qLD_in, qM_in, qfrc_smooth_in, qfrc_zero_in, qd_in, S(1.0), e, qacc_out, qd_scratch_out)

    return SimpleNamespace(
        smooth_kernel=smooth_kernel,
        midpoint_bias_kernel=midpoint_bias_kernel,
        update_kernel=update_kernel,
        rk4_kernel=rk4_kernel,
        acceleration_kernel=acceleration_kernel,
    )


_SMOOTH_MODEL = (
    "body_parentid", "body_children", "body_jnttype", "body_qposadr", "body_dofadr", "body_pos", "body_quat",
    "jnt_pos", "jnt_axis", "body_mass", "body_ipos", "body_inertia_mat", "dof_bodyid", "dof_Madr", "dof_Mnum",
    "M_colind", "dof_armature", "dof_actid", "act_qposadr", "act_kp", "act_kd", "act_effort", "gravity",
)  # fmt: skip
_MIDPOINT_MODEL = (
    "body_parentid", "body_children", "body_jnttype", "body_dofadr", "dof_bodyid", "dof_actid", "act_qposadr",
    "act_kp", "act_kd", "act_effort", "gravity",
)  # fmt: skip


def _model_args(m: Model, names: tuple, overrides: dict) -> list:
    return [overrides[n] if n in overrides else getattr(m, n) for n in names]


_SMOOTH_OUT = (
    "q_mid", "ref_pos", "xpos", "xquat", "cinert", "cdof", "cvel", "cacc", "cfrc", "crb",
    "qM", "qfrc_bias", "qfrc_actuator", "qfrc_smooth", "dof_damping", "qLD",
)  # fmt: skip


_MIDPOINT_OUT = (
    "dqd_pred", "qd_pred", "cvel_mid", "cacc_mid", "cfrc_mid", "qfrc_bias_mid",
    "qfrc_actuator_mid", "qfrc_smooth_mid", "dof_damping_mid",
)  # fmt: skip


def record_substep(
    m: Model,
    k: SimpleNamespace,
    d: StepData,
    s: int,
    dt: float,
    rec: Recorder,
    qfrc_applied: wp.array,
    qfrc_impulse: wp.array,
    gains: tuple | None = None,
    h: float | None = None,
    implicit_damping: bool = False,
    bias_midpoint: bool = False,
    qfrc_zero: wp.array | None = None,
    adj_qfrc_impulse: wp.array | None = None,
    contact: tuple | None = None,
) -> None:
    """Record the launches of substep ``s`` of ``d`` (see the module docstring for the stages).

    ``gains`` replaces (kp, kd, effort) (the oracle helpers pass zeros); ``h`` replaces dt/2 (0 evaluates
    the dynamics at q itself). ``qfrc_applied`` [*, NV] is not differentiated; ``qfrc_impulse`` [*, NV] is
    when ``adj_qfrc_impulse`` (its adjoint array, same shape) is given.
    ``implicit_damping`` adds dt kd of the unsaturated PD joints to M (see ``actuation``);
    ``bias_midpoint`` evaluates the velocity-dependent forces at the predicted midpoint velocity
    (``midpoint_bias_kernel``; ``d`` must have the ``*_mid`` arrays, see ``io.step_layout``); its
    predictor uses ``qfrc_zero`` (a zero [1, NV] array) as impulse.
    ``contact`` = (contact kernels, ``contact.ContactModel``) records the contact stage, whose
    ``d.qfrc_impulse[s]`` then replaces ``qfrc_impulse``.
    """
    S = m.types.scalar
    g = d.grads if rec.grad else None
    overrides = dict(zip(("act_kp", "act_kd", "act_effort"), gains, strict=True)) if gains is not None else {}
    margs = _model_args(m, _SMOOTH_MODEL, overrides)
    half = 0.5 * dt if h is None else h
    ins = [d.q[s], d.qd[s], d.q_target, qfrc_applied, S(half), S(dt if implicit_damping else 0.0)]
    outs = [getattr(d, n)[s] for n in _SMOOTH_OUT]
    if g is None:
        rec.add(k.smooth_kernel, margs + ins, outs)
    else:
        adj_ins = [None] * len(margs) + [g["q"][s], g["qd"][s], g["q_target"], None, None, None]
        rec.add(k.smooth_kernel, margs + ins, outs, adj_ins, [g[n][s] if n in g else None for n in _SMOOTH_OUT])
    smooth = "qfrc_smooth"
    if bias_midpoint:
        smooth = "qfrc_smooth_mid"
        bargs = _model_args(m, _MIDPOINT_MODEL, overrides)
        bins = [d.q_mid[s], d.qd[s], d.q_target, qfrc_applied, d.cinert[s], d.cdof[s], d.qLD[s], d.qM[s]]
        bins += [d.qfrc_smooth[s], qfrc_zero, S(half), S(dt if implicit_damping else 0.0)]
        bouts = [getattr(d, n)[s] for n in _MIDPOINT_OUT]
        if g is None:
            rec.add(k.midpoint_bias_kernel, bargs + bins, bouts)
        else:
            adj_ins = [None] * len(bargs) + [g["q_mid"][s], g["qd"][s], g["q_target"], None, g["cinert"][s]]
            adj_ins += [g["cdof"][s], None, g["qM"][s], g["qfrc_smooth"][s], None, None, None]
            rec.add(k.midpoint_bias_kernel, bargs + bins, bouts, adj_ins, [g[n][s] for n in _MIDPOINT_OUT])
    if contact is not None:
        dcontact.record_contact(m, contact[0], contact[1], d, s, dt, rec, smooth)
        qfrc_impulse = d.qfrc_impulse[s]
        adj_qfrc_impulse = g["qfrc_impulse"][s] if g is not None else None
    uargs = [m.body_jnttype, m.body_qposadr, m.body_dofadr, d.q[s], d.qd[s], d.qLD[s], d.qM[s]]
    uargs += [getattr(d, smooth)[s], qfrc_impulse, S(dt)]
    uouts = [d.dqd[s], d.qd[s + 1], d.q[s + 1]]
    if g is None:
        rec.add(k.update_kernel, uargs, uouts)
    else:
        adj_ins = [None, None, None, g["q"][s], g["qd"][s], None, g["qM"][s], g[smooth][s], adj_qfrc_impulse, None]
        rec.add(k.update_kernel, uargs, uouts, adj_ins, [g["dqd"][s], g["qd"][s + 1], g["q"][s + 1]])


def rk4_layout(t: Types, num_envs: int, substeps: int, nv: int) -> list:
    """The extra ``StepData`` array of ``record_substep_rk4`` (``substeps`` counts the virtual substeps)."""
    return [("qd_scratch", (substeps, num_envs, nv), t.scalar, 1, True)]


_RK4_STAGE = (0.0, 0.5, 0.5, 1.0)  # stage k's point: the base point advanced by c_k dt along stage k-1


def _record_rk4_combination(
    m: Model, k: SimpleNamespace, d: StepData, rec: Recorder, base: int, stage: int, dt: float, out: int
) -> None:
    """``rk4_kernel`` writing (q, qd)[out]: stage point ``stage`` (1..3) or the result (4) of the substep
    whose stage 0 is virtual substep ``base``; stages not yet computed are passed as aliases (not read)."""
    S = m.types.scalar
    idx = [base + min(i, stage - 1) for i in range(4)]
    jargs = [m.body_jnttype, m.body_qposadr, m.body_dofadr]
    ins = [d.q[base], d.qd[base]] + [d.qd[i] for i in idx] + [d.dqd[i] for i in idx] + [stage, S(dt)]
    outs = [d.q[out], d.qd[out]]
    if not rec.grad:
        rec.add(k.rk4_kernel, jargs + ins, outs)
        return
    g = d.grads
    adj = [None] * 3 + [g["q"][base], g["qd"][base]] + [g["qd"][i] for i in idx] + [g["dqd"][i] for i in idx]
    rec.add(k.rk4_kernel, jargs + ins, outs, adj + [None, None], [g["q"][out], g["qd"][out]])


def record_substep_rk4(
    m: Model, k: SimpleNamespace, d: StepData, s: int, dt: float, rec: Recorder, qfrc_applied, qfrc_zero
) -> None:
    """Record physics substep ``s`` as classic 4th-order Runge-Kutta (``SimConfig.integrator="rk4"``;
    contact-free, explicit PD at every stage, as MuJoCo's RK4). ``d`` has 4 virtual substeps per physics
    substep: j = 4 s + k holds stage k's point (q[j], qd[j]) and its evaluation (kinematics, M, forces,
    qacc = dqd[j]); q[4 s + 4], qd[4 s + 4] is the substep's result."""
    S = m.types.scalar
    g = d.grads if rec.grad else None
    margs = _model_args(m, _SMOOTH_MODEL, {})
    base = 4 * s
    for stage in range(4):
        j = base + stage
        if stage > 0:
            _record_rk4_combination(m, k, d, rec, base, stage, dt, j)
        ins = [d.q[j], d.qd[j], d.q_target, qfrc_applied, S(0.0), S(0.0)]
        outs = [getattr(d, n)[j] for n in _SMOOTH_OUT]
        ains = [d.qLD[j], d.qM[j], d.qfrc_smooth[j], qfrc_zero, d.qd[j]]
        aouts = [d.dqd[j], d.qd_scratch[j]]
        if g is None:
            rec.add(k.smooth_kernel, margs + ins, outs)
            rec.add(k.acceleration_kernel, ains, aouts)
        else:
            adj = [None] * len(margs) + [g["q"][j], g["qd"][j], g["q_target"], None, None, None]
            rec.add(k.smooth_kernel, margs + ins, outs, adj, [g[n][j] if n in g else None for n in _SMOOTH_OUT])
            adj = [None, g["qM"][j], g["qfrc_smooth"][j], None, g["qd"][j]]
            rec.add(k.acceleration_kernel, ains, aouts, adj, [g["dqd"][j], g["qd_scratch"][j]])
    _record_rk4_combination(m, k, d, rec, base, 4, dt, base + 4)
    if g is not None:
        blocks = d.grad_blocks[base : base + 4]
        rec.add_adjoint_only(ZeroCmd([*blocks, *(g[n][base + i] for n in ("q", "qd") for i in range(4))]))


def record_step(
    m: Model,
    k: SimpleNamespace,
    d: StepData,
    dt: float,
    qfrc_applied,
    qfrc_impulse,
    grad: bool,
    implicit_damping: bool,
    bias_midpoint: bool,
    contact: tuple | None = None,
    rk4: bool = False,
):
    """Record all substeps of ``d``: fills ``d.fwd_cmds`` and (if ``grad``) ``d.adj_cmds`` in reverse order.
    ``qfrc_impulse`` is zero until the contact stage provides one (it is also the predictor's zero).

    The backward zeroes each substep's adjoints (its block and the adjoints of its input q, qd) just before
    running that substep's adjoints; the caller sets the adjoints of the step's outputs and zeroes q_target's.
    """
    substeps = d.q.shape[0] - 1
    rec = Recorder(m.device, d.q.shape[1], grad)
    if rk4:
        for s in range(substeps // 4):
            record_substep_rk4(m, k, d, s, dt, rec, qfrc_applied, qfrc_impulse)
        d.fwd_cmds = rec.fwd
        d.adj_cmds = list(reversed(rec.adj))
        return
    for s in range(substeps):
        record_substep(
            m, k, d, s, dt, rec, qfrc_applied, qfrc_impulse,
            implicit_damping=implicit_damping, bias_midpoint=bias_midpoint, qfrc_zero=qfrc_impulse,
            contact=contact,
        )  # fmt: skip
        if grad:
            rec.add_adjoint_only(ZeroCmd([d.grad_blocks[s], d.grads["q"][s], d.grads["qd"][s]]))
    d.fwd_cmds = rec.fwd
    d.adj_cmds = list(reversed(rec.adj))
