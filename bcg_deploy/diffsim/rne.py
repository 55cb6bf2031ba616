"""Stage 2: velocities and bias forces by recursive Newton-Euler (MuJoCo's mj_comVel + mj_rne).

``com_vel``: body spatial velocities cvel and the dof-axis rates cdof_dot = cvel_parent x cdof
(free joint: translations 0, rotations use the velocity after the translations, as MuJoCo does).
``rne``: bias accelerations (world "acceleration" = -gravity), body forces, subtree sums and
qfrc_bias = cdof . cfrc (gravity + Coriolis/centrifugal, MuJoCo's ``qfrc_bias``).
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
    FREE = wp.constant(JNT_FREE)
    HINGE = wp.constant(JNT_HINGE)

    @wp.func(module=mod)
    def com_vel(
        # Model:
        body_parentid: wp.array(dtype=int),
        body_jnttype: wp.array(dtype=int),
        body_dofadr: wp.array(dtype=int),
        # Data in:
        e: int,
        qd_in: wp.array2d(dtype=S),
        cdof_in: wp.array2d(dtype=vec6),
        # Data out:
        cvel_out: wp.array2d(dtype=vec6),
        cdof_dot_out: wp.array2d(dtype=vec6),
    ):
        """Spatial velocity of each body (about ref_pos) and the time derivative of each dof axis."""
        cvel_out[e, 0] = vec6()
        for b in range(1, body_parentid.shape[0]):
            jt = body_jnttype[b]
            d = body_dofadr[b]
            v = cvel_out[e, body_parentid[b]]
            if jt == FREE:
                for i in range(3):
                    cdof_dot_out[e, d + i] = vec6()
                    v = v + cdof_in[e, d + i] * qd_in[e, d + i]
                for i in range(3):
                    cdof_dot_out[e, d + 3 + i] = motion_cross(v, cdof_in[e, d + 3 + i])
                for i in range(3):
                    v = v + cdof_in[e, d + 3 + i] * qd_in[e, d + 3 + i]
            elif jt == HINGE:
                cdof_dot_out[e, d] = motion_cross(v, cdof_in[e, d])
                v = v + cdof_in[e, d] * qd_in[e, d]
            cvel_out[e, b] = v

    @wp.func(module=mod)
    def rne(
        # Model:
        body_parentid: wp.array(dtype=int),
        body_jnttype: wp.array(dtype=int),
        body_dofadr: wp.array(dtype=int),
        body_children: wp.array2d(dtype=int),
        dof_bodyid: wp.array(dtype=int),
        gravity: vec3,
        # Data in:
        e: int,
        qd_in: wp.array2d(dtype=S),
        cinert_in: wp.array2d(dtype=vec10),
        cvel_in: wp.array2d(dtype=vec6),
        cdof_in: wp.array2d(dtype=vec6),
        cdof_dot_in: wp.array2d(dtype=vec6),
        # Data out:
        cacc_out: wp.array2d(dtype=vec6),
        cfrc_body_out: wp.array2d(dtype=vec6),
        cfrc_out: wp.array2d(dtype=vec6),
        qfrc_bias_out: wp.array2d(dtype=S),
    ):
        """Bias forces at zero joint acceleration (N, N m)."""
        nb = body_parentid.shape[0]
        cacc_out[e, 0] = spatial(vec3(S(0.0), S(0.0), S(0.0)), -gravity)
        for b in range(1, nb):
            jt = body_jnttype[b]
            d = body_dofadr[b]
            acc = cacc_out[e, body_parentid[b]]
            if jt == FREE:
                for i in range(6):
                    acc = acc + cdof_dot_in[e, d + i] * qd_in[e, d + i]
            elif jt == HINGE:
                acc = acc + cdof_dot_in[e, d] * qd_in[e, d]
            cacc_out[e, b] = acc
            ci = cinert_in[e, b]
            vel = cvel_in[e, b]
            cfrc_body_out[e, b] = inert_mul(ci, acc) + force_cross(vel, inert_mul(ci, vel))
        cfrc_out[e, 0] = vec6()
        for r in range(nb - 1):
            b = nb - 1 - r
            f = cfrc_body_out[e, b]
            for k in range(wp.static(max_children)):
                c = body_children[b, k]
                if c >= 0:
                    f = f + cfrc_out[e, c]
            cfrc_out[e, b] = f
        for i in range(dof_bodyid.shape[0]):
            qfrc_bias_out[e, i] = wp.dot(cdof_in[e, i], cfrc_out[e, dof_bodyid[i]])

    return SimpleNamespace(com_vel=com_vel, rne=rne)
