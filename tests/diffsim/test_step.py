"""One control step against a Moreau-midpoint oracle built on MuJoCo C; API contract of ``step``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bcg_deploy.errors import BcgdError
from tests.diffsim.util import get_sim, mj_model, moreau_oracle, random_states, random_targets, t64

E = 6


@pytest.mark.parametrize("pd_damping", ["explicit", "implicit"])
def test_control_step_matches_oracle(pd_damping):
    sim = get_sim("float64", num_envs=E, pd_damping=pd_damping)
    q, qd = random_states(E, seed=21)
    qt = random_targets(q, seed=22)
    state = sim.step(t64(q), t64(qd), t64(qt))
    m = mj_model()
    for e in range(E):
        q_ref, qd_ref = moreau_oracle(m, q[e], qd[e], qt[e], 0.005, 4, implicit_damping=pd_damping == "implicit")
        np.testing.assert_allclose(state.q[e].numpy(), q_ref, rtol=0, atol=1e-10)
        np.testing.assert_allclose(state.qd[e].numpy(), qd_ref, rtol=1e-10, atol=1e-9)


def test_saturated_pd_is_clamped():
    """Targets far away saturate every joint: the step must equal the oracle with clamped torques."""
    sim = get_sim("float64", num_envs=E)
    q, qd = random_states(E, seed=23)
    qt = q[:, 7:] + np.sign(np.random.default_rng(24).normal(size=(E, 29))) * 3.0
    state = sim.step(t64(q), t64(qd), t64(qt))
    m = mj_model()
    q_ref, qd_ref = moreau_oracle(m, q[0], qd[0], qt[0], 0.005, 4)
    np.testing.assert_allclose(state.qd[0].numpy(), qd_ref, rtol=1e-10, atol=1e-9)


def test_float32_tracks_float64():
    q, qd = random_states(E, seed=25)
    qt = random_targets(q, seed=26)
    s64 = get_sim("float64", num_envs=E).step(t64(q), t64(qd), t64(qt))
    s32 = get_sim("float32", num_envs=E).step(t64(q), t64(qd), t64(qt))
    assert s32.q.dtype == torch.float32
    np.testing.assert_allclose(s32.q.double().numpy(), s64.q.numpy(), rtol=0, atol=2e-5)
    np.testing.assert_allclose(s32.qd.double().numpy(), s64.qd.numpy(), rtol=0, atol=2e-3)


def test_state_contract():
    """Shapes, unit output quaternion from an unnormalised input, outputs independent of internal buffers."""
    sim = get_sim("float64", num_envs=E)
    q, qd = random_states(E, seed=27)
    q_scaled = q.copy()
    q_scaled[:, 3:7] *= 2.5
    qt = random_targets(q, seed=28)
    a = sim.step(t64(q), t64(qd), t64(qt))
    b = sim.step(t64(q_scaled), t64(qd), t64(qt))
    assert a.q.shape == (E, 36) and a.qd.shape == (E, 35)
    np.testing.assert_allclose(np.linalg.norm(b.q[:, 3:7].numpy(), axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(a.q.numpy(), b.q.numpy(), rtol=0, atol=1e-12)
    kept = a.q.clone()
    sim.step(t64(q) + 0.1, t64(qd), t64(qt))
    assert torch.equal(a.q, kept)


def test_grad_and_no_grad_paths_agree():
    sim = get_sim("float64", num_envs=E)
    q, qd = random_states(E, seed=29)
    qt = random_targets(q, seed=30)
    with torch.no_grad():
        a = sim.step(t64(q), t64(qd), t64(qt))
    b = sim.step(t64(q), t64(qd), t64(qt).requires_grad_(True))
    assert b.q.requires_grad
    np.testing.assert_allclose(a.q.numpy(), b.q.detach().numpy(), rtol=0, atol=0)


@pytest.mark.parametrize("contact", [False, True])
def test_forward_only_step_has_no_tape_and_no_adjoint_buffers(contact):
    """``step`` without gradient records no adjoint launches, allocates no adjoint memory, and returns
    exactly what the differentiable path's forward returns (states and contact outputs)."""
    kw = {"contact": True, "pd_damping": "implicit"} if contact else {}
    sim = get_sim("float64", num_envs=E, **kw)
    q, qd = random_states(E, seed=31)
    if contact:
        q[:, 2] = 0.78  # standing height: the feet touch the floor
    qt = random_targets(q, seed=32)
    with torch.no_grad():
        a = sim.step(t64(q), t64(qd), t64(qt))
    d = sim._nograd_data
    assert d is not None and d.adj_cmds == [] and d.grads == {} and d.grad_buffer.numel() == 0
    b = sim.step(t64(q), t64(qd), t64(qt).requires_grad_(True))
    assert torch.equal(a.q, b.q.detach()) and torch.equal(a.qd, b.qd.detach())
    if contact:
        assert torch.equal(a.foot_force, b.foot_force) and torch.equal(a.contact_depth, b.contact_depth)


def test_per_env_gain_override_changes_only_that_env():
    sim = get_sim("float64", num_envs=3, substeps=2)
    q, qd = random_states(3, seed=31)
    qt = random_targets(q, seed=32, scale=0.05)
    base = sim.step(t64(q), t64(qd), t64(qt))
    kp = np.tile(sim.robot.kp, (3, 1))
    kp[1] *= 1.2
    sim.set_env_params(act_kp=kp)
    try:
        changed = sim.step(t64(q), t64(qd), t64(qt))
    finally:
        sim.set_env_params(act_kp=sim.robot.kp)
    diff = (changed.qd - base.qd).abs().amax(dim=1)
    assert diff[0] == 0 and diff[2] == 0 and diff[1] > 1e-6


@pytest.mark.parametrize(
    ("shapes", "match"),
    [
        (((E, 35), (E, 35), (E, 29)), "q: expected shape"),
        (((E, 36), (E, 35), (E, 28)), "q_target: expected shape"),
        (((E + 1, 36), (E + 1, 35), (E + 1, 29)), "expected 6 envs"),
    ],
)
def test_bad_inputs_raise_one_line_errors(shapes, match):
    sim = get_sim("float64", num_envs=E)
    with pytest.raises(BcgdError, match=match) as info:
        sim.step(*(torch.zeros(s, dtype=torch.float64) for s in shapes))
    assert "\n" not in str(info.value)


def test_bad_config_raises():
    from bcg_deploy.diffsim import SimConfig, Simulator
    from bcg_deploy.robots import load_robot

    with pytest.raises(BcgdError, match="dtype"):
        Simulator(load_robot("g1"), SimConfig(dtype="float16"))
    with pytest.raises(BcgdError, match="pd_damping"):
        Simulator(load_robot("g1"), SimConfig(pd_damping="soft"))


def test_rk4_control_step_matches_mujoco_rk4():
    """integrator="rk4" (4 stages per substep, PD re-evaluated at every stage, clamped) against MuJoCo's own
    RK4 (mj_step, position actuators = the clamped PD) over one control step, float64."""
    import mujoco

    sim = get_sim("float64", num_envs=E, integrator="rk4")
    q, qd = random_states(E, seed=25)
    qt = random_targets(q, seed=26)
    state = sim.step(t64(q), t64(qd), t64(qt))
    m = mj_model()
    m.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
    d = mujoco.MjData(m)
    for e in range(E):
        mujoco.mj_resetData(m, d)
        d.qpos[:], d.qvel[:], d.ctrl[:] = q[e], qd[e], qt[e]
        mujoco.mj_step(m, d, nstep=4)
        np.testing.assert_allclose(state.q[e].numpy(), d.qpos, rtol=0, atol=1e-10)
        np.testing.assert_allclose(state.qd[e].numpy(), d.qvel, rtol=1e-10, atol=1e-9)


def test_rk4_needs_a_contact_free_explicit_configuration():
    from bcg_deploy.diffsim import SimConfig, Simulator
    from bcg_deploy.robots import load_robot

    with pytest.raises(BcgdError, match="integrator='rk4' needs contact=False") as info:
        Simulator(load_robot("g1"), SimConfig(integrator="rk4"))
    assert "\n" not in str(info.value)
    with pytest.raises(BcgdError, match="integrator"):
        Simulator(load_robot("g1"), SimConfig(integrator="leapfrog", contact=False))


def test_cpu_graphs_step_a_free_body_like_plain_launches(tmp_path):
    """Warp's CPU capture records no launch of some kernels on a hingeless free body; such chunks replay
    as plain launches. Values and gradients with graphs equal those without (both integrators)."""
    from bcg_deploy.diffsim import SimConfig, Simulator
    from bcg_deploy.robots.spec import spec_from_mjcf

    xml = (
        '<mujoco model="box"><worldbody><body name="box" pos="0 0 0.5"><freejoint name="root"/>'
        '<inertial pos="0.01 0.02 0" mass="1.3" diaginertia="0.01 0.02 0.03"/>'
        '<geom name="box_foot_contact_0" type="sphere" size="0.005"/></body></worldbody>'
        '<custom><numeric name="velocity_limit" size="1" data="0"/></custom>'
        '<keyframe><key name="home" qpos="0 0 0.5 1 0 0 0"/></keyframe></mujoco>'
    )
    path = tmp_path / "box.xml"
    path.write_text(xml)
    spec = spec_from_mjcf("box", path, path, ("box",), (), 0.25)
    for options in ({}, {"integrator": "rk4", "pd_damping": "explicit"}):
        results = []
        for graphs in (True, False):
            sim = Simulator(spec, SimConfig(num_envs=2, dtype="float64", contact=False, graphs=graphs, **options))
            q0 = t64([[0.0, 0.0, 0.5, 0.9, 0.1, 0.3, 0.2]] * 2).requires_grad_(True)
            qd0 = t64([[0.1, 0.2, 0.3, 3.0, -2.0, 5.0]] * 2).requires_grad_(True)
            q, qd = q0, qd0
            for _ in range(3):
                s = sim.step(q, qd, torch.zeros(2, 0, dtype=torch.float64))
                q, qd = s.q, s.qd
            (q.sum() + qd.sum()).backward()
            values = (q.detach(), qd.detach(), q0.grad, qd0.grad)
            results.append(torch.cat([v.flatten() for v in values]))
        torch.testing.assert_close(results[0], results[1], rtol=0, atol=0)


def test_row_params_change_between_steps_without_rerecording():
    """``set_param_rows`` between two differentiable steps (BCG's bucket simulators): values and
    gradients equal those of a simulator given the same parameters by ``set_env_params`` before each
    step; no re-recording after the first gather, and the first step's backward keeps its parameters."""
    from bcg_deploy.robots import load_robot

    kw = {"contact": True, "pd_damping": "implicit"}
    rows_sim = get_sim("float64", num_envs=2, row_params=True, **kw)
    plain = get_sim("float64", num_envs=2, **kw)
    kp = load_robot("g1").kp * np.array([[0.8], [1.0], [1.3]])
    mass = plain.mjm.body_mass * np.array([[1.0], [1.1], [0.9]])
    friction = np.array([0.4, 0.7, 1.0])
    table = rows_sim.param_table(act_kp=kp, body_mass=mass, friction=friction)
    q, qd = random_states(2, seed=41)
    q[:, 2] = 0.78
    qt = random_targets(q, seed=42)
    maps = (torch.tensor([0, 2]), torch.tensor([1, 0]))

    def two_steps(set_rows):
        x, xd = t64(q).requires_grad_(True), t64(qd).requires_grad_(True)
        target = t64(qt).requires_grad_(True)
        a, b = x, xd
        for rows in maps:
            set_rows(rows)
            s = sim_of[0].step(a, b, target)
            a, b = s.q, s.qd
        (a.square().sum() + b.sum()).backward()
        return a.detach(), b.detach(), x.grad, xd.grad, target.grad

    sim_of = [rows_sim]
    two_steps(lambda rows: rows_sim.set_param_rows(table, rows))  # records once (rows become per-env)
    generation = rows_sim._generation
    got = two_steps(lambda rows: rows_sim.set_param_rows(table, rows))
    assert rows_sim._generation == generation  # gathers only: nothing re-recorded
    sim_of[0] = plain
    want = two_steps(lambda rows: plain.set_env_params(act_kp=kp[rows], body_mass=mass[rows], friction=friction[rows]))
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)
    with pytest.raises(BcgdError, match="row_params"):
        plain.set_param_rows(table, maps[0])
