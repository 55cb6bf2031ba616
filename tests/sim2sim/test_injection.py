"""Injection pieces without a simulator run: delay line, quantisation, noise, pushes, randomisation."""

from __future__ import annotations

import numpy as np
import pytest

from bcg_deploy.errors import BcgdError
from bcg_deploy.robots import load_robot
from bcg_deploy.rotations import quat_numpy as quat
from bcg_deploy.sim2sim.injection import (
    METHOD_INPUT_NOISE,
    ActionDelayLine,
    DomainRandomization,
    PushConfig,
    SensorNoise,
    apply_domain_randomization,
    domain_randomization_from_metadata,
    ms_to_steps,
    noise_levels,
    parse_ms_range,
    push_schedule,
)
from bcg_deploy.sim2sim.policy import make_inputs
from bcg_deploy.sim2sim.setup import joint_dofs


def test_quantisation_and_parsing():
    assert [ms_to_steps(x, 0.002) for x in (0, 0.9, 1.0, 2.0, 2.9, 3.0, 20.0)] == [0, 0, 1, 1, 1, 2, 10]
    assert ms_to_steps(20.0, 0.005) == 4
    assert parse_ms_range("20", "--latency") == (20.0, 20.0)
    assert parse_ms_range("10:30", "--latency") == (10.0, 30.0)
    for bad in ("x", "30:10", "-5", "1:2:3", "nan"):
        with pytest.raises(BcgdError):
            parse_ms_range(bad, "--latency")


def test_delay_line_orders_and_drops_stale():
    a, b, c = np.zeros(2), np.ones(2), 2 * np.ones(2)
    line = ActionDelayLine(a)
    line.push(issue_step=0, delay_steps=5, target=b, seq=0)
    line.push(issue_step=2, delay_steps=1, target=c, seq=1)  # jitter: the newer target arrives first
    assert line.next_activation == 3
    np.testing.assert_array_equal(line.update(2), a)
    np.testing.assert_array_equal(line.update(3), c)
    np.testing.assert_array_equal(line.update(5), c)  # the older target arriving later is dropped
    assert line.next_activation == np.inf


def test_noise_bounds_and_unit_quaternion():
    rng = np.random.default_rng(0)
    levels = {"base_pos": [0.25, 0.25, 0.01], "base_quat": 0.05, "joint_vel": 0.5}
    noise = SensorNoise(levels, scale=2.0)
    for _ in range(200):
        x = make_inputs(29)
        x["base_quat"][0] = [1, 0, 0, 0]
        noise.apply(x, rng)
        assert np.all(np.abs(x["base_pos"][0]) <= 2 * np.array([0.25, 0.25, 0.01]) + 1e-6)
        assert np.all(np.abs(x["joint_vel"]) <= 1.0 + 1e-6)
        assert np.all(x["joint_pos"] == 0) and np.all(x["base_lin_vel"] == 0)  # no level: untouched
        q = x["base_quat"][0].astype(np.float64)
        assert abs(np.linalg.norm(q) - 1) < 1e-6
        angle = 2 * np.arccos(min(abs(q[0]), 1.0))
        assert angle <= np.sqrt(3) * 0.1 + 1e-5  # rotation vector components within +/- 2 x 0.05 rad
    # body-side composition: q * exp(v) of a yawed base keeps the yaw and adds the body-frame noise
    yaw = np.array([np.cos(0.5), 0, 0, np.sin(0.5)])
    x = make_inputs(29)
    x["base_quat"][0] = yaw
    SensorNoise({"base_quat": 0.1}, 1.0).apply(x, np.random.default_rng(1))
    dq = quat.mul(np.array([yaw[0], -yaw[1], -yaw[2], -yaw[3]]), x["base_quat"][0].astype(np.float64))
    assert 2 * np.arccos(min(abs(dq[0]), 1.0)) <= np.sqrt(3) * 0.1 + 1e-5


def test_noise_levels_name_their_source_and_the_training_scale():
    levels, note = noise_levels({"joint_vel": 0.5, "imu_temp": 1.0}, 1.5)
    assert levels == {"joint_vel": 0.5}
    assert "ignored: imu_temp" in note and "trained with 1.5 x these levels" in note
    assert "trained with" not in noise_levels({"joint_vel": 0.5}, 1.0)[1]
    assert "trained with" not in noise_levels({"joint_vel": 0.5}, None)[1]
    levels, note = noise_levels(None, 1.5)
    assert levels == METHOD_INPUT_NOISE and "METHOD.md" in note


def test_push_schedule_intervals():
    rng = np.random.default_rng(0)
    pushes = push_schedule(PushConfig(), duration_s=60.0, dt=0.002, rng=rng)
    steps = np.array([i for i, _ in pushes])
    gaps = np.diff(np.concatenate([[0], steps])) * 0.002
    assert len(pushes) > 15 and np.all(gaps >= 1.0 - 1e-3) and np.all(gaps <= 3.0 + 1e-3)
    kicks = np.array([k for _, k in pushes])
    assert np.all(np.abs(kicks) <= [0.5, 0.5, 0.2, 0.52, 0.52, 0.78])


def test_domain_randomisation_ranges():
    spec = load_robot()
    m0 = spec.load_model()
    dr = DomainRandomization()
    for seed in range(5):
        m = spec.load_model()
        s = apply_domain_randomization(m, dr, np.random.default_rng(seed), joint_dofs(m))
        assert 0.3 <= s.friction <= 1.2 and np.all(m.geom_friction[:, 0] == s.friction)
        assert m.body_mass[1] - m0.body_mass[1] == pytest.approx(s.base_mass_add_kg)
        ratio = m.body_mass[2:] / m0.body_mass[2:]
        assert np.all((ratio >= 0.8) & (ratio <= 1.2))
        np.testing.assert_allclose(m.body_inertia[2:] / m0.body_inertia[2:], ratio[:, None] * np.ones(3))
        assert np.all(np.abs(m.body_ipos[1:] - m0.body_ipos[1:]) <= 0.03)
        dofs = joint_dofs(m)
        arm = m.dof_armature[dofs] / m0.dof_armature[dofs]
        assert np.all((arm >= 0.75) & (arm <= 1.25))
        assert np.all((s.kp_scale >= 0.8) & (s.kp_scale <= 1.2)) and np.all(np.abs(s.joint_offset) <= 0.01)


def test_torso_com_draws_from_its_own_wider_box_and_leaves_the_other_draws():
    """The training's torso CoM box (whole_body_tracking's y, z +/-5 cm) reaches sim2sim through the
    metadata; the torso's offset is replaced, every other draw is the one a report without it made."""
    spec = load_robot()
    m0 = spec.load_model()
    torso = m0.body("torso_link").id
    wide, _ = domain_randomization_from_metadata(
        {"torso_com_offset_m": [0.025, 0.05, 0.05], "torso_body": "torso_link"}
    )
    offsets = []
    for seed in range(40):
        a, b = spec.load_model(), spec.load_model()
        sa = apply_domain_randomization(a, DomainRandomization(), np.random.default_rng(seed), joint_dofs(a))
        sb = apply_domain_randomization(b, wide, np.random.default_rng(seed), joint_dofs(b))
        others = [i for i in range(a.nbody) if i != torso]
        np.testing.assert_array_equal(a.body_ipos[others], b.body_ipos[others])
        np.testing.assert_array_equal(sa.joint_offset, sb.joint_offset)
        offsets.append(b.body_ipos[torso] - m0.body_ipos[torso])
    off = np.abs(np.array(offsets))
    assert np.all(off <= [0.03, 0.05, 0.05]) and np.all(off.max(0)[1:] > 0.035)
