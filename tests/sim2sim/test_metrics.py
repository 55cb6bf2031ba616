"""Metrics on constructed trajectories with known answers (pure functions, then through the runner)."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from bcg_deploy.robots import load_robot
from bcg_deploy.sim2sim import metrics
from bcg_deploy.sim2sim.reference import reference_from_states
from bcg_deploy.sim2sim.runner import foot_penetration, simulate_run
from bcg_deploy.sim2sim.setup import Sim2SimConfig, setup_from_reference


def test_e_track_known_offsets():
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(7, 30, 3))
    sim = ref.copy()
    sim[:, :15] += [0.03, 0.04, 0.0]  # 5 cm
    sim[:, 15:] += [0.0, 0.0, -0.01]  # 1 cm
    assert metrics.e_track_cm(sim, ref) == pytest.approx(3.0, abs=1e-12)
    np.testing.assert_allclose(metrics.body_position_error_series(sim, ref), 0.03, atol=1e-12)
    assert np.isnan(metrics.e_track_cm(sim[:0], ref[:0]))


def test_joint_rmse_and_root_error_known():
    ref = np.zeros((4, 29))
    sim = ref.copy()
    sim[:, :] = 0.1
    sim[:2] = -0.3  # half the frames 0.3 rad off
    assert metrics.joint_rmse(sim, ref) == pytest.approx(np.sqrt((0.01 + 0.09) / 2), abs=1e-12)
    np.testing.assert_allclose(metrics.joint_error_series(sim, ref), [0.3, 0.3, 0.1, 0.1], atol=1e-12)
    root_ref = np.zeros((3, 3))
    root_sim = np.array([[0.06, 0.08, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.02]])
    assert metrics.root_position_error_cm(root_sim, root_ref) == pytest.approx((10 + 0 + 2) / 3, abs=1e-12)


def test_torque_saturation_and_fall_and_aggregate():
    lim = np.array([10.0, 20.0])
    tau = np.array([[10.0, 0.0], [-10.0, 19.9], [3.0, -20.0], [0.0, 0.0]])
    assert metrics.torque_saturation_fraction(tau, lim) == pytest.approx(3 / 8)
    assert metrics.fall_index(np.array([0.8, 0.5, 0.31, 0.29, 0.1])) == 3
    assert metrics.fall_index(np.array([0.8, 0.5])) is None
    assert metrics.mean_std([1.0, 3.0, float("nan")]) == (2.0, 1.0)
    assert metrics.mean_penetration_mm(0.006, 3) == pytest.approx(2.0)
    assert np.isnan(metrics.mean_penetration_mm(0.0, 0))


def test_foot_penetration_matches_placed_feet():
    """Feet flat at the home pose, lowered so every contact sphere sinks exactly 2 mm into the floor."""
    spec = load_robot()
    m = spec.load_model()
    d = mujoco.MjData(m)
    d.qpos[:] = m.key_qpos[0]
    mujoco.mj_forward(m, d)
    spheres = [g for g in range(m.ngeom) if "_foot_contact_" in m.geom(g).name]
    assert len(spheres) == len(spec.foot_contact_points) == 12  # six per sole
    z = d.geom_xpos[spheres, 2]
    assert np.ptp(z) < 1e-9  # the home pose keeps the soles level
    d.qpos[2] -= z[0] - (spec.foot_contact_points[0].radius - 0.002)
    mujoco.mj_forward(m, d)
    s, n = foot_penetration(m, [d.contact.geom1.copy()], [d.contact.geom2.copy()], [d.contact.dist.copy()])
    assert n == len(spheres)
    assert metrics.mean_penetration_mm(s, n) == pytest.approx(2.0, abs=1e-9)


def _drifting_reference(v_state: float, v_pos: float, frames: int, fps: float = 50.0):
    """Robot floating 2 m up at the home pose; the reference claims root velocity ``v_state`` (m/s along x)
    but its positions move at ``v_pos``."""
    m = load_robot().load_model()
    q = np.tile(m.key_qpos[0], (frames, 1))
    q[:, 2] = 2.0
    q[:, 0] = v_pos * np.arange(frames) / fps
    qd = np.zeros((frames, m.nv))
    qd[:, 0] = v_state
    return reference_from_states(m, q, qd, fps)


def test_runner_metrics_on_constructed_flight():
    """Zero gravity, no contact: the robot keeps its initial velocity, so the error grows as |dv| t and
    E_track = root error = 100 |dv| dt (K + 1) / 2 cm, with joints held exactly."""
    frames, dv = 26, 0.2
    ref = _drifting_reference(v_state=0.5, v_pos=0.5 + dv, frames=frames)
    cfg = Sim2SimConfig(runs=1, replay=True)
    setup = setup_from_reference(ref, cfg)
    setup.model.opt.gravity[:] = 0.0
    r = simulate_run(setup, cfg, 0)
    k = frames - 1
    expected = 100 * dv * (1 / 50) * (k + 1) / 2
    assert not r.fell and r.steps == k
    assert r.e_track_cm == pytest.approx(expected, rel=1e-9)
    assert r.root_pos_err_cm == pytest.approx(expected, rel=1e-9)
    assert r.joint_rmse_rad < 1e-12
    assert np.isnan(r.foot_penetration_mm)
    assert r.torque_saturation == 0.0
    np.testing.assert_allclose(r.series["body_err_cm"], 100 * dv * np.arange(1, k + 1) / 50, rtol=1e-9)


def test_fall_detected_and_run_stops():
    """The same floating robot dropped from 0.5 m with gravity: it ends below 0.3 m; the run stops there."""
    m = load_robot().load_model()
    frames = 51
    q = np.tile(m.key_qpos[0], (frames, 1))
    q[:, 3:7] = [np.cos(0.75), np.sin(0.75), 0.0, 0.0]  # rolled 86 degrees: lands on its side
    q[:, 2] = 0.5
    ref = reference_from_states(m, q, np.zeros((frames, m.nv)), 50.0)
    cfg = Sim2SimConfig(runs=1, replay=True)
    r = simulate_run(setup_from_reference(ref, cfg), cfg, 0)
    assert r.fell
    h = r.series["root_height_m"]
    assert h[-1] < 0.3 and np.all(h[:-1] >= 0.3)
    assert r.fall_time_s == pytest.approx(r.steps / 50)
