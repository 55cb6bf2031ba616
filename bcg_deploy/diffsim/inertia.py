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
    mth = dmath.build(t)
    inert_mul, inert_mul_adj_inertia = mth.inert_mul, mth.inert_mul_adj_inertia

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

    @wp.func_grad(crb)
    def adj_crb(
        body_children: wp.array2d(dtype=int),
        e: int,
        cinert_in: wp.array2d(dtype=vec10),
        crb_out: wp.array2d(dtype=vec10),
    ):
        """Hand-written adjoint: parents before children, each body's composite-inertia adjoint is final when
        reached (a parent's adds to its children's) and is its own inertia's adjoint."""
        a_cinert = wp.adjoint[cinert_in]
        a_crb = wp.adjoint[crb_out]
        for b in range(1, body_children.shape[0]):
            g = a_crb[e, b]
            a_cinert[e, b] += g
            for k in range(wp.static(max_children)):
                c = body_children[b, k]
                if c >= 0:
                    a_crb[e, c] += g

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

    @wp.func_grad(mass_matrix)
    def adj_mass_matrix(
        dof_bodyid: wp.array(dtype=int),
        dof_Madr: wp.array(dtype=int),
        dof_Mnum: wp.array(dtype=int),
        M_colind: wp.array(dtype=int),
        dof_armature: wp.array2d(dtype=S),
        e: int,
        cdof_in: wp.array2d(dtype=vec6),
        crb_in: wp.array2d(dtype=vec10),
        dof_damping_in: wp.array2d(dtype=S),
        qM_out: wp.array2d(dtype=S),
    ):
        """Hand-written adjoint of M[i, j] = cdof_j . (I_i cdof_i) (I_i the composite inertia of dof i's body,
        j = i and its ancestors): with a_ij = adj M[i, j] and g_i = sum_j a_ij cdof_j (the adjoint of
        f_i = I_i cdof_i): adj cdof_j += a_ij f_i, adj cdof_i += I_i g_i, adj I_i += (g_i, cdof_i) outer
        product (``inert_mul_adj_inertia``); adj dof_damping_i += a_ii. No armature adjoint (model)."""
        a_cdof = wp.adjoint[cdof_in]
        a_crb = wp.adjoint[crb_in]
        a_damping = wp.adjoint[dof_damping_in]
        a_qM = wp.adjoint[qM_out]
        for i in range(dof_bodyid.shape[0]):
            b = dof_bodyid[i]
            adr = dof_Madr[i]
            ci = cdof_in[e, i]
            inertia = crb_in[e, b]
            f = inert_mul(inertia, ci)
            aii = a_qM[e, adr]
            a_damping[e, i] += aii
            g = aii * ci
            a_cdof[e, i] += aii * f
            for k in range(1, dof_Mnum[i]):
                j = M_colind[adr + k]
                aij = a_qM[e, adr + k]
                g = g + aij * cdof_in[e, j]
                a_cdof[e, j] += aij * f
            a_cdof[e, i] += inert_mul(inertia, g)
            a_crb[e, b] += inert_mul_adj_inertia(g, ci)

    return SimpleNamespace(crb=crb, mass_matrix=mass_matrix)
