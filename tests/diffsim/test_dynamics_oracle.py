"""Mass matrix, bias forces and joint accelerations against MuJoCo's mj_forward (the oracle)."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from tests.diffsim.util import get_sim, mj_model, random_states, t64

N_STATES = 100


def _mujoco(q, qd, tau):
    return _mujoco_model(mj_model(actuation=False), q, qd, tau)


def _mujoco_model(m, q, qd, tau=None):
    tau = np.zeros_like(qd) if tau is None else tau
    d = mujoco.MjData(m)
    out = {"M": [], "bias": [], "qacc": []}
    for i in range(q.shape[0]):
        d.qpos[:], d.qvel[:], d.qfrc_applied[:] = q[i], qd[i], tau[i]
        mujoco.mj_forward(m, d)
        full = np.zeros((m.nv, m.nv))
        mujoco.mj_fullM(m, d, full)
        out["M"].append(full)
        out["bias"].append(d.qfrc_bias.copy())
        out["qacc"].append(d.qacc.copy())
    return {k: np.array(v) for k, v in out.items()}


@pytest.fixture(scope="module")
def oracle():
    q, qd = random_states(N_STATES, seed=11)
    tau = np.random.default_rng(12).normal(scale=20.0, size=(N_STATES, 35))
    return q, qd, tau, _mujoco(q, qd, tau)


def _rel(ours: np.ndarray, ref: np.ndarray) -> float:
    """max over states of max|ours - ref| / ||ref|| (matrix or vector 2-norm / Frobenius)."""
    axes = tuple(range(1, ref.ndim))
    return float(np.max(np.abs(ours - ref).max(axis=axes) / np.linalg.norm(ref.reshape(len(ref), -1), axis=1)))


@pytest.mark.parametrize(("dtype", "tol"), [("float64", 1e-6), ("float32", (2e-6, 5e-6, 5e-5))])
def test_against_mj_forward(oracle, dtype, tol):
    q, qd, tau, ref = oracle
    sim = get_sim(dtype)
    tol_m, tol_b, tol_a = tol if isinstance(tol, tuple) else (tol,) * 3
    M = sim.mass_matrix(t64(q)).double().numpy()
    bias = sim.bias_forces(t64(q), t64(qd)).double().numpy()
    qacc = sim.forward_dynamics(t64(q), t64(qd), t64(tau)).double().numpy()
    errs = _rel(M, ref["M"]), _rel(bias, ref["bias"]), _rel(qacc, ref["qacc"])
    assert errs[0] < tol_m and errs[1] < tol_b and errs[2] < tol_a, f"{dtype}: M, bias, qacc rel errors {errs}"


def test_float64_is_exact_to_roundoff(oracle):
    """The float64 pipeline is MuJoCo's algorithm: agreement far below the 1e-6 acceptance bound."""
    q, qd, tau, ref = oracle
    sim = get_sim("float64")
    qacc = sim.forward_dynamics(t64(q), t64(qd), t64(tau)).numpy()
    assert _rel(qacc, ref["qacc"]) < 1e-11


def test_hinge_torques_map_to_their_dofs(oracle):
    """forward_dynamics with [B, 29] hinge torques equals the [B, 35] form with zeros on the free joint."""
    q, qd, tau, _ = oracle
    sim = get_sim("float64")
    tau[:, :6] = 0.0
    a = sim.forward_dynamics(t64(q[:5]), t64(qd[:5]), t64(tau[:5, 6:]))
    b = sim.forward_dynamics(t64(q[:5]), t64(qd[:5]), t64(tau[:5]))
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-12)


def test_gravity_off_removes_only_gravity():
    q, qd = random_states(4, seed=3)
    with_g = get_sim("float64").bias_forces(t64(q), t64(qd)).numpy()
    without = get_sim("float64", gravity=False).bias_forces(t64(q), t64(qd)).numpy()
    m = mj_model(actuation=False)
    d = mujoco.MjData(m)
    for i in range(4):
        d.qpos[:], d.qvel[:] = q[i], np.zeros(35)
        mujoco.mj_forward(m, d)
        np.testing.assert_allclose(with_g[i] - without[i], d.qfrc_bias, rtol=0, atol=1e-9)


def test_per_env_mass_properties_match_mujoco():
    """set_env_params(body_mass, body_ipos, body_inertia) per env == MuJoCo with the same edited model."""
    sim = get_sim("float64", num_envs=3, substeps=1)
    m = mj_model(actuation=False)
    rng = np.random.default_rng(5)
    mass = m.body_mass[None] * rng.uniform(0.8, 1.2, (3, m.nbody))
    ipos = m.body_ipos[None] + rng.uniform(-0.03, 0.03, (3, m.nbody, 3))
    inertia = m.body_inertia[None] * rng.uniform(0.8, 1.2, (3, m.nbody, 3))
    q, qd = random_states(3, seed=6)
    sim.set_env_params(body_mass=mass, body_ipos=ipos, body_inertia=inertia)
    try:
        M = sim.mass_matrix(t64(q)).numpy()
        bias = sim.bias_forces(t64(q), t64(qd)).numpy()
    finally:
        sim.set_env_params(body_mass=m.body_mass, body_ipos=m.body_ipos, body_inertia=m.body_inertia)
    for e in range(3):
        m.body_mass[:], m.body_ipos[:], m.body_inertia[:] = mass[e], ipos[e], inertia[e]
        ref = _mujoco_model(m, q[e : e + 1], qd[e : e + 1])
        assert _rel(M[e : e + 1], ref["M"]) < 1e-12 and _rel(bias[e : e + 1], ref["bias"]) < 1e-12
