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
    S, vec3, vec6, vec10, quat = t.scalar, t.vec3, t.vec6, t.vec10, t.quat
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
        quat_integrate=quat_integrate,
    )
