"""Stage 3: composite rigid-body inertias and the tree-sparse joint-space mass matrix (CRB).

``crb``: composite inertia of each body's subtree (children summed through the model's child lists,
a short loop unrolled at compile time, so no value is carried across a dynamic loop).
``mass_matrix``: M[i, j] = cdof_j . (I^c_body(i) cdof_i) for j = i and the ancestors of i, plus the
joint armature (and the implicit PD damping dt kd, if enabled) on the diagonal; stored row by row
in the tree-sparse layout of ``Model.dof_Madr``.
"""

# No ``from __future__ import annotations``: Warp reads the (closure) type annotations at definition.

from functools import cache
from types import SimpleNamespace

import warp as wp

from bcg_deploy.diffsim import math as dmath
from bcg_deploy.diffsim.types import Types


@cache
def build(t: Types, max_children: int) -> SimpleNamespace:
    S, vec6, vec10 = t.scalar, t.vec6, t.vec10
    mod = dmath.module_name(t)
    inert_mul = dmath.build(t).inert_mul

    @wp.func(module=mod)
    def crb(
        # Model:
        body_children: wp.array2d(dtype=int),
        # Data in:
        e: int,
        cinert_in: wp.array2d(dtype=vec10),
        # Data out:
        crb_out: wp.array2d(dtype=vec10),
    ):
        """Composite inertia of each subtree about ref_pos (children before parents)."""
        nb = body_children.shape[0]
        crb_out[e, 0] = vec10()
        for r in range(nb - 1):
            b = nb - 1 - r
            acc = cinert_in[e, b]
            for k in range(wp.static(max_children)):
                c = body_children[b, k]
                if c >= 0:
                    acc = acc + crb_out[e, c]
            crb_out[e, b] = acc

    @wp.func(module=mod)
    def mass_matrix(
        # Model:
        dof_bodyid: wp.array(dtype=int),
        dof_Madr: wp.array(dtype=int),
        dof_Mnum: wp.array(dtype=int),
        M_colind: wp.array(dtype=int),
        dof_armature: wp.array2d(dtype=S),
        # Data in:
        e: int,
        cdof_in: wp.array2d(dtype=vec6),
        crb_in: wp.array2d(dtype=vec10),
        dof_damping_in: wp.array2d(dtype=S),
        # Data out:
        qM_out: wp.array2d(dtype=S),
    ):
        """Tree-sparse M (kg m^2, kg, kg m) including armature and the implicit PD damping dt kd."""
        pe = e % dof_armature.shape[0]
        for i in range(dof_bodyid.shape[0]):
            f = inert_mul(crb_in[e, dof_bodyid[i]], cdof_in[e, i])
            adr = dof_Madr[i]
            qM_out[e, adr] = wp.dot(cdof_in[e, i], f) + dof_armature[pe, i] + dof_damping_in[e, i]
            for k in range(1, dof_Mnum[i]):
                qM_out[e, adr + k] = wp.dot(cdof_in[e, M_colind[adr + k]], f)

    return SimpleNamespace(crb=crb, mass_matrix=mass_matrix)
