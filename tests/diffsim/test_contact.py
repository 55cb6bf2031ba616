"""The contact stage against the float64 reference (MuJoCo C + numpy) and float64 finite differences."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bcg_deploy.diffsim import SimConfig, Simulator
from bcg_deploy.diffsim.checks import fd_gradient_check, in_contact_states, standing_state
from bcg_deploy.errors import BcgdError
from bcg_deploy.robots import load_robot
from tests.diffsim.moreau_reference import MoreauReference, ReferenceConfig
from tests.diffsim.util import get_sim

SPEC = load_robot("g1")


def _standing(n: int, drop: float = 0.02) -> tuple[np.ndarray, np.ndarray]:
    return standing_state(SPEC, n, drop)


@pytest.mark.parametrize("step", ["scalar", "component"])
def test_contact_step_matches_reference(step: str):
    """100 physics steps of a drop onto the floor at 10x gains, per step against the float64 reference."""
    kw = {"contact": True, "pd_damping": "implicit", "kappa": 300.0, "contact_step": step}
    sim = get_sim("float64", num_envs=1, substeps=1, **kw)
    sim.set_env_params(act_kp=10 * SPEC.kp, act_kd=10 * SPEC.kd)
    ref = MoreauReference(SPEC, ReferenceConfig(kappa=300.0, gain_scale=10.0, step=step))
    q, qd = _standing(1)
    qr, qdr = q[0].copy(), qd[0].copy()
    qt = torch.tensor(SPEC.default_joint_pos[None])
    q, qd = torch.tensor(q), torch.tensor(qd)
    worst_state, worst_impulse, touched = 0.0, 0.0, False
    for _ in range(100):
        st = sim.step(q, qd, qt)
        q, qd = st.q, st.qd
        qr, qdr, info = ref.step(qr, qdr, SPEC.default_joint_pos)
        worst_state = max(worst_state, np.abs(q[0].numpy() - qr).max(), np.abs(qd[0].numpy() - qdr).max())
        worst_impulse = max(worst_impulse, np.abs(st.contact_impulse[0].numpy() - info["impulse"][:, 2]).max())
        np.testing.assert_allclose(st.contact_depth[0].numpy(), info["depth"], atol=1e-12)
        touched |= bool(info["impulse"][:, 2].max() > 0.1)
    assert touched, "the drop never reached the floor"
    assert worst_state < 1e-10 and worst_impulse < 1e-10, (worst_state, worst_impulse)


def test_foot_force_is_max_over_substeps_of_summed_impulse():
    sim = get_sim("float64", num_envs=3, substeps=4, contact=True, pd_damping="implicit")
    q, qd, qt = in_contact_states(SPEC, 3, seed=5)
    st = sim.step(torch.tensor(q), torch.tensor(qd), torch.tensor(qt))
    d = sim._nograd()
    normal = d.views["con_impulse"][..., 2].numpy()  # [S, E, NC]
    feet = [c.body for c in SPEC.foot_contact_points]
    want = np.stack([normal[:, :, [f == foot for f in feet]].sum(-1) for foot in SPEC.foot_bodies], -1)
    np.testing.assert_allclose(st.foot_force.numpy(), want.max(0) / 0.005, rtol=1e-12)
    assert (st.foot_force.numpy() > 0).all()


def test_airborne_robot_feels_no_contact():
    sim = get_sim("float64", num_envs=2, contact=True, pd_damping="implicit")
    q, qd = _standing(2, drop=0.5)
    st = sim.step(torch.tensor(q), torch.tensor(qd), torch.tensor(np.tile(SPEC.default_joint_pos, (2, 1))))
    assert st.foot_force.abs().max() < 1e-12
    # Free fall of the base: no contact impulse reached the generalised velocity.
    np.testing.assert_allclose(st.qd[:, 2].numpy(), -9.81 * 0.02, rtol=1e-9)


def test_per_env_friction_and_bad_config():
    sim = get_sim("float64", num_envs=2, contact=True, pd_damping="implicit")
    with pytest.raises(BcgdError, match="friction"):
        sim.set_env_params(friction=[0.5, -1.0])
    with pytest.raises(BcgdError, match="friction"):
        get_sim("float64", num_envs=2, contact=False).set_env_params(friction=0.5)
    with pytest.raises(BcgdError, match="kappa"):
        get_sim("float64", num_envs=1, contact=True, kappa=-1.0)
    with pytest.raises(BcgdError, match="act_kp must be finite"):
        sim.set_env_params(act_kp=np.full(29, np.nan))
    with pytest.raises(BcgdError, match="contact_step"):
        get_sim("float64", num_envs=1, contact=True, contact_step="block")


def test_gradients_through_contact_match_finite_differences_at_kappa_50():
    """Acceptance: 20 in-contact states, one control step (4 substeps), 1e-3 relative."""
    sim = get_sim("float64", num_envs=20, contact=True, pd_damping="implicit", kappa=50.0)
    worst = fd_gradient_check(sim, *in_contact_states(SPEC, 20, seed=11), steps=1, seed=12)
    assert max(worst.values()) < 1e-3, worst


PROBE = Path(__file__).resolve().parents[2] / "bench" / "fixtures" / "bcg_probe_state.json"


def test_control_step_is_lipschitz_at_two_sphere_heel_contact():
    """At a stored branch state of SHAC + BCG (a foot on two heel spheres, friction 1.17, kappa 300), the
    one-control-step map q_target -> (q+, qd+) has bounded slopes: the adjoint directional derivatives
    equal central differences at h = 1e-5 and 1e-7 alike (a jump in the forward map would make the
    differences grow like 1/h, as they do for the per-component step: 3.2e6 at 10 sweeps)."""
    state = json.loads(PROBE.read_text())
    sim = Simulator(SPEC, SimConfig(num_envs=1, dtype="float64", kappa=300.0))  # own instance: edited below
    sim.set_env_params(**{k: torch.tensor(v, dtype=torch.float64)[None] for k, v in state["params"].items()})
    q, qd, qt = (torch.tensor(state[k], dtype=torch.float64)[None] for k in ("q", "qd", "q_target"))

    def f(target: torch.Tensor) -> torch.Tensor:
        st = sim.step(q, qd, target)
        return torch.cat((st.q, st.qd), -1)[0]

    rng = np.random.default_rng(3)
    for _ in range(3):
        v = torch.tensor(rng.normal(size=qt.shape))
        w = torch.tensor(rng.normal(size=71))
        x = qt.clone().requires_grad_(True)
        (f(x) @ w).backward()
        analytic = float((x.grad * v).sum())
        with torch.no_grad():
            fd = [float((f(qt + h * v) - f(qt - h * v)) @ w) / (2 * h) for h in (1e-5, 1e-7)]
        assert abs(analytic) < 1e3, analytic
        for d in fd:
            assert abs(d - analytic) <= 1e-4 * max(1.0, abs(analytic)), (analytic, fd)
