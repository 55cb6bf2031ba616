"""Stage 3c: stiff, analytically smoothed foot contact (Schwarke et al., METHOD.md section 2).

Each foot carries contact spheres (``RobotSpec.foot_contact_points``) against the plane z = 0. At the
substep's midpoint configuration:

1. ``contact_frames``: contact point (bottom of the sphere, relative to ``ref_pos``), penetration
   ``d = radius - z_centre`` (m, > 0 penetrating) and the point Jacobian ``Jc`` [3 NC, NV] (world
   x, y, z rows per contact) from the dof motion axes ``cdof``.
2. ``contact_minv_jt``: ``Y = M^-1 Jc^T`` (stored as rows ``Y[r] = M^-1 Jc[r]``) with the tree-sparse
   factorisation; not differentiated by Warp, its exact adjoint is ``contact_minv_jt_adjoint``.
3. ``contact_solve``: Delassus blocks ``G_ij = Jc_i Y_j^T`` (1/kg), free contact velocity
   ``c = Jc qd + dt Y qfrc_smooth`` (m/s; plastic impact, no restitution, no Baumgarte), warm start
   ``p_i = -G_ii^-1 c_i``, ``iterations`` sweeps of projected Gauss-Seidel with the coupling terms
   ``G_ij p_j`` (j != i) scaled by ``s(d_j)`` (symmetric: even sweeps visit the contacts forward, odd
   sweeps backward, so neither order is favoured), Coulomb-cone projection, and the returned impulse
   ``p_i s(d_i)`` (N s) with ``s(d) = 1 / (1 + exp(-kappa d))`` (exponent clamped to [-50, 50]).
   Every sweep writes its own slice of ``p_iter``: nothing is updated in place, so Warp's adjoint
   of the unrolled iterations is exact.
4. ``contact_force``: ``qfrc_impulse = Jc^T p`` (N s), consumed by the velocity update
   ``qd+ = qd + M^-1 (dt qfrc_smooth + qfrc_impulse)``.

Decision (measured): METHOD's scalar step
``p_i <- proj(p_i - r_i (sum_j G_ij p_j + c_i))`` is kept, with ``r_i = 1.8 / ||G_ii||_F`` instead of
``1 / (1 + sum_j det G_ij)``. For the G1 (four rigidly coupled spheres per foot, det G_ij ~ 0.02) METHOD's r_i
needs ~100 sweeps (the home pose at 10x gains falls within 3 s at kappa 300 with 10). With ``p' = s(d) p``
the unprojected system is symmetric positive definite (``G + blockdiag((1/s_i - 1) G_ii)``), so the sweep
converges for ``r_i lambda_max(G_ii) < 2``; ``||G_ii||_F >= lambda_max`` makes 1.8 a safe over-relaxation.
The earlier per-component step ``diag(G_ii)^-1`` (``step="component"``) converged in value but not in
slope: at a foot resting on two heel spheres its one-step Jacobian reached 3.2e6 (21.6 with this step).
"""

# No ``from __future__ import annotations``: Warp reads the (closure) type annotations at definition.

from dataclasses import dataclass
from functools import cache
from types import SimpleNamespace

import numpy as np
import warp as wp

from bcg_deploy.diffsim import math as dmath
from bcg_deploy.diffsim import solve as dsolve
from bcg_deploy.diffsim.tape import launch_cmd
from bcg_deploy.diffsim.types import Types

# s(d) exponent clamp, so that neither the value nor its gradient overflows.
SIGMOID_CLAMP = 50.0
# |det G_ii| below this (1/kg^3) is treated as singular: the contact gets no warm start.
SINGULAR_DET = 1.0e-12
# The "scalar" step r_i = SCALAR_RELAXATION / ||G_ii||_F (kg): a Gauss-Seidel sweep of the unprojected
# (symmetric after the substitution p' = s(d) p) system converges for r_i lambda_max(G_ii) < 2, and
# ||G_ii||_F >= lambda_max(G_ii).
SCALAR_RELAXATION = 1.8
# Gauss-Seidel steps (``ContactModel.step``, a launch argument of ``contact_pgs_kernel``).
STEPS = {"component": 0, "scalar": 1}


def _row_solve_code(tree: tuple, ctype: str) -> str:
    nv = len(tree[0])
    return "\n".join(
        [
            f"const {ctype}* L = &wp::index(qLD, e, 0);",
            f"{ctype} x[{nv}];",
            f"for (int i = 0; i < {nv}; ++i) x[i] = wp::index(src, row, i);",
            *dsolve.solve_code(tree, "x", "L"),
            f"for (int i = 0; i < {nv}; ++i) wp::index(dst, row, i) = x[i];",
        ]
    )


def _row_adjoint_code(tree: tuple, ctype: str) -> str:
    """jac_bar[row] += M^-1 y_bar[row]; qM_bar -= sym(z x^T) with x = y_val[row] (the solve's output) and
    z = M^-1 y_bar[row] (``*_bar`` are adjoints; Warp reserves the ``adj_`` prefix in native functions)."""
    nv = len(tree[0])
    out = [
        f"const {ctype}* L = &wp::index(qLD, e, 0);",
        f"const {ctype}* x = &wp::index(y_val, row, 0);",
        f"{ctype}* aM = &wp::index(qM_bar, e, 0);",
        f"{ctype} y[{nv}];",
        f"for (int i = 0; i < {nv}; ++i) y[i] = wp::index(y_bar, row, i);",
        *dsolve.solve_code(tree, "y", "L"),
        f"for (int i = 0; i < {nv}; ++i) wp::index(jac_bar, row, i) += y[i];",
    ]
    out.extend(dsolve.adjoint_M_code(tree, "aM", "y", "x"))
    return "\n".join(out)


@cache
def build(t: Types, num_contacts: int, tree: tuple) -> SimpleNamespace:
    """Contact kernels for ``num_contacts`` spheres (a compile-time constant: the contact loops are
    unrolled, see ``contact_pgs_kernel``) and the mass-matrix sparsity ``tree`` (``solve.tree_key``: the
    M^-1 products are generated straight-line code for that tree); the number of sweeps is a launch
    argument."""
    S, vec3, vec6, quat, mat33 = t.scalar, t.vec3, t.vec6, t.quat, t.mat33
    mod = f"{dmath.module_name(t)}_contact{num_contacts}"
    mth = dmath.build(t)
    top, bottom = mth.top, mth.bottom
    NC = wp.constant(num_contacts)
    ctype = "wp::float32" if t.name == "float32" else "wp::float64"
    tag = f"{t.name}_{abs(hash(tree)) % 10**10}"

    def solve_row(qLD: wp.array2d(dtype=S), e: int, src: wp.array2d(dtype=S), row: int, dst: wp.array2d(dtype=S)): ...

    def solve_row_adjoint(
        qLD: wp.array2d(dtype=S),
        e: int,
        y_val: wp.array2d(dtype=S),
        y_bar: wp.array2d(dtype=S),
        row: int,
        jac_bar: wp.array2d(dtype=S),
        qM_bar: wp.array2d(dtype=S),
    ): ...

    solve_row.__qualname__ = f"contact_solve_row_{tag}"
    solve_row_adjoint.__qualname__ = f"contact_solve_row_adjoint_{tag}"
    none = "/* not differentiated by Warp: see contact_minv_jt_adjoint_kernel */"
    solve_row = wp.func_native(_row_solve_code(tree, ctype), adj_snippet=none, replay_snippet=none)(solve_row)
    solve_row_adjoint = wp.func_native(_row_adjoint_code(tree, ctype), adj_snippet=none, replay_snippet=none)(
        solve_row_adjoint
    )

    @wp.func(module=mod)
    def sigmoid(kappa: S, d: S) -> S:
        x = wp.clamp(kappa * d, S(-SIGMOID_CLAMP), S(SIGMOID_CLAMP))
        return S(1.0) / (S(1.0) + wp.exp(-x))

    @wp.func(module=mod)
    def safe_inverse(g: mat33) -> mat33:
        if wp.abs(wp.determinant(g)) > S(SINGULAR_DET):
            return wp.inverse(g)
        return mat33()

    @wp.func(module=mod)
    def project(p: vec3, mu: S) -> vec3:
        """Coulomb cone about +z: no adhesion; the tangential part scaled onto ``mu p_z``."""
        out = vec3()
        if p[2] > S(0.0):
            ft2 = p[0] * p[0] + p[1] * p[1]
            lim = mu * p[2]
            if ft2 > lim * lim:
                k = lim / wp.sqrt(ft2)
                out = vec3(k * p[0], k * p[1], p[2])
            else:
                out = p
        return out

    @wp.func(module=mod)
    def frobenius(g: mat33) -> S:
        acc = S(0.0)
        for a in range(3):
            for b in range(3):
                acc = acc + g[a, b] * g[a, b]
        return wp.sqrt(acc)

    @wp.kernel(module=mod)
    def contact_frames_kernel(
        # Model:
        con_body: wp.array(dtype=int),
        con_pos: wp.array(dtype=vec3),
        con_radius: wp.array(dtype=S),
        con_dofmask: wp.array2d(dtype=int),
        # Data in:
        ref_pos_in: wp.array(dtype=vec3),
        xpos_in: wp.array2d(dtype=vec3),
        xquat_in: wp.array2d(dtype=quat),
        cdof_in: wp.array2d(dtype=vec6),
        # Data out:
        con_point_out: wp.array2d(dtype=vec3),
        con_depth_out: wp.array2d(dtype=S),
        con_jac_out: wp.array3d(dtype=S),
    ):
        """One thread per (env, contact). Jacobian rows: velocity of the contact point (world)."""
        e, i = wp.tid()
        b = con_body[i]
        centre = xpos_in[e, b] + wp.quat_rotate(xquat_in[e, b], con_pos[i])
        r = con_radius[i]
        point = centre - vec3(S(0.0), S(0.0), r)
        con_point_out[e, i] = point
        con_depth_out[e, i] = r - (centre[2] + ref_pos_in[e][2])
        for k in range(cdof_in.shape[1]):
            v = vec3()
            if con_dofmask[i, k] != 0:
                ax = cdof_in[e, k]
                v = bottom(ax) + wp.cross(top(ax), point)
            con_jac_out[e, 3 * i + 0, k] = v[0]
            con_jac_out[e, 3 * i + 1, k] = v[1]
            con_jac_out[e, 3 * i + 2, k] = v[2]

    @wp.kernel(module=mod, enable_backward=False)
    def contact_delassus_kernel(
        # Model:
        con_chain: wp.array2d(dtype=int),
        # Data in:
        dt: S,
        qd_in: wp.array2d(dtype=S),
        qfrc_smooth_in: wp.array2d(dtype=S),
        con_jac_in: wp.array3d(dtype=S),
        con_minvjt_in: wp.array3d(dtype=S),
        # Data out:
        con_G_out: wp.array3d(dtype=mat33),
        con_c_out: wp.array2d(dtype=vec3),
    ):
        """G_ij = Jc_i Y_j^T (1/kg) and c_i = Jc_i qd + dt Y_i qfrc_smooth (m/s); thread per (env, i, j).
        Jc_i is non-zero only on the dofs of contact i's chain (``con_chain[i]``, -1 padded), so the
        products run over that chain. Bilinear in (Jc, Y, qd, qfrc_smooth): differentiated by
        ``contact_delassus_adjoint_kernel``."""
        e, i, j = wp.tid()
        g = mat33()
        for m in range(con_chain.shape[1]):
            k = con_chain[i, m]
            if k >= 0:
                ji = vec3(con_jac_in[e, 3 * i, k], con_jac_in[e, 3 * i + 1, k], con_jac_in[e, 3 * i + 2, k])
                yj = vec3(con_minvjt_in[e, 3 * j, k], con_minvjt_in[e, 3 * j + 1, k], con_minvjt_in[e, 3 * j + 2, k])
                g = g + wp.outer(ji, yj)
        con_G_out[e, i, j] = g
        if j == 0:
            cv = vec3()
            for k in range(qd_in.shape[1]):
                for a in range(3):
                    cv[a] = cv[a] + con_jac_in[e, 3 * i + a, k] * qd_in[e, k]
                    cv[a] = cv[a] + dt * con_minvjt_in[e, 3 * i + a, k] * qfrc_smooth_in[e, k]
            con_c_out[e, i] = cv

    @wp.kernel(module=mod, enable_backward=False)
    def contact_delassus_adjoint_kernel(
        # Model:
        con_dofmask: wp.array2d(dtype=int),
        # Data in:
        dt: S,
        qd_in: wp.array2d(dtype=S),
        qfrc_smooth_in: wp.array2d(dtype=S),
        con_jac_in: wp.array3d(dtype=S),
        con_minvjt_in: wp.array3d(dtype=S),
        adj_G_in: wp.array3d(dtype=mat33),
        adj_c_in: wp.array2d(dtype=vec3),
        # Data out (accumulated adjoints):
        adj_jac_out: wp.array3d(dtype=S),
        adj_minvjt_out: wp.array3d(dtype=S),
        adj_qd_out: wp.array2d(dtype=S),
        adj_qfrc_smooth_out: wp.array2d(dtype=S),
    ):
        """Adjoint of ``contact_delassus_kernel``; thread per (env, dof k), so no two threads write the same
        entry. Jacobian entries off a contact's chain are structural zeros: their adjoints are skipped."""
        e, k = wp.tid()
        nc = adj_c_in.shape[1]
        aqd = S(0.0)
        ah = S(0.0)
        hk = dt * qfrc_smooth_in[e, k]
        for i in range(nc):  # each 3x3 block and Jacobian column entry is loaded once per (i, j)
            ac = adj_c_in[e, i]
            ji = vec3(con_jac_in[e, 3 * i, k], con_jac_in[e, 3 * i + 1, k], con_jac_in[e, 3 * i + 2, k])
            yi = vec3(con_minvjt_in[e, 3 * i, k], con_minvjt_in[e, 3 * i + 1, k], con_minvjt_in[e, 3 * i + 2, k])
            aqd = aqd + wp.dot(ac, ji)
            ah = ah + dt * wp.dot(ac, yi)
            on_chain = con_dofmask[i, k] != 0
            gy = ac * hk  # adjoint of Y_i[:, k]: from c_i and from every G_ji = Jc_j Y_i^T
            gj = ac * qd_in[e, k]  # adjoint of Jc_i[:, k]: from c_i and from every G_ij
            for j in range(nc):
                if con_dofmask[j, k] != 0:
                    jj = vec3(con_jac_in[e, 3 * j, k], con_jac_in[e, 3 * j + 1, k], con_jac_in[e, 3 * j + 2, k])
                    gy = gy + wp.transpose(adj_G_in[e, j, i]) * jj
                if on_chain:
                    yj = vec3(
                        con_minvjt_in[e, 3 * j, k], con_minvjt_in[e, 3 * j + 1, k], con_minvjt_in[e, 3 * j + 2, k]
                    )
                    gj = gj + adj_G_in[e, i, j] * yj
            for a in range(3):
                adj_minvjt_out[e, 3 * i + a, k] = adj_minvjt_out[e, 3 * i + a, k] + gy[a]
                if on_chain:
                    adj_jac_out[e, 3 * i + a, k] = adj_jac_out[e, 3 * i + a, k] + gj[a]
        adj_qd_out[e, k] = adj_qd_out[e, k] + aqd
        adj_qfrc_smooth_out[e, k] = adj_qfrc_smooth_out[e, k] + ah

    @wp.func(module=mod)
    def project_adjoint(p: vec3, mu: S, out_bar: vec3) -> vec3:
        """Adjoint of ``project`` at ``p``: J(p)^T out_bar."""
        bar = vec3()
        if p[2] > S(0.0):
            ft2 = p[0] * p[0] + p[1] * p[1]
            lim = mu * p[2]
            if ft2 > lim * lim:
                ft = wp.sqrt(ft2)
                k = lim / ft
                w = out_bar[0] * p[0] + out_bar[1] * p[1]
                dk = -lim / (ft2 * ft)  # dk/dp_t = dk * p_t
                bar = vec3(k * out_bar[0] + w * dk * p[0], k * out_bar[1] + w * dk * p[1], out_bar[2] + w * mu / ft)
            else:
                bar = out_bar
        return bar

    @wp.func(module=mod)
    def sweep_order(it: int, k: int, nc: int) -> int:
        """The ``k``-th contact visited in sweep ``it``: forward in even sweeps, backward in odd ones
        (symmetric Gauss-Seidel: no contact, and so neither foot, is always updated first)."""
        if it % 2 == 1:
            return nc - 1 - k
        return k

    @wp.func(module=mod)
    def visited_before(it: int, j: int, i: int) -> int:
        """1 if contact ``j`` is updated before contact ``i`` in sweep ``it`` (see ``sweep_order``), else 0."""
        if it % 2 == 1:
            return wp.where(j > i, 1, 0)
        return wp.where(j < i, 1, 0)

    @wp.func(module=mod)
    def gs_step(step_mode: int, gii: mat33, res: vec3) -> vec3:
        """The Gauss-Seidel step: ``1.8 / ||G_ii||_F`` times the residual (scalar) or ``diag(G_ii)^-1``
        times it (component)."""
        if step_mode == 1:
            return (S(SCALAR_RELAXATION) / frobenius(gii)) * res
        return vec3(res[0] / gii[0, 0], res[1] / gii[1, 1], res[2] / gii[2, 2])

    @wp.func(module=mod)
    def gs_residual(
        e: int, it: int, i: int, con_s: wp.array2d(dtype=S), con_G: wp.array3d(dtype=mat33),
        con_c: wp.array2d(dtype=vec3), con_p: wp.array3d(dtype=vec3),
    ) -> vec3:  # fmt: skip
        """Residual of contact ``i`` in sweep ``it``: c_i + G_ii p_i + sum_(j != i) s_j G_ij p_j, with the
        contacts visited before ``i`` in this sweep (``sweep_order``) already at sweep ``it + 1``."""
        res = con_c[e, i] + con_G[e, i, i] * con_p[e, it, i]
        for j in range(con_c.shape[1]):
            if j != i:
                res = res + con_s[e, j] * (con_G[e, i, j] * con_p[e, it + visited_before(it, j, i), j])
        return res

    @wp.kernel(module=mod, enable_backward=False)
    def contact_pgs_kernel(
        # Model:
        iterations: int,
        step_mode: int,
        kappa: S,
        mu_in: wp.array(dtype=S),
        # Data in:
        con_depth_in: wp.array2d(dtype=S),
        con_G_in: wp.array3d(dtype=mat33),
        con_c_in: wp.array2d(dtype=vec3),
        # Data out:
        con_s_out: wp.array2d(dtype=S),
        con_Ginv_out: wp.array2d(dtype=mat33),
        con_p_out: wp.array3d(dtype=vec3),
        con_impulse_out: wp.array2d(dtype=vec3),
    ):
        """Warm start and ``iterations`` projected Gauss-Seidel sweeps for env ``e``; the returned
        impulse is ``s(d_i) p_i``. ``con_p_out[e, k]`` holds the impulses after sweep ``k`` (k = 0: the
        warm start): every iterate is kept for ``contact_pgs_adjoint_kernel``. Dynamic loops (a short
        compile); differentiated by hand."""
        e = wp.tid()
        nc = con_c_in.shape[1]
        mu = mu_in[e % mu_in.shape[0]]
        for i in range(nc):
            con_s_out[e, i] = sigmoid(kappa, con_depth_in[e, i])
            con_Ginv_out[e, i] = safe_inverse(con_G_in[e, i, i])
            con_p_out[e, 0, i] = project(-(con_Ginv_out[e, i] * con_c_in[e, i]), mu)
        for it in range(iterations):
            for k in range(nc):
                i = sweep_order(it, k, nc)
                res = gs_residual(e, it, i, con_s_out, con_G_in, con_c_in, con_p_out)
                step = gs_step(step_mode, con_G_in[e, i, i], res)
                con_p_out[e, it + 1, i] = project(con_p_out[e, it, i] - step, mu)
        for i in range(nc):
            con_impulse_out[e, i] = con_s_out[e, i] * con_p_out[e, iterations, i]

    @wp.kernel(module=mod, enable_backward=False)
    def contact_pgs_adjoint_kernel(
        # Model:
        iterations: int,
        step_mode: int,
        kappa: S,
        mu_in: wp.array(dtype=S),
        # Data in (the forward's inputs and outputs):
        con_depth_in: wp.array2d(dtype=S),
        con_G_in: wp.array3d(dtype=mat33),
        con_c_in: wp.array2d(dtype=vec3),
        con_s_in: wp.array2d(dtype=S),
        con_Ginv_in: wp.array2d(dtype=mat33),
        con_p_in: wp.array3d(dtype=vec3),
        # Adjoints of the outputs (adj_s and adj_p are accumulated into in place):
        adj_s_io: wp.array2d(dtype=S),
        adj_Ginv_in: wp.array2d(dtype=mat33),
        adj_p_io: wp.array3d(dtype=vec3),
        adj_impulse_in: wp.array2d(dtype=vec3),
        # Adjoints of the inputs (accumulated):
        adj_depth_out: wp.array2d(dtype=S),
        adj_G_out: wp.array3d(dtype=mat33),
        adj_c_out: wp.array2d(dtype=vec3),
    ):
        """Exact adjoint of ``contact_pgs_kernel`` for env ``e``: the sweeps in reverse order, each contact
        update's residual recomputed from the stored iterates."""
        e = wp.tid()
        nc = con_c_in.shape[1]
        mu = mu_in[e % mu_in.shape[0]]
        for i in range(nc):
            ib = adj_impulse_in[e, i]
            adj_p_io[e, iterations, i] = adj_p_io[e, iterations, i] + con_s_in[e, i] * ib
            adj_s_io[e, i] = adj_s_io[e, i] + wp.dot(con_p_in[e, iterations, i], ib)
        for kk in range(iterations):
            k = iterations - 1 - kk
            for ii in range(nc):
                i = sweep_order(k, nc - 1 - ii, nc)
                gii = con_G_in[e, i, i]
                res = gs_residual(e, k, i, con_s_in, con_G_in, con_c_in, con_p_in)
                x = con_p_in[e, k, i] - gs_step(step_mode, gii, res)
                xb = project_adjoint(x, mu, adj_p_io[e, k + 1, i])
                rb = vec3()
                gb = mat33()
                if step_mode == 1:
                    f = frobenius(gii)
                    rb = (-S(SCALAR_RELAXATION) / f) * xb
                    fb = wp.dot(xb, res) * S(SCALAR_RELAXATION) / (f * f)  # d(-eta res)/df = +1.8 res / f^2
                    gb = (fb / f) * gii
                else:
                    for a in range(3):
                        rb[a] = -xb[a] / gii[a, a]
                        gb[a, a] = xb[a] * res[a] / (gii[a, a] * gii[a, a])
                adj_c_out[e, i] = adj_c_out[e, i] + rb
                adj_G_out[e, i, i] = adj_G_out[e, i, i] + gb + wp.outer(rb, con_p_in[e, k, i])
                adj_p_io[e, k, i] = adj_p_io[e, k, i] + xb + wp.transpose(gii) * rb
                for j in range(nc):
                    if j != i:
                        kj = k + visited_before(k, j, i)
                        pj = con_p_in[e, kj, j]
                        sj = con_s_in[e, j]
                        gij = con_G_in[e, i, j]
                        adj_G_out[e, i, j] = adj_G_out[e, i, j] + sj * wp.outer(rb, pj)
                        adj_s_io[e, j] = adj_s_io[e, j] + wp.dot(rb, gij * pj)
                        adj_p_io[e, kj, j] = adj_p_io[e, kj, j] + sj * (wp.transpose(gij) * rb)
        for i in range(nc):
            gii = con_G_in[e, i, i]
            ginv = con_Ginv_in[e, i]
            c = con_c_in[e, i]
            yb = project_adjoint(-(ginv * c), mu, adj_p_io[e, 0, i])
            adj_c_out[e, i] = adj_c_out[e, i] - wp.transpose(ginv) * yb
            if wp.abs(wp.determinant(gii)) > S(SINGULAR_DET):
                ginv_b = adj_Ginv_in[e, i] - wp.outer(yb, c)
                adj_G_out[e, i, i] = adj_G_out[e, i, i] - wp.transpose(ginv) * ginv_b * wp.transpose(ginv)
            kd = kappa * con_depth_in[e, i]
            if wp.abs(kd) < S(SIGMOID_CLAMP):
                si = con_s_in[e, i]
                adj_depth_out[e, i] = adj_depth_out[e, i] + adj_s_io[e, i] * kappa * si * (S(1.0) - si)

    @wp.kernel(module=mod)
    def contact_force_kernel(
        # Data in:
        con_jac_in: wp.array3d(dtype=S),
        con_impulse_in: wp.array2d(dtype=vec3),
        # Data out:
        qfrc_impulse_out: wp.array2d(dtype=S),
    ):
        """qfrc_impulse = Jc^T p (N s), one thread per (env, dof)."""
        e, k = wp.tid()
        acc = S(0.0)
        for i in range(NC):
            p = con_impulse_in[e, i]
            acc = acc + con_jac_in[e, 3 * i + 0, k] * p[0]
            acc = acc + con_jac_in[e, 3 * i + 1, k] * p[1]
            acc = acc + con_jac_in[e, 3 * i + 2, k] * p[2]
        qfrc_impulse_out[e, k] = acc

    @wp.kernel(module=mod, enable_backward=False)
    def contact_minv_jt_kernel(
        # Data in:
        qLD_in: wp.array2d(dtype=S),
        con_jac_in: wp.array2d(dtype=S),
        rows: int,
        # Data out:
        con_minvjt_out: wp.array2d(dtype=S),
    ):
        """Y[r] = M^-1 Jc[r]; Jacobian rows flattened to [E * rows, NV]; one thread per row."""
        r = wp.tid()
        solve_row(qLD_in, r / rows, con_jac_in, r, con_minvjt_out)

    @wp.kernel(module=mod, enable_backward=False)
    def contact_minv_jt_adjoint_kernel(
        # Data in:
        qLD_in: wp.array2d(dtype=S),
        con_minvjt_in: wp.array2d(dtype=S),
        adj_minvjt_in: wp.array2d(dtype=S),
        rows: int,
        # Data out (accumulated adjoints):
        adj_jac_out: wp.array2d(dtype=S),
        adj_qM_out: wp.array2d(dtype=S),
    ):
        """Adjoint of Y[r] = M^-1 Jc[r]: z = M^-1 adj_Y[r]; adj_Jc[r] += z; adj_M -= sym(z Y[r]^T) on the
        stored lower triangle. One thread per env: its rows accumulate into adj_M without atomics."""
        e = wp.tid()
        for rr in range(rows):
            solve_row_adjoint(qLD_in, e, con_minvjt_in, adj_minvjt_in, e * rows + rr, adj_jac_out, adj_qM_out)

    return SimpleNamespace(
        sigmoid=sigmoid,
        project=project,
        contact_frames_kernel=contact_frames_kernel,
        contact_delassus_kernel=contact_delassus_kernel,
        contact_delassus_adjoint_kernel=contact_delassus_adjoint_kernel,
        contact_pgs_kernel=contact_pgs_kernel,
        contact_pgs_adjoint_kernel=contact_pgs_adjoint_kernel,
        contact_force_kernel=contact_force_kernel,
        contact_minv_jt_kernel=contact_minv_jt_kernel,
        contact_minv_jt_adjoint_kernel=contact_minv_jt_adjoint_kernel,
    )


# --------------------------------------------------------------------------------------------------
# Host side: contact model arrays, step-data layout and the recorded launches of one substep.
# --------------------------------------------------------------------------------------------------


@dataclass
class ContactModel:
    """Contact set and settings on the device.

    con_body [NC] (MuJoCo body id), con_pos [NC] vec3 (sphere centre in the body frame, m),
    con_radius [NC] (m), con_dofmask [NC, NV] (1 where the dof moves the contact's body), con_chain
    [NC, max chain] (those dofs, -1 padded),
    con_foot [NC] (index into ``feet``), mu [*] (friction coefficient per env or shared),
    kappa (1/m), iterations (Gauss-Seidel sweeps), step (``STEPS`` code of the Gauss-Seidel step).
    """

    num_contacts: int
    feet: tuple
    con_body: wp.array
    con_pos: wp.array
    con_radius: wp.array
    con_dofmask: wp.array
    con_chain: wp.array
    con_foot: np.ndarray
    mu: wp.array
    kappa: float
    iterations: int
    step: int = STEPS["scalar"]


def put_contact_model(
    mjm, robot, t: Types, device: str, num_envs: int, kappa: float, iterations: int, mu: float, step: str = "scalar"
):
    """The foot spheres of ``robot`` (``RobotSpec.foot_contact_points``) as a ``ContactModel``."""
    points = robot.foot_contact_points
    nc, nv = len(points), mjm.nv
    body = np.array([mjm.body(p.body).id for p in points], np.int32)
    mask = np.zeros((nc, nv), np.int32)
    for i, b in enumerate(body):
        while b > 0:
            for k in range(mjm.body_dofnum[b]):
                mask[i, mjm.body_dofadr[b] + k] = 1
            b = mjm.body_parentid[b]
    feet = tuple(robot.foot_bodies)
    width = int(mask.sum(1).max())
    chain = -np.ones((nc, width), np.int32)
    for i in range(nc):
        dofs = np.flatnonzero(mask[i])
        chain[i, : len(dofs)] = dofs
    return ContactModel(
        num_contacts=nc,
        feet=feet,
        con_body=wp.array(body, dtype=wp.int32, device=device),
        con_pos=wp.array(np.array([p.pos for p in points], t.np_dtype), dtype=t.vec3, device=device),
        con_radius=wp.array(np.array([p.radius for p in points], t.np_dtype), dtype=t.scalar, device=device),
        con_dofmask=wp.array(mask, dtype=wp.int32, device=device),
        con_chain=wp.array(chain, dtype=wp.int32, device=device),
        con_foot=np.array([feet.index(p.body) for p in points], np.int64),
        mu=wp.array(np.array([mu], t.np_dtype), dtype=t.scalar, device=device),
        kappa=float(kappa),
        iterations=int(iterations),
        step=STEPS[step],
    )


def contact_layout(t: Types, num_envs: int, substeps: int, nc: int, nv: int, iterations: int) -> list:
    """(name, shape, dtype, scalars per element, has adjoint) of the contact arrays of a control step."""
    E, S = num_envs, substeps
    return [
        ("con_point", (S, E, nc), t.vec3, 3, True),
        ("con_depth", (S, E, nc), t.scalar, 1, True),
        ("con_jac", (S, E, 3 * nc, nv), t.scalar, 1, True),
        ("con_minvjt", (S, E, 3 * nc, nv), t.scalar, 1, True),
        ("con_G", (S, E, nc, nc), t.mat33, 9, True),
        ("con_c", (S, E, nc), t.vec3, 3, True),
        ("con_s", (S, E, nc), t.scalar, 1, True),
        ("con_Ginv", (S, E, nc), t.mat33, 9, True),
        ("con_p", (S, E, iterations + 1, nc), t.vec3, 3, True),
        ("con_impulse", (S, E, nc), t.vec3, 3, True),
        ("qfrc_impulse", (S, E, nv), t.scalar, 1, True),
    ]


def _rows(a: wp.array, rows: int) -> wp.array:
    """A [E, rows, NV] slice seen as [E * rows, NV] (same memory; the slice is contiguous)."""
    return wp.array(ptr=a.ptr, shape=(a.shape[0] * rows, a.shape[2]), dtype=a.dtype, device=a.device)


def record_contact(m, k: SimpleNamespace, cm: ContactModel, d, s: int, dt: float, rec, smooth: str) -> None:
    """Record the contact stage of substep ``s`` (forward launches and their adjoints, see the module
    docstring). ``smooth`` names the smooth-force array the velocity update uses."""
    S = m.types.scalar
    E, nc, nv = d.q.shape[1], cm.num_contacts, m.nv
    g = d.grads if rec.grad else None
    rows = 3 * nc
    jac2, minv2 = _rows(d.con_jac[s], rows), _rows(d.con_minvjt[s], rows)
    # 1. contact frames, depths and Jacobians (Warp autodiff).
    ins = [cm.con_body, cm.con_pos, cm.con_radius, cm.con_dofmask, d.ref_pos[s], d.xpos[s], d.xquat[s], d.cdof[s]]
    outs = [d.con_point[s], d.con_depth[s], d.con_jac[s]]
    adj = None if g is None else [None] * 4 + [g["ref_pos"][s], g["xpos"][s], g["xquat"][s], g["cdof"][s]]
    adj_out = None if g is None else [g["con_point"][s], g["con_depth"][s], g["con_jac"][s]]
    rec.add(k.contact_frames_kernel, ins, outs, adj, adj_out, dim=(E, nc))
    # 2. Y = M^-1 Jc^T (hand adjoint into adj_Jc and adj_M).
    rec.add_forward(k.contact_minv_jt_kernel, [d.qLD[s], jac2, rows], [minv2], dim=E * rows)
    if g is not None:
        adj_ins = [d.qLD[s], minv2, _rows(g["con_minvjt"][s], rows), rows]
        adj_outs = [_rows(g["con_jac"][s], rows), g["qM"][s]]
        rec.add_adjoint_only(launch_cmd(k.contact_minv_jt_adjoint_kernel, E, adj_ins, adj_outs, m.device))
    # 3. Delassus blocks and free contact velocity (hand adjoint).
    dins = [S(dt), d.qd[s], getattr(d, smooth)[s], d.con_jac[s], d.con_minvjt[s]]
    rec.add_forward(k.contact_delassus_kernel, [cm.con_chain, *dins], [d.con_G[s], d.con_c[s]], dim=(E, nc, nc))
    if g is not None:
        adj_ins = [cm.con_dofmask, *dins, g["con_G"][s], g["con_c"][s]]
        adj_outs = [g["con_jac"][s], g["con_minvjt"][s], g["qd"][s], g[smooth][s]]
        rec.add_adjoint_only(launch_cmd(k.contact_delassus_adjoint_kernel, (E, nv), adj_ins, adj_outs, m.device))
    # 4. projected Gauss-Seidel with the kappa smoothing (hand adjoint over the stored iterates).
    pins = [cm.iterations, cm.step, S(cm.kappa), cm.mu, d.con_depth[s], d.con_G[s], d.con_c[s]]
    pouts = [d.con_s[s], d.con_Ginv[s], d.con_p[s], d.con_impulse[s]]
    rec.add_forward(k.contact_pgs_kernel, pins, pouts, dim=E)
    if g is not None:
        adj_ins = [*pins, *pouts[:3], *(g[n][s] for n in ("con_s", "con_Ginv", "con_p", "con_impulse"))]
        adj_outs = [g["con_depth"][s], g["con_G"][s], g["con_c"][s]]
        rec.add_adjoint_only(launch_cmd(k.contact_pgs_adjoint_kernel, E, adj_ins, adj_outs, m.device))
    # 5. generalised impulse Jc^T p (Warp autodiff).
    adj = None if g is None else [g["con_jac"][s], g["con_impulse"][s]]
    adj_out = None if g is None else [g["qfrc_impulse"][s]]
    rec.add(k.contact_force_kernel, [d.con_jac[s], d.con_impulse[s]], [d.qfrc_impulse[s]], adj, adj_out, dim=(E, nv))
