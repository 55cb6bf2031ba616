"""Energy and momentum of the passive free-floating G1 (no gravity, no PD; MuJoCo measures them).

The continuous dynamics conserve momentum exactly (first test). The discrete Moreau step of METHOD.md
(bias forces at the substep's initial velocity) is first order: energy and momenta drift O(dt), tens of
percent over 2 s at 2 rad/s (bench/conservation.py). With ``bias_velocity="midpoint"`` the step is second
order and the drift is below 1 %. Neither conserves momentum to round-off; ``integrator="rk4"`` (4th order,
contact-free) holds energy and momenta to 1e-6 over 2 s at dt 0.005, as MuJoCo's RK4 does. The bounds
asserted here are the measured ones with a margin, so a regression (e.g. a wrong bias term, which breaks the
order) fails.
"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch

from tests.diffsim.util import get_sim, mj_model, random_states, t64


def _meter():
    m = mj_model(gravity=False, actuation=False)
    m.opt.enableflags |= mujoco.mjtEnableBit.mjENBL_ENERGY
    d = mujoco.MjData(m)

    def measure(q, qd):
        d.qpos[:], d.qvel[:] = q, qd
        mujoco.mj_forward(m, d)
        mujoco.mj_subtreeVel(m, d)
        lin = d.subtree_linvel[1] * m.body_subtreemass[1]
        return (
            d.energy[1],
            lin.copy(),
            d.subtree_angmom[1].copy(),
            np.cross(d.subtree_com[1], lin) + d.subtree_angmom[1],
        )

    return m, measure


def test_dynamics_conserve_momentum():
    """d/dt of linear momentum and of angular momentum about the world origin is 0 under forward_dynamics
    (central difference in time along (qd, qacc), float64)."""
    m, measure = _meter()
    sim = get_sim("float64", gravity=False)
    q, qd = random_states(10, seed=61)
    qacc = sim.forward_dynamics(t64(q), t64(qd), torch.zeros(10, 35, dtype=torch.float64)).numpy()
    eps = 1e-6
    for i in range(10):
        qp, qm = q[i].copy(), q[i].copy()
        mujoco.mj_integratePos(m, qp, qd[i], eps)
        mujoco.mj_integratePos(m, qm, qd[i], -eps)
        _, lp, _, ap = measure(qp, qd[i] + eps * qacc[i])
        _, lm, _, am = measure(qm, qd[i] - eps * qacc[i])
        _, lin, _, ang = measure(q[i], qd[i])
        # momentum rates vs the momentum turned over by the motion (|p| * 1 rad/s scale)
        assert np.linalg.norm(lp - lm) / (2 * eps) < 1e-6 * np.linalg.norm(lin) + 1e-6
        assert np.linalg.norm(ap - am) / (2 * eps) < 1e-6 * np.linalg.norm(ang) + 1e-6


def _drift(bias_velocity: str, dt: float, seconds: float, envs: int = 3, integrator: str = "moreau") -> np.ndarray:
    """max relative deviation over the run of (energy, linear momentum, angular momentum about the CoM, about
    the world origin)."""
    _, measure = _meter()
    sim = get_sim(
        "float64", num_envs=envs, gravity=False, physics_dt=dt, bias_velocity=bias_velocity, integrator=integrator
    )
    sim.set_env_params(act_kp=np.zeros(29), act_kd=np.zeros(29))
    q, qd = random_states(envs, seed=63, pos_range=2.0)
    q[:, 7:] *= 0.5  # joints away from their limits (every G1 range contains 0)
    ref = [measure(q[e], qd[e]) for e in range(envs)]
    worst = np.zeros(4)
    tq, tqd, target = t64(q), t64(qd), torch.zeros(envs, 29, dtype=torch.float64)
    for _ in range(round(seconds / sim.control_dt)):
        with torch.no_grad():
            s = sim.step(tq, tqd, target)
        tq, tqd = s.q, s.qd
        for e in range(envs):
            now = measure(tq[e].numpy(), tqd[e].numpy())
            for k in range(4):
                dev = np.linalg.norm(np.subtract(now[k], ref[e][k])) / np.linalg.norm(ref[e][k])
                worst[k] = max(worst[k], dev)
    return worst


def test_midpoint_bias_velocity_conserves_energy_to_one_percent():
    worst = _drift("midpoint", 0.005, 2.0)
    assert worst[0] < 0.01, f"energy drift {worst[0]:.3g}"
    assert worst[1] < 0.01 and worst[2] < 0.02, f"momentum drift {worst[1:]}"


@pytest.mark.parametrize(("bias_velocity", "min_order"), [("start", 0.7), ("midpoint", 1.5)])
def test_convergence_order(bias_velocity, min_order):
    """Halving dt divides the energy drift by ~2 (METHOD's scheme, first order) or ~4 (midpoint)."""
    coarse = _drift(bias_velocity, 0.005, 1.0, envs=2)[0]
    fine = _drift(bias_velocity, 0.0025, 1.0, envs=2)[0]
    assert np.log2(coarse / fine) > min_order, f"{bias_velocity}: drift {coarse:.3g} -> {fine:.3g}"


def test_rk4_conserves_energy_and_momentum_to_1e_6():
    """Passive free-floating G1, 2 s at dt 0.005 (measured: at most 8.5e-7, bench/conservation.py)."""
    worst = _drift("start", 0.005, 2.0, integrator="rk4")
    assert worst.max() < 1e-6, f"energy, linear, angular (CoM), angular (origin) drift {worst}"
