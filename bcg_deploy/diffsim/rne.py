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

    return SimpleNamespace(com_vel=com_vel, rne=rne)
