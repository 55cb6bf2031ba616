"""Stage 2: velocities and bias forces by recursive Newton-Euler (MuJoCo's mj_comVel + mj_rne).

``com_vel``: body spatial velocities cvel and bias accelerations cacc (the world "accelerates" at
-gravity; each dof adds cdof_dot qd with cdof_dot = v x cdof, v the velocity before that joint; the free
joint's rotations use the velocity after its translations and its translations have cdof_dot = 0,
as in MuJoCo). cdof_dot itself is not stored.
``rne``: body forces I a + v x* I v summed over subtrees (cfrc) and qfrc_bias = cdof . cfrc
(gravity + Coriolis/centrifugal, MuJoCo's ``qfrc_bias``).
"""

# No ``from __future__ import annotations``: Warp reads the (closure) type annotations at definition.

from functools import cache
from types import SimpleNamespace

import warp as wp

from bcg_deploy.diffsim import math as dmath
from bcg_deploy.diffsim.types import JNT_FREE, JNT_HINGE, Types


@cache
def build(t: Types, max_children: int) -> SimpleNamespace:
    S, vec3, vec6, vec10 = t.scalar, t.vec3, t.vec6, t.vec10
    mod = dmath.module_name(t)
    mth = dmath.build(t)
    spatial, motion_cross, force_cross, inert_mul = mth.spatial, mth.motion_cross, mth.force_cross, mth.inert_mul
    top, bottom, inert_mul_adj_inertia = mth.top, mth.bottom, mth.inert_mul_adj_inertia
    FREE = wp.constant(JNT_FREE)
    HINGE = wp.constant(JNT_HINGE)

    @wp.func(module=mod)
    def com_vel(
        # Model:
        body_parentid: wp.array(dtype=int),
        body_jnttype: wp.array(dtype=int),
        body_dofadr: wp.array(dtype=int),
        gravity: vec3,
        # Data in:
        e: int,
        qd_in: wp.array2d(dtype=S),
        cdof_in: wp.array2d(dtype=vec6),
        # Data out:
        cvel_out: wp.array2d(dtype=vec6),
        cacc_out: wp.array2d(dtype=vec6),
    ):
        """Spatial velocity (about ref_pos) and bias acceleration (at zero qacc, incl. -gravity) of each body."""
        cvel_out[e, 0] = vec6()
        cacc_out[e, 0] = spatial(vec3(S(0.0), S(0.0), S(0.0)), -gravity)
        for b in range(1, body_parentid.shape[0]):
            jt = body_jnttype[b]
            d = body_dofadr[b]
            v = cvel_out[e, body_parentid[b]]
            acc = cacc_out[e, body_parentid[b]]
            if jt == FREE:
                for i in range(3):
                    v = v + cdof_in[e, d + i] * qd_in[e, d + i]
                for i in range(3):
                    acc = acc + motion_cross(v, cdof_in[e, d + 3 + i]) * qd_in[e, d + 3 + i]
                for i in range(3):
                    v = v + cdof_in[e, d + 3 + i] * qd_in[e, d + 3 + i]
            elif jt == HINGE:
                acc = acc + motion_cross(v, cdof_in[e, d]) * qd_in[e, d]
                v = v + cdof_in[e, d] * qd_in[e, d]
            cvel_out[e, b] = v
            cacc_out[e, b] = acc

    @wp.func_grad(com_vel)
    def adj_com_vel(
        body_parentid: wp.array(dtype=int),
        body_jnttype: wp.array(dtype=int),
        body_dofadr: wp.array(dtype=int),
        gravity: vec3,
        e: int,
        qd_in: wp.array2d(dtype=S),
        cdof_in: wp.array2d(dtype=vec6),
        cvel_out: wp.array2d(dtype=vec6),
        cacc_out: wp.array2d(dtype=vec6),
    ):
        """Hand-written adjoint (children before parents; reads the stored parent velocities). For
        <A, a x b> (motion cross): the adjoint for a is b x* A, for b it is -(a x* A), so <A, a x b> =
        -<a x* A, b>."""
        a_qd = wp.adjoint[qd_in]
        a_cdof = wp.adjoint[cdof_in]
        a_cvel = wp.adjoint[cvel_out]
        a_cacc = wp.adjoint[cacc_out]
        nb = body_parentid.shape[0]
        for r in range(nb - 1):
            b = nb - 1 - r
            jt = body_jnttype[b]
            d = body_dofadr[b]
            p = body_parentid[b]
            av = a_cvel[e, b]
            aa = a_cacc[e, b]
            v = cvel_out[e, p]
            if jt == FREE:
                for i in range(3):
                    v = v + cdof_in[e, d + i] * qd_in[e, d + i]
                a_v = av
                x = force_cross(v, aa)
                for i in range(3):
                    c = cdof_in[e, d + 3 + i]
                    w = qd_in[e, d + 3 + i]
                    a_cdof[e, d + 3 + i] += (av - x) * w
                    a_qd[e, d + 3 + i] += wp.dot(av - x, c)
                    a_v = a_v + force_cross(c, aa * w)
                for i in range(3):
                    a_cdof[e, d + i] += a_v * qd_in[e, d + i]
                    a_qd[e, d + i] += wp.dot(a_v, cdof_in[e, d + i])
                av = a_v
            elif jt == HINGE:
                c = cdof_in[e, d]
                w = qd_in[e, d]
                x = force_cross(v, aa)
                a_cdof[e, d] += (av - x) * w
                a_qd[e, d] += wp.dot(av - x, c)
                av = av + force_cross(c, aa * w)
            a_cvel[e, p] += av
            a_cacc[e, p] += aa

    @wp.func(module=mod)
    def rne(
        # Model:
        body_children: wp.array2d(dtype=int),
        dof_bodyid: wp.array(dtype=int),
        # Data in:
        e: int,
        cinert_in: wp.array2d(dtype=vec10),
        cvel_in: wp.array2d(dtype=vec6),
        cacc_in: wp.array2d(dtype=vec6),
        cdof_in: wp.array2d(dtype=vec6),
        # Data out:
        cfrc_out: wp.array2d(dtype=vec6),
        qfrc_bias_out: wp.array2d(dtype=S),
    ):
        """Subtree forces (children before parents) and bias forces (N, N m)."""
        nb = body_children.shape[0]
        cfrc_out[e, 0] = vec6()
        for r in range(nb - 1):
            b = nb - 1 - r
            ci = cinert_in[e, b]
            vel = cvel_in[e, b]
            f = inert_mul(ci, cacc_in[e, b]) + force_cross(vel, inert_mul(ci, vel))
            for k in range(wp.static(max_children)):
                c = body_children[b, k]
                if c >= 0:
                    f = f + cfrc_out[e, c]
            cfrc_out[e, b] = f
        for i in range(dof_bodyid.shape[0]):
            qfrc_bias_out[e, i] = wp.dot(cdof_in[e, i], cfrc_out[e, dof_bodyid[i]])

    @wp.func(module=mod)
    def force_cross_adj_motion(f: vec6, adj: vec6) -> vec6:
        """Adjoint of ``force_cross(a, f)`` with respect to the motion vector a: (n x A_w + f x A_v, f x A_w)
        for f = (n, f) and adj = (A_w, A_v) (the adjoint for f is -(a x adj), a motion cross)."""
        n = top(f)
        fl = bottom(f)
        aw = top(adj)
        return spatial(wp.cross(n, aw) + wp.cross(fl, bottom(adj)), wp.cross(fl, aw))

    @wp.func_grad(rne)
    def adj_rne(
        body_children: wp.array2d(dtype=int),
        dof_bodyid: wp.array(dtype=int),
        e: int,
        cinert_in: wp.array2d(dtype=vec10),
        cvel_in: wp.array2d(dtype=vec6),
        cacc_in: wp.array2d(dtype=vec6),
        cdof_in: wp.array2d(dtype=vec6),
        cfrc_out: wp.array2d(dtype=vec6),
        qfrc_bias_out: wp.array2d(dtype=S),
    ):
        """Hand-written adjoint: the bias projections, then the bodies parents first (a body's force adjoint
        is final when reached and passes on to its children's); f = I a + v x* (I v) per body."""
        a_cinert = wp.adjoint[cinert_in]
        a_cvel = wp.adjoint[cvel_in]
        a_cacc = wp.adjoint[cacc_in]
        a_cdof = wp.adjoint[cdof_in]
        a_cfrc = wp.adjoint[cfrc_out]
        a_bias = wp.adjoint[qfrc_bias_out]
        for i in range(dof_bodyid.shape[0]):
            g = a_bias[e, i]
            b = dof_bodyid[i]
            a_cdof[e, i] += g * cfrc_out[e, b]
            a_cfrc[e, b] += g * cdof_in[e, i]
        for b in range(1, body_children.shape[0]):
            af = a_cfrc[e, b]
            for k in range(wp.static(max_children)):
                c = body_children[b, k]
                if c >= 0:
                    a_cfrc[e, c] += af
            ci = cinert_in[e, b]
            vel = cvel_in[e, b]
            acc = cacc_in[e, b]
            ah = -motion_cross(vel, af)
            a_cacc[e, b] += inert_mul(ci, af)
            a_cvel[e, b] += force_cross_adj_motion(inert_mul(ci, vel), af) + inert_mul(ci, ah)
            a_cinert[e, b] += inert_mul_adj_inertia(af, acc) + inert_mul_adj_inertia(ah, vel)

    return SimpleNamespace(com_vel=com_vel, rne=rne)
