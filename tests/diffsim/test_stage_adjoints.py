"""Hand-written adjoints of the smooth stages (kinematics, velocities and RNE, composite inertia, mass
matrix) against float64 central finite differences, stage by stage.

Each stage runs alone in a small kernel on G1 states; the loss of env e is a random linear functional of the
stage's outputs for that env, and each input component is perturbed in all envs at once (envs are
independent), so one pair of launches gives every env's difference quotient.
"""

# No ``from __future__ import annotations``: Warp reads the (closure) type annotations at definition.

from functools import cache
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import warp as wp

from bcg_deploy.diffsim import inertia as dinertia
from bcg_deploy.diffsim import kinematics as dkin
from bcg_deploy.diffsim import rne as drne
from bcg_deploy.diffsim.tape import launch_cmd
from tests.diffsim.util import get_sim, random_states

E = 6
H = 1e-6


@cache
def _kernels(has_jnt_pos: bool, max_children: int) -> SimpleNamespace:
    sim = get_sim("float64", num_envs=E)
    t = sim.types
    S, vec3, vec6, vec10, quat, mat33 = t.scalar, t.vec3, t.vec6, t.vec10, t.quat, t.mat33
    kinematics = dkin.build(t, has_jnt_pos).kinematics
    inr = dinertia.build(t, max_children)
    crb, mass_matrix = inr.crb, inr.mass_matrix
    rn = drne.build(t, max_children)
    com_vel, rne = rn.com_vel, rn.rne
    mod = f"test_stage_adjoints_{has_jnt_pos}"

    @wp.kernel(module=mod)
    def kinematics_kernel(
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
        q_mid: wp.array2d(dtype=S),
        ref_pos: wp.array(dtype=vec3),
        xpos: wp.array2d(dtype=vec3),
        xquat: wp.array2d(dtype=quat),
        cinert: wp.array2d(dtype=vec10),
        cdof: wp.array2d(dtype=vec6),
    ):
        e = wp.tid()
        kinematics(
            body_parentid, body_jnttype, body_qposadr, body_dofadr, body_pos, body_quat, jnt_pos, jnt_axis,
            body_mass, body_ipos, body_inertia_mat, e, q_mid, ref_pos, xpos, xquat, cinert, cdof,
        )  # fmt: skip

    @wp.kernel(module=mod)
    def mass_kernel(
        body_children: wp.array2d(dtype=int),
        dof_bodyid: wp.array(dtype=int),
        dof_Madr: wp.array(dtype=int),
        dof_Mnum: wp.array(dtype=int),
        M_colind: wp.array(dtype=int),
        dof_armature: wp.array2d(dtype=S),
        cinert: wp.array2d(dtype=vec10),
        cdof: wp.array2d(dtype=vec6),
        dof_damping: wp.array2d(dtype=S),
        crb_out: wp.array2d(dtype=vec10),
        qM: wp.array2d(dtype=S),
    ):
        e = wp.tid()
        crb(body_children, e, cinert, crb_out)
        mass_matrix(dof_bodyid, dof_Madr, dof_Mnum, M_colind, dof_armature, e, cdof, crb_out, dof_damping, qM)

    @wp.kernel(module=mod)
    def bias_kernel(
        body_parentid: wp.array(dtype=int),
        body_children: wp.array2d(dtype=int),
        body_jnttype: wp.array(dtype=int),
        body_dofadr: wp.array(dtype=int),
        dof_bodyid: wp.array(dtype=int),
        gravity: vec3,
        qd: wp.array2d(dtype=S),
        cdof: wp.array2d(dtype=vec6),
        cinert: wp.array2d(dtype=vec10),
        cvel: wp.array2d(dtype=vec6),
        cacc: wp.array2d(dtype=vec6),
        cfrc: wp.array2d(dtype=vec6),
        qfrc_bias: wp.array2d(dtype=S),
    ):
        e = wp.tid()
        com_vel(body_parentid, body_jnttype, body_dofadr, gravity, e, qd, cdof, cvel, cacc)
        rne(body_children, dof_bodyid, e, cinert, cvel, cacc, cdof, cfrc, qfrc_bias)

    return SimpleNamespace(sim=sim, kinematics=kinematics_kernel, mass=mass_kernel, bias=bias_kernel)


def _like(a: wp.array, values: np.ndarray) -> wp.array:
    return wp.array(values, dtype=a.dtype, shape=a.shape, device=a.device)


def _check(kernel, inputs: list, diff: list[int], outputs: list, seed: int, tol: float = 1e-6) -> dict:
    """Adjoint of ``kernel`` vs central differences: worst relative error per differentiable input."""
    rng = np.random.default_rng(seed)
    weights = [_like(o, rng.normal(size=o.numpy().shape)) for o in outputs]

    def loss(args: list) -> np.ndarray:
        outs = [wp.zeros_like(o) for o in outputs]
        wp.launch(kernel, E, inputs=args, outputs=outs)
        return sum((o.numpy() * w.numpy()).reshape(E, -1).sum(1) for o, w in zip(outs, weights, strict=True))

    adj_in = [wp.zeros_like(inputs[i]) if i in diff else None for i in range(len(inputs))]
    outs = [wp.zeros_like(o) for o in outputs]
    wp.launch(kernel, E, inputs=inputs, outputs=outs)  # the stages' replays are empty: the adjoint reads these
    # (clones: an adjoint accumulates into its outputs' adjoints, e.g. a child's frame into its parent's)
    launch_cmd(kernel, E, inputs, outs, inputs[diff[0]].device, adj_in, [wp.clone(w) for w in weights]).launch()
    worst = {}
    for i in diff:
        base = inputs[i].numpy()
        flat = base.reshape(E, -1)
        fd = np.zeros_like(flat)
        for k in range(flat.shape[1]):
            vals = []
            for sign in (1.0, -1.0):
                p = flat.copy()
                p[:, k] += sign * H
                args = list(inputs)
                args[i] = _like(inputs[i], p.reshape(base.shape))
                vals.append(loss(args))
            fd[:, k] = (vals[0] - vals[1]) / (2 * H)
        grad = adj_in[i].numpy().reshape(E, -1)
        worst[i] = float((np.abs(grad - fd).max(1) / np.linalg.norm(fd, axis=1)).max())
    assert max(worst.values()) < tol, f"relative adjoint errors per input {worst}"
    return worst


def _forward_values(sim, seed: int):
    q, qd = random_states(E, seed=seed, pos_range=2.0)
    d = sim._eval(E)
    sim._forward(d, torch.as_tensor(q), torch.as_tensor(qd), torch.zeros(E, sim.nu, dtype=torch.float64))
    return {n: wp.clone(d.arrays[n][0]) for n in ("q_mid", "ref_pos", "cinert", "cdof", "dof_damping")} | {
        "qd": wp.clone(d.arrays["qd"][0])
    }


@pytest.mark.parametrize("has_jnt_pos", [False, True])
def test_kinematics_adjoint_matches_finite_differences(has_jnt_pos: bool):
    k = _kernels(has_jnt_pos, get_sim("float64", num_envs=E).model.max_children)
    m, v = k.sim.model, _forward_values(k.sim, seed=3)
    jnt_pos = m.jnt_pos
    if has_jnt_pos:  # G1's hinges sit at their body origins: give them anchors to exercise that branch
        rng = np.random.default_rng(4)
        jnt_pos = _like(m.jnt_pos, rng.uniform(-0.1, 0.1, (m.nbody, 3)))
    inputs = [
        m.body_parentid, m.body_jnttype, m.body_qposadr, m.body_dofadr, m.body_pos, m.body_quat, jnt_pos,
        m.jnt_axis, m.body_mass, m.body_ipos, m.body_inertia_mat, v["q_mid"], v["ref_pos"],
    ]  # fmt: skip
    nb, nv = m.nbody, m.nv
    t = k.sim.types
    outputs = [wp.zeros((E, nb), dtype=t.vec3), wp.zeros((E, nb), dtype=t.quat)]
    outputs += [wp.zeros((E, nb), dtype=t.vec10), wp.zeros((E, nv), dtype=t.vec6)]
    _check(k.kinematics, inputs, [11, 12], outputs, seed=5)


def test_composite_inertia_and_mass_matrix_adjoints_match_finite_differences():
    sim = get_sim("float64", num_envs=E)
    m = sim.model
    k = _kernels(m.has_jnt_pos, m.max_children)
    v = _forward_values(sim, seed=6)
    rng = np.random.default_rng(7)
    damping = _like(v["dof_damping"], rng.uniform(0.0, 0.5, (E, m.nv)))
    inputs = [m.body_children, m.dof_bodyid, m.dof_Madr, m.dof_Mnum, m.M_colind, m.dof_armature]
    inputs += [v["cinert"], v["cdof"], damping]
    outputs = [wp.zeros((E, m.nbody), dtype=sim.types.vec10), wp.zeros((E, m.nM), dtype=sim.types.scalar)]
    _check(k.mass, inputs, [6, 7, 8], outputs, seed=8)


def test_velocity_and_bias_force_adjoints_match_finite_differences():
    sim = get_sim("float64", num_envs=E)
    m = sim.model
    k = _kernels(m.has_jnt_pos, m.max_children)
    v = _forward_values(sim, seed=9)
    inputs = [m.body_parentid, m.body_children, m.body_jnttype, m.body_dofadr, m.dof_bodyid, m.gravity]
    inputs += [v["qd"], v["cdof"], v["cinert"]]
    t = sim.types
    outputs = [wp.zeros((E, m.nbody), dtype=t.vec6) for _ in range(3)] + [wp.zeros((E, m.nv), dtype=t.scalar)]
    _check(k.bias, inputs, [6, 7, 8], outputs, seed=10)
