"""Moreau midpoint stepping: the per-substep kernels and the recorded launch sequence of a control step.

One physics substep (METHOD.md section 2), per env:
  1. ``smooth``    q_mid = q + (dt/2) qd; at q_mid: kinematics, cinert, cdof, RNE bias (with qd),
                   PD torques; CRB mass matrix (+ armature, + dt kd if implicit PD damping);
                   qfrc_smooth = tau - bias.                                              [Warp autodiff]
  2. ``factor``    qLD = L^T D L of qM.                                                   [forward only]
  -- contact stage slot: reads xpos/xquat/cdof/ref_pos/qLD/qfrc_smooth/qd of the substep and writes
     qfrc_impulse = Jc^T p (N s); its adjoint must add into the adjoints of what it read. --
  3. ``solve``     dqd = M^-1 (dt qfrc_smooth + qfrc_impulse); qd+ = qd + dqd.            [hand adjoint]
  4. ``integrate`` q+ = q + dt (qd + qd+)/2; the free quaternion rotates by the averaged local angular
                   velocity and is renormalised.                                         [Warp autodiff]
Launches are recorded once per ``StepData`` (``wp.launch(record_cmd=True)``) and replayed: the adjoint
commands form the tape of the control step, replayed in reverse by the torch bridge.
"""

# No ``from __future__ import annotations``: Warp reads the (closure) type annotations at definition.

from functools import cache
from types import SimpleNamespace

import warp as wp

from bcg_deploy.diffsim import actuation as dact
from bcg_deploy.diffsim import inertia as dinertia
from bcg_deploy.diffsim import kinematics as dkin
from bcg_deploy.diffsim import math as dmath
from bcg_deploy.diffsim import rne as drne
from bcg_deploy.diffsim import solve as dsolve
from bcg_deploy.diffsim.types import JNT_FREE, JNT_HINGE, Model, StepData, Types


@cache
def build(t: Types, max_children: int) -> SimpleNamespace:
    """All kernels of precision ``t`` (one Warp module, compiled once)."""
    S, vec3, vec6, vec10, quat = t.scalar, t.vec3, t.vec6, t.vec10, t.quat
    mod = dmath.module_name(t)
    kin = dkin.build(t)
    inr = dinertia.build(t, max_children)
    rn = drne.build(t, max_children)
    act = dact.build(t)
    quat_integrate = dmath.build(t).quat_integrate
    midpoint, kinematics, com_vel, rne = kin.midpoint, kin.kinematics, rn.com_vel, rn.rne
    crb, mass_matrix, actuation = inr.crb, inr.mass_matrix, act.actuation
    FREE = wp.constant(JNT_FREE)
    HINGE = wp.constant(JNT_HINGE)

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
        body_iquat: wp.array2d(dtype=quat),
        body_inertia: wp.array2d(dtype=vec3),
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
        cdof_dot_out: wp.array2d(dtype=vec6),
        cacc_out: wp.array2d(dtype=vec6),
        cfrc_body_out: wp.array2d(dtype=vec6),
        cfrc_out: wp.array2d(dtype=vec6),
        crb_out: wp.array2d(dtype=vec10),
        qM_out: wp.array2d(dtype=S),
        qfrc_bias_out: wp.array2d(dtype=S),
        qfrc_actuator_out: wp.array2d(dtype=S),
        qfrc_smooth_out: wp.array2d(dtype=S),
        dof_damping_out: wp.array2d(dtype=S),
    ):
        e = wp.tid()
        midpoint(body_jnttype, body_qposadr, body_dofadr, e, q_in, qd_in, h, q_mid_out, ref_pos_out)
        kinematics(
            body_parentid, body_jnttype, body_qposadr, body_dofadr, body_pos, body_quat, jnt_pos, jnt_axis,
            body_mass, body_ipos, body_iquat, body_inertia,
            e, q_mid_out, ref_pos_out, xpos_out, xquat_out, cinert_out, cdof_out,
        )  # fmt: skip
        com_vel(body_parentid, body_jnttype, body_dofadr, e, qd_in, cdof_out, cvel_out, cdof_dot_out)
        rne(
            body_parentid, body_jnttype, body_dofadr, body_children, dof_bodyid, gravity,
            e, qd_in, cinert_out, cvel_out, cdof_out, cdof_dot_out, cacc_out, cfrc_body_out, cfrc_out, qfrc_bias_out,
        )  # fmt: skip
        actuation(
            dof_actid, act_qposadr, act_kp, act_kd, act_effort,
            e, q_mid_out, qd_in, q_target_in, qfrc_applied_in, qfrc_bias_out, damping_dt,
            qfrc_actuator_out, qfrc_smooth_out, dof_damping_out,
        )  # fmt: skip
        crb(body_children, e, cinert_out, crb_out)
        mass_matrix(
            dof_bodyid, dof_Madr, dof_Mnum, M_colind, dof_armature, e, cdof_out, crb_out, dof_damping_out, qM_out
        )

    @wp.kernel(module=mod)
    def integrate_kernel(
        # Model:
        body_jnttype: wp.array(dtype=int),
        body_qposadr: wp.array(dtype=int),
        body_dofadr: wp.array(dtype=int),
        # Data in:
        q_in: wp.array2d(dtype=S),
        qd_in: wp.array2d(dtype=S),
        qd_next_in: wp.array2d(dtype=S),
        dt: S,
        # Data out:
        q_out: wp.array2d(dtype=S),
    ):
        """q+ = q + dt (qd + qd+)/2 (free joint: world-frame position, local angular velocity)."""
        e = wp.tid()
        half = S(0.5)
        for b in range(1, body_jnttype.shape[0]):
            jt = body_jnttype[b]
            a = body_qposadr[b]
            d = body_dofadr[b]
            if jt == FREE:
                for i in range(3):
                    q_out[e, a + i] = q_in[e, a + i] + dt * half * (qd_in[e, d + i] + qd_next_in[e, d + i])
                w = half * vec3(
                    qd_in[e, d + 3] + qd_next_in[e, d + 3],
                    qd_in[e, d + 4] + qd_next_in[e, d + 4],
                    qd_in[e, d + 5] + qd_next_in[e, d + 5],
                )
                rot = wp.normalize(quat(q_in[e, a + 4], q_in[e, a + 5], q_in[e, a + 6], q_in[e, a + 3]))
                rot = wp.normalize(quat_integrate(rot, w, dt))
                q_out[e, a + 3] = rot[3]
                q_out[e, a + 4] = rot[0]
                q_out[e, a + 5] = rot[1]
                q_out[e, a + 6] = rot[2]
            elif jt == HINGE:
                q_out[e, a] = q_in[e, a] + dt * half * (qd_in[e, d] + qd_next_in[e, d])

    sol = dsolve.build(t)
    return SimpleNamespace(
        smooth_kernel=smooth_kernel,
        integrate_kernel=integrate_kernel,
        factor_kernel=sol.factor_kernel,
        solve_velocity_kernel=sol.solve_velocity_kernel,
        solve_velocity_adjoint_kernel=sol.solve_velocity_adjoint_kernel,
    )


def launch_cmd(kernel, dim, inputs, outputs, device, adj_inputs=None, adj_outputs=None):
    """A recorded launch (``wp.Launch``) of ``kernel``; the adjoint launch when adjoints are given.

    In ``adj_inputs``, ``None`` stands for "no adjoint" and is replaced by a zero of the argument's type
    for non-array arguments (scalars, vectors)."""
    if adj_inputs is None:
        return wp.launch(kernel, dim, inputs=inputs, outputs=outputs, device=device, record_cmd=True)
    adj_inputs = [
        _zero_like(x) if a is None and not isinstance(x, wp.array) else a
        for x, a in zip(inputs, adj_inputs, strict=True)
    ]
    return wp.launch(
        kernel, dim, inputs=inputs, outputs=outputs, adj_inputs=adj_inputs, adj_outputs=adj_outputs,
        adjoint=True, device=device, record_cmd=True,
    )  # fmt: skip


def _zero_like(x):
    return type(x)()


def _model_args(m: Model) -> list:
    return [
        m.body_parentid, m.body_children, m.body_jnttype, m.body_qposadr, m.body_dofadr, m.body_pos,
        m.body_quat, m.jnt_pos, m.jnt_axis, m.body_mass, m.body_ipos, m.body_iquat, m.body_inertia,
        m.dof_bodyid, m.dof_Madr, m.dof_Mnum, m.M_colind, m.dof_armature, m.dof_actid, m.act_qposadr,
        m.act_kp, m.act_kd, m.act_effort, m.gravity,
    ]  # fmt: skip


_SMOOTH_OUT = (
    "q_mid", "ref_pos", "xpos", "xquat", "cinert", "cdof", "cvel", "cdof_dot", "cacc", "cfrc_body", "cfrc", "crb",
    "qM", "qfrc_bias", "qfrc_actuator", "qfrc_smooth", "dof_damping",
)  # fmt: skip


class Recorder:
    """Records a forward launch and (optionally) its adjoint, mapping each array to its adjoint."""

    def __init__(self, device: str, dim: int, grads: dict | None):
        self.device, self.dim, self.grads = device, dim, grads
        self.fwd: list = []
        self.adj: list = []

    def add(self, kernel, inputs: list, outputs: list, adj_inputs: list | None = None, adj_outputs=None):
        self.fwd.append(launch_cmd(kernel, self.dim, inputs, outputs, self.device))
        if adj_inputs is not None:
            self.adj.append(launch_cmd(kernel, self.dim, inputs, outputs, self.device, adj_inputs, adj_outputs))

    def add_custom(self, fwd_cmd, adj_cmd) -> None:
        self.fwd.append(fwd_cmd)
        if adj_cmd is not None:
            self.adj.append(adj_cmd)


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
) -> None:
    """Record the launches of substep ``s`` of ``d`` (see the module docstring for the stages).

    ``gains`` replaces (kp, kd, effort) (the oracle helpers pass zeros); ``h`` replaces dt/2 (0 evaluates
    the dynamics at q itself). ``qfrc_applied`` [*, NV] and ``qfrc_impulse`` [*, NV] are not differentiated.
    ``implicit_damping`` adds dt kd of the unsaturated PD joints to M (see ``actuation``).
    """
    S = m.types.scalar
    g = d.grads if rec.grads is not None else None
    margs = _model_args(m)
    if gains is not None:
        margs[20:23] = list(gains)
    half = 0.5 * dt if h is None else h
    ins = [d.q[s], d.qd[s], d.q_target, qfrc_applied, S(half), S(dt if implicit_damping else 0.0)]
    outs = [getattr(d, n)[s] for n in _SMOOTH_OUT]
    if g is None:
        rec.add(k.smooth_kernel, margs + ins, outs)
    else:
        adj_ins = [None] * len(margs) + [g["q"][s], g["qd"][s], g["q_target"], None, None, None]
        rec.add(k.smooth_kernel, margs + ins, outs, adj_ins, [g[n][s] for n in _SMOOTH_OUT])
    rec.add(k.factor_kernel, [m.dof_Madr, m.dof_Mnum, m.M_colind, d.qM[s]], [d.qLD[s]])
    idx = [m.dof_Madr, m.dof_Mnum, m.M_colind]
    fwd = launch_cmd(
        k.solve_velocity_kernel, rec.dim,
        idx + [d.qLD[s], d.qfrc_smooth[s], qfrc_impulse, d.qd[s], S(dt)], [d.dqd[s], d.qd[s + 1]], m.device,
    )  # fmt: skip
    adj = None
    if g is not None:
        no_imp = wp.empty((0, m.nv), dtype=S, device=m.device)
        adj = launch_cmd(
            k.solve_velocity_adjoint_kernel, rec.dim,
            idx + [d.qLD[s], d.dqd[s], g["dqd"][s], g["qd"][s + 1], S(dt)],
            [d.adj_rhs[s], g["qd"][s], g["qfrc_smooth"][s], no_imp, g["qM"][s]], m.device,
        )  # fmt: skip
    rec.add_custom(fwd, adj)
    iargs = [m.body_jnttype, m.body_qposadr, m.body_dofadr, d.q[s], d.qd[s], d.qd[s + 1], S(dt)]
    if g is None:
        rec.add(k.integrate_kernel, iargs, [d.q[s + 1]])
    else:
        adj_ins = [None, None, None, g["q"][s], g["qd"][s], g["qd"][s + 1], None]
        rec.add(k.integrate_kernel, iargs, [d.q[s + 1]], adj_ins, [g["q"][s + 1]])


def record_step(
    m: Model, k: SimpleNamespace, d: StepData, dt: float, qfrc_applied, qfrc_impulse, grad: bool, implicit_damping: bool
):
    """Record all substeps of ``d``: fills ``d.fwd_cmds`` and (if ``grad``) ``d.adj_cmds`` in reverse order."""
    substeps = d.q.shape[0] - 1
    rec = Recorder(m.device, d.q.shape[1], d.grads if grad else None)
    for s in range(substeps):
        record_substep(m, k, d, s, dt, rec, qfrc_applied, qfrc_impulse, implicit_damping=implicit_damping)
    d.fwd_cmds = rec.fwd
    d.adj_cmds = list(reversed(rec.adj))
