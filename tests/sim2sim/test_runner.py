"""The MuJoCo loop: PD against MuJoCo's own position actuators, latency timing, determinism, pinning."""

from __future__ import annotations

import json

import mujoco
import numpy as np
import pytest

from bcg_deploy.robots import load_robot
from bcg_deploy.sim2sim.injection import InitDraw
from bcg_deploy.sim2sim.reference import initial_state, reference_from_states
from bcg_deploy.sim2sim.report import Report
from bcg_deploy.sim2sim.runner import run_streams, simulate_run
from bcg_deploy.sim2sim.setup import Sim2SimConfig, prepare, setup_from_reference


@pytest.fixture(scope="module")
def spec():
    return load_robot()


@pytest.fixture(scope="module")
def waving_ref(spec):
    """Standing at the home pose, arms and waist swinging, a wrist stepping far enough to saturate."""
    m = spec.load_model()
    frames = 31
    t = np.arange(frames) / 50.0
    q = np.tile(m.key_qpos[0], (frames, 1))
    q[:, 7:] += 0.3 * np.sin(2 * np.pi * 1.5 * t)[:, None] * (np.arange(29) >= 12)
    q[10:, 7 + 20] += 1.0  # left wrist pitch steps by 1 rad: kp * 1 rad > its 5 N m limit
    qd = np.zeros((frames, m.nv))
    return reference_from_states(m, q, qd, 50.0)


def test_pd_equals_mujoco_position_actuators(spec, waving_ref):
    """Our explicit PD (torque motors) reproduces MuJoCo's position actuators (kp, kv, forcerange) under
    the Euler integrator step for step: the PD is applied once, with the robot's gains and limits."""
    cfg = Sim2SimConfig(runs=1, replay=True, stop_on_fall=False)
    setup = setup_from_reference(waving_ref, cfg)
    ours, targets, torques = [], [], []
    simulate_run(
        setup,
        cfg,
        0,
        on_physics_step=lambda i, tgt, d: (
            ours.append(d.qpos.copy()),
            targets.append(tgt.copy()),
            torques.append(d.ctrl.copy()),
        ),  # fmt: skip
    )
    m = spec.load_model()  # the packaged MJCF: position actuators
    m.opt.timestep = cfg.physics_dt
    m.opt.integrator = mujoco.mjtIntegrator.mjINT_EULER
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = initial_state(waving_ref, m.nq, m.nv)
    theirs = []
    for tgt in targets:
        d.ctrl[:] = tgt
        mujoco.mj_step(m, d)
        theirs.append(d.qpos.copy())
    np.testing.assert_allclose(np.array(ours), np.array(theirs), atol=1e-9)
    sat = np.isclose(np.abs(np.array(torques)), spec.effort_limit).any()
    assert sat, "the test motion should hit an effort limit somewhere"
    np.testing.assert_allclose(np.array(torques), np.array(torques).clip(-spec.effort_limit, spec.effort_limit))


@pytest.mark.parametrize("latency_ms", [0.0, 6.0, 7.0, 20.0, 26.0])
def test_action_step_reaches_actuators_after_the_delay(spec, waving_ref, latency_ms):
    """A step change of the action at control step k0 drives the PD from physics step k0 * S + L on,
    L = latency quantised to physics steps (ties up): exactly, not one step early or late."""
    cfg = Sim2SimConfig(runs=1, replay=True, stop_on_fall=False, latency_ms=(latency_ms, latency_ms))
    setup = setup_from_reference(waving_ref, cfg)
    a = np.asarray(setup.reference.joint_pos[0]).copy()
    b = a + 0.3
    k0 = 5

    def controller(k, inputs):
        return b if k >= k0 else a

    states, tgts, ctrls = [], [], []

    def on_step(i, tgt, d):
        tgts.append(tgt.copy())
        ctrls.append(d.ctrl.copy())
        states.append((d.qpos.copy(), d.qvel.copy()))

    q0, v0 = initial_state(waving_ref, 36, 35)
    simulate_run(setup, cfg, 0, controller=controller, on_physics_step=on_step)
    lag = int(np.floor(latency_ms / 2.0 + 0.5 + 1e-9))
    first_b = next(i for i, t in enumerate(tgts) if np.array_equal(t, b))
    assert first_b == k0 * setup.n_sub + lag
    # the torque itself: at step first_b the PD uses b, one step earlier it used a (state before the step)
    for i, tgt in ((first_b - 1, a), (first_b, b)):
        q, v = states[i - 1] if i > 0 else (q0, v0)
        tau = np.clip(spec.kp * (tgt - q[7:]) - spec.kd * v[6:], -spec.effort_limit, spec.effort_limit)
        np.testing.assert_allclose(ctrls[i], tau, atol=1e-9)


def test_observation_latency_delivers_the_old_state(waving_ref):
    """With --obs-latency L the controller at step k reads the state of physics step k * S - L."""
    cfg = Sim2SimConfig(runs=1, replay=True, stop_on_fall=False, obs_latency_ms=(14.0, 14.0))
    setup = setup_from_reference(waving_ref, cfg)
    seen, states = {}, [setup.reference.joint_pos[0]]

    def controller(k, inputs):
        seen[k] = inputs["joint_pos"][0].copy()
        return setup.reference.joint_pos[min(k + 1, setup.reference.num_frames - 1)]

    simulate_run(setup, cfg, 0, controller=controller, on_physics_step=lambda i, t, d: states.append(d.qpos[7:].copy()))
    lag = 7
    for k in (0, 1, 3, 10):
        j = max(k * setup.n_sub - lag, 0)
        np.testing.assert_array_equal(seen[k], states[j].astype(np.float32))


def test_same_seed_same_json_and_seeds_differ_with_randomisation(waving_ref):
    cfg = Sim2SimConfig(runs=2, seed=3, replay=True, randomize=True, push=True, latency_ms=(0.0, 30.0))
    setup = setup_from_reference(waving_ref, cfg)

    def report(c):
        return Report.build(setup.settings, [simulate_run(setup, c, r) for r in range(c.runs)]).to_json()

    first, again = report(cfg), report(cfg)
    assert first == again
    runs = json.loads(first)["runs"]
    assert runs[0]["e_track_cm"] != runs[1]["e_track_cm"]
    assert runs[0]["randomization"]["friction"] != runs[1]["randomization"]["friction"]
    cfg4 = Sim2SimConfig(runs=2, seed=4, replay=True, randomize=True, push=True, latency_ms=(0.0, 30.0))
    assert report(cfg4) != first


def test_a_given_start_is_the_runs_initial_state(waving_ref):
    cfg = Sim2SimConfig(runs=1, replay=True, stop_on_fall=False)
    setup = setup_from_reference(waving_ref, cfg)  # a replay: no seeded perturbation of its own
    j = setup.spec.num_joints
    unperturbed = simulate_run(setup, cfg, 0)
    level = simulate_run(setup, cfg, 0, start=InitDraw(np.zeros(3), np.zeros(3), np.zeros(j)))
    rolled = simulate_run(setup, cfg, 0, start=InitDraw(np.zeros(3), np.array([0.05, 0.0, 0.0]), np.zeros(j)))
    assert unperturbed.initial_perturbation is None
    assert level.e_track_cm == pytest.approx(unperturbed.e_track_cm, rel=1e-9)
    assert rolled.e_track_cm != pytest.approx(unperturbed.e_track_cm, rel=1e-3)
    assert rolled.initial_perturbation["root_roll_pitch_yaw_rad"] == [0.05, 0.0, 0.0]


def test_a_given_start_replaces_the_seeded_draw(untrained_onnx):
    cfg = Sim2SimConfig(runs=2, seed=3, stop_on_fall=False, max_duration_s=0.4)
    setup = prepare(untrained_onnx, cfg)
    seeded = simulate_run(setup, cfg, 1)
    own = setup.init_noise.draw(run_streams(3, 1)["init"], setup.spec.num_joints)
    other = setup.init_noise.draw(run_streams(3, 0)["init"], setup.spec.num_joints)
    again, moved = simulate_run(setup, cfg, 1, start=own), simulate_run(setup, cfg, 1, start=other)
    assert again.e_track_cm == seeded.e_track_cm and again.initial_perturbation == seeded.initial_perturbation
    assert moved.initial_perturbation == other.summary() != seeded.initial_perturbation
    assert moved.e_track_cm != seeded.e_track_cm


def test_pin_base_follows_the_reference_root(spec, waving_ref):
    cfg = Sim2SimConfig(runs=1, replay=True, pin_base=True)
    r = simulate_run(setup_from_reference(waving_ref, cfg), cfg, 0)
    assert not r.fell
    assert r.root_pos_err_cm == pytest.approx(0.0, abs=1e-9)
    assert r.joint_rmse_rad > 0 and r.e_track_cm > 0
    assert r.torque_saturation > 0


def test_foot_penetration_equals_mujoco_contact_dist(spec):
    """The run's foot penetration (from sphere heights) equals the mean -dist of MuJoCo's own
    foot-sphere/floor contacts over every physics step, with other contacts (a falling robot) ignored."""
    from bcg_deploy.sim2sim.runner import foot_penetration
    from bcg_deploy.sim2sim.setup import foot_geoms

    m = spec.load_model()
    q = np.tile(m.key_qpos[0], (151, 1))  # PD alone cannot balance: it topples within 3 s
    ref = reference_from_states(m, q, np.zeros((151, m.nv)), 50.0)
    cfg = Sim2SimConfig(runs=1, replay=True, stop_on_fall=False)
    setup = setup_from_reference(ref, cfg)
    g1, g2, dist, others = [], [], [], [0]
    feet = set(foot_geoms(setup.model).tolist())

    def on_step(i, tgt, d):
        c = d.contact
        g1.append(c.geom1.copy())
        g2.append(c.geom2.copy())
        dist.append(c.dist.copy())
        others[0] += sum(1 for a, b in zip(c.geom1, c.geom2, strict=True) if a not in feet and b not in feet)

    r = simulate_run(setup, cfg, 0, on_physics_step=on_step)
    s, n = foot_penetration(setup.model, g1, g2, dist)
    assert n > 100 and others[0] > 0  # feet touched, and so did other bodies (it fell)
    assert r.foot_penetration_mm == pytest.approx(1000 * s / n, rel=1e-9)
