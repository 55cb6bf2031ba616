"""Stage 1: midpoint configuration and forward kinematics (per env, loops over the tree).

``midpoint``: q_mid = q + (h) qd with the free-joint quaternion integrated on the manifold.
``kinematics``: body frames, body spatial inertias and dof motion axes at q_mid, all relative to the
env's reference point ``ref_pos`` (the base position at q_mid).

Tape safety: every per-body value is written once into an output array and read back from it by the
children; no value is carried in a local variable across iterations of a dynamic loop.
"""

# No ``from __future__ import annotations``: Warp reads the (closure) type annotations at definition.

from functools import cache
from types import SimpleNamespace

import warp as wp

from bcg_deploy.diffsim import math as dmath
from bcg_deploy.diffsim.types import JNT_FREE, JNT_HINGE, Types


@cache
def build(t: Types, has_jnt_pos: bool = True) -> SimpleNamespace:
    """``has_jnt_pos=False`` compiles out the hinge-anchor offsets (every ``jnt_pos`` of the model is 0)."""
    S, vec3, vec6, vec10, quat, mat33 = t.scalar, t.vec3, t.vec6, t.vec10, t.quat, t.mat33
    mod = dmath.module_name(t)
    mth = dmath.build(t)
    spatial, quat_integrate, rotation, cinert_world = mth.spatial, mth.quat_integrate, mth.rotation, mth.cinert_world
    top, bottom, rotation_adj, cinert_world_adj = mth.top, mth.bottom, mth.rotation_adj, mth.cinert_world_adj
    quat_conj, quat_rotate_adj = mth.quat_conj, mth.quat_rotate_adj
    FREE = wp.constant(JNT_FREE)
    HINGE = wp.constant(JNT_HINGE)

    @wp.func(module=mod)
    def midpoint(
        # Model:
        body_jnttype: wp.array(dtype=int),
        body_qposadr: wp.array(dtype=int),
        body_dofadr: wp.array(dtype=int),
        # Data in:
        e: int,
        q_in: wp.array2d(dtype=S),
        qd_in: wp.array2d(dtype=S),
        h: S,
        # Data out:
        q_mid_out: wp.array2d(dtype=S),
        ref_pos_out: wp.array(dtype=vec3),
    ):
        """q_mid = q + h qd (h = dt/2 in a substep, 0 to evaluate at q). The free joint's position moves
        with the world-frame velocity, its (normalised) quaternion with the local angular velocity."""
        ref_pos_out[e] = vec3(S(0.0), S(0.0), S(0.0))
        for b in range(1, body_jnttype.shape[0]):
            jt = body_jnttype[b]
            a = body_qposadr[b]
            d = body_dofadr[b]
            if jt == FREE:
                pos = vec3(q_in[e, a], q_in[e, a + 1], q_in[e, a + 2])
                pos = pos + h * vec3(qd_in[e, d], qd_in[e, d + 1], qd_in[e, d + 2])
                rot = wp.normalize(quat(q_in[e, a + 4], q_in[e, a + 5], q_in[e, a + 6], q_in[e, a + 3]))
                rot = quat_integrate(rot, vec3(qd_in[e, d + 3], qd_in[e, d + 4], qd_in[e, d + 5]), h)
                q_mid_out[e, a] = pos[0]
                q_mid_out[e, a + 1] = pos[1]
                q_mid_out[e, a + 2] = pos[2]
                q_mid_out[e, a + 3] = rot[3]
                q_mid_out[e, a + 4] = rot[0]
                q_mid_out[e, a + 5] = rot[1]
                q_mid_out[e, a + 6] = rot[2]
                if b == 1:
                    ref_pos_out[e] = pos
            elif jt == HINGE:
                q_mid_out[e, a] = q_in[e, a] + h * qd_in[e, d]

    @wp.func(module=mod)
    def kinematics(
        # Model:
        body_parentid: wp.array(dtype=int),
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
        # Data in:
        e: int,
        q_mid_in: wp.array2d(dtype=S),
        ref_pos_in: wp.array(dtype=vec3),
        # Data out:
        xpos_out: wp.array2d(dtype=vec3),
        xquat_out: wp.array2d(dtype=quat),
        cinert_out: wp.array2d(dtype=vec10),
        cdof_out: wp.array2d(dtype=vec6),
    ):
        """Body frames (origin relative to ref_pos; world orientation), body spatial inertias about
        ref_pos and dof motion axes (MuJoCo cdof: free translations along world axes, free rotations
        about the body's local axes through its origin, hinges about their world axis and anchor)."""
        pm = e % body_mass.shape[0]
        pp = e % body_ipos.shape[0]
        pi = e % body_inertia_mat.shape[0]
        zero3 = vec3(S(0.0), S(0.0), S(0.0))
        xpos_out[e, 0] = -ref_pos_in[e]
        xquat_out[e, 0] = quat(S(0.0), S(0.0), S(0.0), S(1.0))
        cinert_out[e, 0] = vec10()
        for b in range(1, body_parentid.shape[0]):
            jt = body_jnttype[b]
            a = body_qposadr[b]
            d = body_dofadr[b]
            p = body_parentid[b]
            pos = xpos_out[e, p] + wp.quat_rotate(xquat_out[e, p], body_pos[b])
            rot = xquat_out[e, p] * body_quat[b]
            anchor = pos
            if jt == FREE:
                # q_mid's quaternion is unit; its position is ref_pos for the base (body 1).
                pos = vec3(q_mid_in[e, a], q_mid_in[e, a + 1], q_mid_in[e, a + 2]) - ref_pos_in[e]
                rot = quat(q_mid_in[e, a + 4], q_mid_in[e, a + 5], q_mid_in[e, a + 6], q_mid_in[e, a + 3])
            elif jt == HINGE:
                if wp.static(has_jnt_pos):
                    anchor = pos + wp.quat_rotate(rot, jnt_pos[b])
                rot = rot * wp.quat_from_axis_angle(jnt_axis[b], q_mid_in[e, a])
                if wp.static(has_jnt_pos):
                    pos = anchor - wp.quat_rotate(rot, jnt_pos[b])
            xpos_out[e, b] = pos
            xquat_out[e, b] = rot
            R = rotation(rot)
            if jt == FREE:
                for i in range(3):
                    lin = zero3
                    lin[i] = S(1.0)
                    cdof_out[e, d + i] = spatial(zero3, lin)
                    ax = vec3(R[0, i], R[1, i], R[2, i])
                    cdof_out[e, d + 3 + i] = spatial(ax, wp.cross(pos, ax))
            elif jt == HINGE:
                ax = R * jnt_axis[b]
                cdof_out[e, d] = spatial(ax, wp.cross(anchor, ax))
            cinert_out[e, b] = cinert_world(pos, rot, body_mass[pm, b], body_ipos[pp, b], body_inertia_mat[pi, b])

    @wp.func_grad(kinematics)
    def adj_kinematics(
        body_parentid: wp.array(dtype=int),
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
        e: int,
        q_mid_in: wp.array2d(dtype=S),
        ref_pos_in: wp.array(dtype=vec3),
        xpos_out: wp.array2d(dtype=vec3),
        xquat_out: wp.array2d(dtype=quat),
        cinert_out: wp.array2d(dtype=vec10),
        cdof_out: wp.array2d(dtype=vec6),
    ):
        """Hand-written adjoint of ``kinematics`` (children before parents; no model-parameter adjoints).

        Reads the stored frames instead of recomputing the chain: with rot = xquat[parent] body_quat qa(angle)
        (unit quaternions), d rot / d angle = rot (axis, 0) / 2 and the parent's adjoint through rot is
        a_rot conj(rot) xquat[parent]."""
        a_q = wp.adjoint[q_mid_in]
        a_ref = wp.adjoint[ref_pos_in]
        a_xpos = wp.adjoint[xpos_out]
        a_xquat = wp.adjoint[xquat_out]
        a_cinert = wp.adjoint[cinert_out]
        a_cdof = wp.adjoint[cdof_out]
        pm = e % body_mass.shape[0]
        pp = e % body_ipos.shape[0]
        pi = e % body_inertia_mat.shape[0]
        half = S(0.5)
        nb = body_parentid.shape[0]
        for r in range(nb - 1):
            b = nb - 1 - r
            jt = body_jnttype[b]
            a = body_qposadr[b]
            d = body_dofadr[b]
            p = body_parentid[b]
            pos = xpos_out[e, b]
            rot = xquat_out[e, b]
            R = rotation(rot)
            a_pos, aR = cinert_world_adj(
                pos, R, body_mass[pm, b], body_ipos[pp, b], body_inertia_mat[pi, b], a_cinert[e, b]
            )
            a_pos = a_pos + a_xpos[e, b]
            a_rot = a_xquat[e, b]
            if jt == FREE:
                for i in range(3):
                    g = a_cdof[e, d + 3 + i]
                    ax = vec3(R[0, i], R[1, i], R[2, i])
                    unit = vec3(S(0.0), S(0.0), S(0.0))
                    unit[i] = S(1.0)
                    aR = aR + wp.outer(top(g) + wp.cross(bottom(g), pos), unit)
                    a_pos = a_pos + wp.cross(ax, bottom(g))
                a_rot = a_rot + rotation_adj(rot, aR)
                a_q[e, a] += a_pos[0]
                a_q[e, a + 1] += a_pos[1]
                a_q[e, a + 2] += a_pos[2]
                a_q[e, a + 3] += a_rot[3]
                a_q[e, a + 4] += a_rot[0]
                a_q[e, a + 5] += a_rot[1]
                a_q[e, a + 6] += a_rot[2]
                a_ref[e] += -a_pos
            else:
                q_p = xquat_out[e, p]
                if jt == HINGE:
                    axis = jnt_axis[b]
                    ax = R * axis
                    g = a_cdof[e, d]
                    anchor = pos
                    if wp.static(has_jnt_pos):
                        anchor = pos + wp.quat_rotate(rot, jnt_pos[b])
                    aR = aR + wp.outer(top(g) + wp.cross(bottom(g), anchor), axis)
                    a_anchor = wp.cross(ax, bottom(g)) + a_pos
                    a_rot = a_rot + rotation_adj(rot, aR)
                    if wp.static(has_jnt_pos):
                        a_rot = a_rot - quat_rotate_adj(rot, jnt_pos[b], a_pos)
                    # rot = xquat[p] body_quat qa(angle) (unit quaternions). With v = a_rot conj(rot):
                    # adj_angle = <a_rot, rot (axis, 0)> / 2 = <v, (R axis, 0)> / 2, and the adjoint for
                    # xquat[p] through rot is a_rot conj(body_quat qa) = v xquat[p].
                    v = a_rot * quat_conj(rot)
                    a_q[e, a] += half * (v[0] * ax[0] + v[1] * ax[1] + v[2] * ax[2])
                    a_qp = v * q_p
                    if wp.static(has_jnt_pos):
                        # anchor = pos0 + quat_rotate(rot0, jnt_pos) with rot0 = xquat[p] body_quat.
                        rot0 = q_p * body_quat[b]
                        a_qp = a_qp + quat_rotate_adj(rot0, jnt_pos[b], a_anchor) * quat_conj(body_quat[b])
                    # pos0 = xpos[p] + quat_rotate(xquat[p], body_pos).
                    a_xpos[e, p] += a_anchor
                    a_xquat[e, p] += quat_rotate_adj(q_p, body_pos[b], a_anchor) + a_qp
                else:
                    # A welded body: pos = pos0, rot = rot0 = xquat[p] body_quat.
                    a_rot = a_rot + rotation_adj(rot, aR)
                    a_xpos[e, p] += a_pos
                    a_xquat[e, p] += quat_rotate_adj(q_p, body_pos[b], a_pos) + a_rot * quat_conj(body_quat[b])
        a_ref[e] += -a_xpos[e, 0]

    return SimpleNamespace(midpoint=midpoint, kinematics=kinematics)
