"""Small Warp functions for rigid-body maths, built once per precision (``build(types)``).

Spatial conventions (Featherstone, world-aligned, about the env's reference point): a motion vector
is ``(angular, linear)``, a force vector ``(torque, force)``. A spatial inertia is packed in a vec10
``(Ixx, Iyy, Izz, Ixy, Ixz, Iyz, hx, hy, hz, m)``: the rotational inertia about the reference point,
the first mass moment ``h = m * c`` (``c`` the CoM relative to the reference point) and the mass.
Quaternions are Warp's ``(x, y, z, w)``.
"""

# No ``from __future__ import annotations``: Warp reads the (closure) type annotations at definition.

from functools import cache
from types import SimpleNamespace

import warp as wp

from bcg_deploy.diffsim.types import Types

# Below this squared half-angle the quaternion exponential uses its Taylor series (smooth at 0).
_SMALL_HALF_ANGLE_SQ = 1.0e-6


def module_name(t: Types) -> str:
    """The Warp module that holds every function and kernel of precision ``t``."""
    return f"bcg_diffsim_{t.name}"


@cache
def build(t: Types) -> SimpleNamespace:
    S, vec3, vec6, vec10, quat, mat33 = t.scalar, t.vec3, t.vec6, t.vec10, t.quat, t.mat33
    mod = module_name(t)
    small = S(_SMALL_HALF_ANGLE_SQ)

    @wp.func(module=mod)
    def spatial(a: vec3, b: vec3) -> vec6:
        return vec6(a[0], a[1], a[2], b[0], b[1], b[2])

    @wp.func(module=mod)
    def top(v: vec6) -> vec3:
        return vec3(v[0], v[1], v[2])

    @wp.func(module=mod)
    def bottom(v: vec6) -> vec3:
        return vec3(v[3], v[4], v[5])

    @wp.func(module=mod)
    def motion_cross(a: vec6, b: vec6) -> vec6:
        """a x b for motion vectors: (wa x wb, wa x vb + va x wb)."""
        wa = top(a)
        wb = top(b)
        return spatial(wp.cross(wa, wb), wp.cross(wa, bottom(b)) + wp.cross(bottom(a), wb))

    @wp.func(module=mod)
    def force_cross(a: vec6, f: vec6) -> vec6:
        """a x* f for a motion vector a and a force vector f: (wa x n + va x f, wa x f)."""
        wa = top(a)
        ff = bottom(f)
        return spatial(wp.cross(wa, top(f)) + wp.cross(bottom(a), ff), wp.cross(wa, ff))

    @wp.func(module=mod)
    def inert_mul(c: vec10, v: vec6) -> vec6:
        """Spatial inertia times motion: (I w + h x u, m u - h x w)."""
        w = top(v)
        u = bottom(v)
        h = vec3(c[6], c[7], c[8])
        iw = vec3(
            c[0] * w[0] + c[3] * w[1] + c[4] * w[2],
            c[3] * w[0] + c[1] * w[1] + c[5] * w[2],
            c[4] * w[0] + c[5] * w[1] + c[2] * w[2],
        )
        return spatial(iw + wp.cross(h, u), c[9] * u - wp.cross(h, w))

    @wp.func(module=mod)
    def inert_mul_adj_inertia(adj_ret: vec6, v: vec6) -> vec10:
        """Adjoint of inert_mul(c, v) with respect to c: for I w it is adj_top w^T (symmetrised on the 6
        stored entries), for h it is u x adj_top - w x adj_bottom, for m it is adj_bottom . u."""
        w = top(v)
        u = bottom(v)
        at = top(adj_ret)
        ab = bottom(adj_ret)
        ah = wp.cross(u, at) - wp.cross(w, ab)
        return vec10(
            at[0] * w[0], at[1] * w[1], at[2] * w[2],
            at[0] * w[1] + at[1] * w[0], at[0] * w[2] + at[2] * w[0], at[1] * w[2] + at[2] * w[1],
            ah[0], ah[1], ah[2], wp.dot(ab, u),
        )  # fmt: skip

    @wp.func_grad(inert_mul)
    def adj_inert_mul(c: vec10, v: vec6, adj_ret: vec6):
        # The spatial inertia is symmetric: adj_v = I adj_ret.
        wp.adjoint[v] += inert_mul(c, adj_ret)
        wp.adjoint[c] += inert_mul_adj_inertia(adj_ret, v)

    @wp.func(module=mod)
    def rotation(q: quat) -> mat33:
        """Rotation matrix of a unit quaternion (x, y, z, w)."""
        x = q[0]
        y = q[1]
        z = q[2]
        w = q[3]
        one = S(1.0)
        two = S(2.0)
        return mat33(
            one - two * (y * y + z * z), two * (x * y - z * w), two * (x * z + y * w),
            two * (x * y + z * w), one - two * (x * x + z * z), two * (y * z - x * w),
            two * (x * z - y * w), two * (y * z + x * w), one - two * (x * x + y * y),
        )  # fmt: skip

    @wp.func(module=mod)
    def cinert_world(pos: vec3, rot: quat, mass: S, ipos: vec3, ib: mat33) -> vec10:
        """Spatial inertia about the reference point of a body at ``pos`` (relative) with orientation
        ``rot``: CoM c = pos + R ipos, I = R ib R^T + m (|c|^2 1 - c c^T), h = m c (``ib``: inertia
        about the CoM in the body frame). Hand-written adjoint (pos, rot only) below."""
        R = rotation(rot)
        c = pos + R * ipos
        A = R * ib
        x = c[0]
        y = c[1]
        z = c[2]
        return vec10(
            wp.dot(A[0], R[0]) + mass * (y * y + z * z),
            wp.dot(A[1], R[1]) + mass * (x * x + z * z),
            wp.dot(A[2], R[2]) + mass * (x * x + y * y),
            wp.dot(A[0], R[1]) - mass * x * y,
            wp.dot(A[0], R[2]) - mass * x * z,
            wp.dot(A[1], R[2]) - mass * y * z,
            mass * x,
            mass * y,
            mass * z,
            mass,
        )

    @wp.func(module=mod)
    def rotation_adj(q: quat, aR: mat33) -> quat:
        """Adjoint of ``rotation`` (the polynomial formula above, for any q): sum_ij aR_ij dR_ij/dq."""
        x = q[0]
        y = q[1]
        z = q[2]
        w = q[3]
        two = S(2.0)
        gx = two * (y * (aR[0, 1] + aR[1, 0]) + z * (aR[0, 2] + aR[2, 0]) + w * (aR[2, 1] - aR[1, 2]))
        gx = gx - S(4.0) * x * (aR[1, 1] + aR[2, 2])
        gy = two * (x * (aR[0, 1] + aR[1, 0]) + z * (aR[1, 2] + aR[2, 1]) + w * (aR[0, 2] - aR[2, 0]))
        gy = gy - S(4.0) * y * (aR[0, 0] + aR[2, 2])
        gz = two * (x * (aR[0, 2] + aR[2, 0]) + y * (aR[1, 2] + aR[2, 1]) + w * (aR[1, 0] - aR[0, 1]))
        gz = gz - S(4.0) * z * (aR[0, 0] + aR[1, 1])
        gw = two * (x * (aR[2, 1] - aR[1, 2]) + y * (aR[0, 2] - aR[2, 0]) + z * (aR[1, 0] - aR[0, 1]))
        return quat(gx, gy, gz, gw)

    @wp.func(module=mod)
    def cinert_world_adj(pos: vec3, R: mat33, mass: S, ipos: vec3, ib: mat33, adj_ret: vec10):
        """Adjoint of ``cinert_world`` with respect to ``pos`` and the rotation matrix ``R = rotation(rot)``:
        returns (adj_pos, adj_R); ``rotation_adj`` maps adj_R to the quaternion."""
        # G: symmetric matrix with <G, I> = sum_k adj_k I_k over the 6 stored entries of I.
        half = S(0.5)
        G = mat33(
            adj_ret[0], half * adj_ret[3], half * adj_ret[4],
            half * adj_ret[3], adj_ret[1], half * adj_ret[5],
            half * adj_ret[4], half * adj_ret[5], adj_ret[2],
        )  # fmt: skip
        c = pos + R * ipos
        # d<G, R ib R^T> = 2 <G R ib, dR>;  d<G, m(|c|^2 1 - c c^T)>/dc = 2 m (tr(G) c - G c);  h = m c.
        adj_c = S(2.0) * mass * ((G[0, 0] + G[1, 1] + G[2, 2]) * c - G * c)
        adj_c = adj_c + mass * vec3(adj_ret[6], adj_ret[7], adj_ret[8])
        aR = S(2.0) * G * R * ib + wp.outer(adj_c, ipos)
        return adj_c, aR

    @wp.func_grad(cinert_world)
    def adj_cinert_world(pos: vec3, rot: quat, mass: S, ipos: vec3, ib: mat33, adj_ret: vec10):
        adj_pos, aR = cinert_world_adj(pos, rotation(rot), mass, ipos, ib, adj_ret)
        wp.adjoint[pos] += adj_pos
        wp.adjoint[rot] += rotation_adj(rot, aR)

    @wp.func(module=mod)
    def quat_conj(q: quat) -> quat:
        return quat(-q[0], -q[1], -q[2], q[3])

    @wp.func(module=mod)
    def quat_rotate_adj(q: quat, v: vec3, a: vec3) -> quat:
        """Adjoint with respect to q of Warp's ``quat_rotate(q, v) = (2 w^2 - 1) v + 2 (u . v) u + 2 w u x v``
        (u = q.xyz, the formula for any q) for the output adjoint ``a``; (the adjoint for v is
        ``quat_rotate_inv(q, a)``)."""
        u = vec3(q[0], q[1], q[2])
        w = q[3]
        two = S(2.0)
        gu = two * (wp.dot(a, u) * v + wp.dot(u, v) * a + w * wp.cross(v, a))
        gw = S(4.0) * w * wp.dot(a, v) + two * wp.dot(a, wp.cross(u, v))
        return quat(gu[0], gu[1], gu[2], gw)

    @wp.func(module=mod)
    def quat_integrate(qt: quat, w: vec3, scale: S) -> quat:
        """``qt * exp(scale * w)``: rotate by the angle ``scale |w|`` about the LOCAL axis ``w``
        (MuJoCo's mju_quatIntegrate). Smooth (and differentiable) at ``w = 0``."""
        n2 = wp.dot(w, w)
        phi2 = scale * scale * n2 * S(0.25)  # squared half angle
        c = S(1.0) - phi2 * S(0.5) + phi2 * phi2 / S(24.0)
        k = scale * S(0.5) * (S(1.0) - phi2 / S(6.0) + phi2 * phi2 / S(120.0))
        if phi2 > small:
            n = wp.sqrt(n2)
            phi = scale * n * S(0.5)
            c = wp.cos(phi)
            k = wp.sin(phi) / n
        return qt * quat(k * w[0], k * w[1], k * w[2], c)

    return SimpleNamespace(
        spatial=spatial,
        top=top,
        bottom=bottom,
        motion_cross=motion_cross,
        force_cross=force_cross,
        inert_mul=inert_mul,
        inert_mul_adj_inertia=inert_mul_adj_inertia,
        quat_integrate=quat_integrate,
        rotation=rotation,
        rotation_adj=rotation_adj,
        cinert_world=cinert_world,
        cinert_world_adj=cinert_world_adj,
        quat_conj=quat_conj,
        quat_rotate_adj=quat_rotate_adj,
    )
