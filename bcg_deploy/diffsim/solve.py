"""Stage 4: tree-sparse L^T D L factorisation of M and the velocity update, with a hand-written adjoint.

M = L^T D L with L unit lower-triangular and the sparsity of the dof tree (MuJoCo's mj_factorM /
mj_solveM: no fill-in for a kinematic tree). ``qLD`` holds L's off-diagonal entries and D on the
diagonal slots, in the tree-sparse layout of ``qM``.

``build(t)``: the algorithms as Warp functions with loops over the model's index arrays (reference
implementation; usable by other stages, e.g. contact, inside forward-only kernels).
``build_native(t, tree)``: the same algorithms generated as straight-line C++ for one tree (constant
indices, local arrays; about 4x faster than the loops), called from the step kernels.

Warp does not differentiate the factorisation (it updates entries in place); the velocity update has a
hand-written adjoint instead, the exact adjoint of x = M^-1 b: ``adj_b = M^-1 adj_x`` (the same
factorisation, M is symmetric) and ``adj_M = -adj_b x^T`` (symmetrised onto the stored lower triangle:
-(y_i x_j + y_j x_i) off the diagonal, -y_i x_i on it).
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

    return SimpleNamespace(ldl_factor=ldl_factor, ldl_solve=ldl_solve)


# ------------------------------------------------------------------------------------------------
# Generated native code: the same algorithms, unrolled for one tree (constant indices, local arrays).
# ------------------------------------------------------------------------------------------------
def tree_key(m_host: dict) -> tuple:
    """Hashable sparsity of a model's mass matrix: (dof_Madr, dof_Mnum, M_colind) as tuples."""
    return tuple(tuple(int(x) for x in m_host[k]) for k in ("dof_Madr", "dof_Mnum", "M_colind"))


def _factor_code(tree: tuple, ctype: str) -> str:
    madr, mnum, col = tree
    nm = sum(mnum)
    out = [
        f"const {ctype}* M = &wp::index(qM, e, 0);",
        f"{ctype}* LD = &wp::index(qLD, e, 0);",
        f"{ctype} L[{nm}];",
        f"for (int k = 0; k < {nm}; ++k) L[k] = M[k];",
        f"{ctype} inv, t;",
    ]
    for k in reversed(range(len(madr))):
        ak, nk = madr[k], mnum[k]
        if nk > 1:
            out.append(f"inv = {ctype}(1) / L[{ak}];")
        for m in range(1, nk):
            ai = madr[col[ak + m]]
            out.append(f"t = L[{ak + m}] * inv;")
            out.extend(f"L[{ai + c}] -= t * L[{ak + m + c}];" for c in range(nk - m))
            out.append(f"L[{ak + m}] = t;")
    out.append(f"for (int k = 0; k < {nm}; ++k) LD[k] = L[k];")
    return "\n".join(out)


def solve_code(tree: tuple, x: str, L: str) -> list[str]:
    """In-place x <- M^-1 x with M = L^T D L stored at ``L`` (C expressions ``x[i]``, ``L[k]``)."""
    madr, mnum, col = tree
    nv = len(madr)
    out = []
    for k in reversed(range(nv)):
        out.extend(f"{x}[{col[madr[k] + m]}] -= {L}[{madr[k] + m}] * {x}[{k}];" for m in range(1, mnum[k]))
    out.extend(f"{x}[{k}] /= {L}[{madr[k]}];" for k in range(nv))
    for k in range(nv):
        terms = [f" - {L}[{madr[k] + m}] * {x}[{col[madr[k] + m]}]" for m in range(1, mnum[k])]
        if terms:
            out.append(f"{x}[{k}] = {x}[{k}]{''.join(terms)};")
    return out


def _velocity_code(tree: tuple, ctype: str) -> str:
    nv = len(tree[0])
    return "\n".join(
        [
            f"const {ctype}* L = &wp::index(qLD, e, 0);",
            "const int pi = e % qfrc_impulse.shape[0];",
            f"{ctype} x[{nv}];",
            f"for (int i = 0; i < {nv}; ++i)",
            "    x[i] = dt * wp::index(qfrc_smooth, e, i) + wp::index(qfrc_impulse, pi, i);",
            *solve_code(tree, "x", "L"),
            f"for (int i = 0; i < {nv}; ++i) {{",
            "    wp::index(dqd, e, i) = x[i];",
            "    wp::index(qd_out, e, i) = wp::index(qd_in, e, i) + x[i];",
            "}",
        ]
    )


def _velocity_adjoint_code(tree: tuple, ctype: str) -> str:
    madr, mnum, col = tree
    nv = len(madr)
    out = [
        f"const {ctype}* L = &wp::index(qLD, e, 0);",
        f"const {ctype}* x = &wp::index(dqd, e, 0);",
        f"{ctype}* aM = &wp::index(adj_qM, e, 0);",
        f"{ctype} y[{nv}];",
        f"for (int i = 0; i < {nv}; ++i) {{",
        "    const auto g = wp::index(adj_qd_out, e, i);",
        "    y[i] = g + wp::index(adj_dqd, e, i);",
        "    wp::index(adj_qd_in, e, i) += g;",
        "}",
        *solve_code(tree, "y", "L"),
        f"for (int i = 0; i < {nv}; ++i) wp::index(adj_qfrc_smooth, e, i) += dt * y[i];",
        "if (adj_qfrc_impulse.data) {",
        "    const int pi = e % qfrc_impulse.shape[0];",
        f"    for (int i = 0; i < {nv}; ++i) wp::atomic_add(&wp::index(adj_qfrc_impulse, pi, i), y[i]);",
        "}",
    ]
    out.extend(adjoint_M_code(tree, "aM", "y", "x"))
    return "\n".join(out)


def adjoint_M_code(tree: tuple, aM: str, y: str, x: str) -> list[str]:
    """C lines of adj_M -= sym(y x^T) on the stored lower triangle (the adjoint of x = M^-1 b through M,
    with y = M^-1 adj_x): -y_i x_i on the diagonal, -(y_i x_j + y_j x_i) off it."""
    madr, mnum, col = tree
    out = []
    for i in range(len(madr)):
        a = madr[i]
        out.append(f"{aM}[{a}] -= {y}[{i}] * {x}[{i}];")
        out.extend(
            f"{aM}[{a + k}] -= {y}[{i}] * {x}[{col[a + k]}] + {y}[{col[a + k]}] * {x}[{i}];" for k in range(1, mnum[i])
        )
    return out


@cache
def build_native(t: Types, tree: tuple) -> SimpleNamespace:
    """Unrolled native factorisation and velocity update for the tree ``tree`` (see ``tree_key``).

    ``factor(qM, e, qLD)``: forward only (no adjoint, no replay: qLD is kept from the forward pass).
    ``solve_velocity(qLD, qM, qfrc_smooth, qfrc_impulse, qd_in, dt, e, dqd, qd_out)``: dqd = M^-1 (dt
    qfrc_smooth + qfrc_impulse[e % rows]), qd_out = qd_in + dqd; its adjoint is the hand-written one of the
    module docstring (``qM`` is passed only to receive adj_M). Its replay is empty: dqd/qd_out are kept.
    """
    S = t.scalar
    ctype = "wp::float32" if t.name == "float32" else "wp::float64"
    tag = f"{t.name}_{abs(hash(tree)) % 10**10}"
    none = "/* kept from the forward pass */"

    def factor(qM: wp.array2d(dtype=S), e: int, qLD: wp.array2d(dtype=S)): ...

    def solve_velocity(
        qLD: wp.array2d(dtype=S),
        qM: wp.array2d(dtype=S),
        qfrc_smooth: wp.array2d(dtype=S),
        qfrc_impulse: wp.array2d(dtype=S),
        qd_in: wp.array2d(dtype=S),
        dt: S,
        e: int,
        dqd: wp.array2d(dtype=S),
        qd_out: wp.array2d(dtype=S),
    ): ...

    factor.__qualname__ = f"ldl_factor_native_{tag}"
    solve_velocity.__qualname__ = f"solve_velocity_native_{tag}"
    factor = wp.func_native(_factor_code(tree, ctype), adj_snippet=none, replay_snippet=none)(factor)
    solve_velocity = wp.func_native(
        _velocity_code(tree, ctype), adj_snippet=_velocity_adjoint_code(tree, ctype), replay_snippet=none
    )(solve_velocity)
    return SimpleNamespace(factor=factor, solve_velocity=solve_velocity)
