"""Stage 4: tree-sparse L^T D L factorisation of M and the velocity update, with a hand-written adjoint.

M = L^T D L with L unit lower-triangular and the sparsity of the dof tree (MuJoCo's mj_factorM /
mj_solveM: no fill-in for a kinematic tree). ``qLD`` holds L's off-diagonal entries and D on the
diagonal slots, in the tree-sparse layout of ``qM``.

Warp does not differentiate these kernels (enable_backward=False: the factorisation updates entries in
place). Instead ``solve_velocity_adjoint`` implements the exact adjoint of x = M^-1 b:
``adj_b = M^-1 adj_x`` (the same factorisation, M is symmetric) and ``adj_M = -adj_b x^T``
(symmetrised onto the stored lower triangle: -(y_i x_j + y_j x_i) off the diagonal, -y_i x_i on it).
"""

# No ``from __future__ import annotations``: Warp reads the (closure) type annotations at definition.

from functools import cache
from types import SimpleNamespace

import warp as wp

from bcg_deploy.diffsim import math as dmath
from bcg_deploy.diffsim.types import Types


@cache
def build(t: Types) -> SimpleNamespace:
    S = t.scalar
    mod = dmath.module_name(t)

    @wp.func(module=mod)
    def ldl_factor(
        # Model:
        dof_Madr: wp.array(dtype=int),
        dof_Mnum: wp.array(dtype=int),
        M_colind: wp.array(dtype=int),
        # Data in:
        e: int,
        qM_in: wp.array2d(dtype=S),
        # Data out:
        qLD_out: wp.array2d(dtype=S),
    ):
        """qLD = L^T D L factorisation of qM, leaves first (mj_factorM)."""
        for k in range(qM_in.shape[1]):
            qLD_out[e, k] = qM_in[e, k]
        nv = dof_Madr.shape[0]
        for r in range(nv):
            k = nv - 1 - r
            adr_k = dof_Madr[k]
            n_k = dof_Mnum[k]
            inv_d = S(1.0) / qLD_out[e, adr_k]
            for m in range(1, n_k):
                i = M_colind[adr_k + m]
                tmp = qLD_out[e, adr_k + m] * inv_d
                adr_i = dof_Madr[i]
                # Row i is the tail of row k from position m: i, parent(i), ...
                for c in range(n_k - m):
                    qLD_out[e, adr_i + c] = qLD_out[e, adr_i + c] - tmp * qLD_out[e, adr_k + m + c]
                qLD_out[e, adr_k + m] = tmp

    @wp.func(module=mod)
    def ldl_solve(
        # Model:
        dof_Madr: wp.array(dtype=int),
        dof_Mnum: wp.array(dtype=int),
        M_colind: wp.array(dtype=int),
        # Data in:
        e: int,
        qLD_in: wp.array2d(dtype=S),
        row: int,
        # Data in/out:
        x: wp.array2d(dtype=S),
    ):
        """x[row] <- M^-1 x[row] in place, with M the matrix of env ``e`` (mj_solveM)."""
        nv = dof_Madr.shape[0]
        for r in range(nv):  # x <- L^-T x
            k = nv - 1 - r
            adr = dof_Madr[k]
            xk = x[row, k]
            for m in range(1, dof_Mnum[k]):
                j = M_colind[adr + m]
                x[row, j] = x[row, j] - qLD_in[e, adr + m] * xk
        for k in range(nv):  # x <- D^-1 x
            x[row, k] = x[row, k] / qLD_in[e, dof_Madr[k]]
        for k in range(nv):  # x <- L^-1 x
            adr = dof_Madr[k]
            acc = x[row, k]
            for m in range(1, dof_Mnum[k]):
                acc = acc - qLD_in[e, adr + m] * x[row, M_colind[adr + m]]
            x[row, k] = acc

    @wp.kernel(module=mod, enable_backward=False)
    def factor_kernel(
        # Model:
        dof_Madr: wp.array(dtype=int),
        dof_Mnum: wp.array(dtype=int),
        M_colind: wp.array(dtype=int),
        # Data in:
        qM_in: wp.array2d(dtype=S),
        # Data out:
        qLD_out: wp.array2d(dtype=S),
    ):
        e = wp.tid()
        ldl_factor(dof_Madr, dof_Mnum, M_colind, e, qM_in, qLD_out)

    @wp.kernel(module=mod, enable_backward=False)
    def solve_velocity_kernel(
        # Model:
        dof_Madr: wp.array(dtype=int),
        dof_Mnum: wp.array(dtype=int),
        M_colind: wp.array(dtype=int),
        # Data in:
        qLD_in: wp.array2d(dtype=S),
        qfrc_smooth_in: wp.array2d(dtype=S),
        qfrc_impulse_in: wp.array2d(dtype=S),
        qd_in: wp.array2d(dtype=S),
        dt: S,
        # Data out:
        dqd_out: wp.array2d(dtype=S),
        qd_out: wp.array2d(dtype=S),
    ):
        """dqd = M^-1 (dt qfrc_smooth + qfrc_impulse); qd+ = qd + dqd. ``qfrc_impulse`` is [*, NV] (N s)."""
        e = wp.tid()
        pi = e % qfrc_impulse_in.shape[0]
        for i in range(dof_Madr.shape[0]):
            dqd_out[e, i] = dt * qfrc_smooth_in[e, i] + qfrc_impulse_in[pi, i]
        ldl_solve(dof_Madr, dof_Mnum, M_colind, e, qLD_in, e, dqd_out)
        for i in range(dof_Madr.shape[0]):
            qd_out[e, i] = qd_in[e, i] + dqd_out[e, i]

    @wp.kernel(module=mod, enable_backward=False)
    def solve_velocity_adjoint_kernel(
        # Model:
        dof_Madr: wp.array(dtype=int),
        dof_Mnum: wp.array(dtype=int),
        M_colind: wp.array(dtype=int),
        # Data in:
        qLD_in: wp.array2d(dtype=S),
        dqd_in: wp.array2d(dtype=S),
        adj_dqd_in: wp.array2d(dtype=S),
        adj_qd_out_in: wp.array2d(dtype=S),
        dt: S,
        # Data out (scratch, then accumulated adjoints):
        adj_rhs_out: wp.array2d(dtype=S),
        adj_qd_in_out: wp.array2d(dtype=S),
        adj_qfrc_smooth_out: wp.array2d(dtype=S),
        adj_qfrc_impulse_out: wp.array2d(dtype=S),
        adj_qM_out: wp.array2d(dtype=S),
    ):
        """Adjoint of ``solve_velocity_kernel``; accumulates (+=) into the adjoint outputs.
        ``adj_qfrc_impulse_out`` may have 0 rows (impulse not differentiated)."""
        e = wp.tid()
        nv = dof_Madr.shape[0]
        for i in range(nv):
            g = adj_qd_out_in[e, i]
            adj_rhs_out[e, i] = g + adj_dqd_in[e, i]
            adj_qd_in_out[e, i] = adj_qd_in_out[e, i] + g
        ldl_solve(dof_Madr, dof_Mnum, M_colind, e, qLD_in, e, adj_rhs_out)
        has_imp = adj_qfrc_impulse_out.shape[0] > 0
        for i in range(nv):
            y = adj_rhs_out[e, i]
            adj_qfrc_smooth_out[e, i] = adj_qfrc_smooth_out[e, i] + dt * y
            if has_imp:
                wp.atomic_add(adj_qfrc_impulse_out, e % adj_qfrc_impulse_out.shape[0], i, y)
            adr = dof_Madr[i]
            xi = dqd_in[e, i]
            adj_qM_out[e, adr] = adj_qM_out[e, adr] - y * xi
            for k in range(1, dof_Mnum[i]):
                j = M_colind[adr + k]
                adj_qM_out[e, adr + k] = adj_qM_out[e, adr + k] - (y * dqd_in[e, j] + adj_rhs_out[e, j] * xi)

    return SimpleNamespace(
        ldl_factor=ldl_factor,
        ldl_solve=ldl_solve,
        factor_kernel=factor_kernel,
        solve_velocity_kernel=solve_velocity_kernel,
        solve_velocity_adjoint_kernel=solve_velocity_adjoint_kernel,
    )
