"""Built-in synthetic clips: kinematic soundness on our model, and that each is what its name says."""

from __future__ import annotations

import numpy as np
import pytest

from bcg_deploy.motions import load_builtin, soundness
from bcg_deploy.motions.builtin import BUILTINS, generate_builtin
from bcg_deploy.motions.metrics import FootCfg, foot_sphere_heights, stance_slides
from bcg_deploy.rotations import quat_numpy as Q

NAMES = ("run", "jump", "fight", "dance")


@pytest.fixture(scope="module")
def clips(robot):
    return {n: load_builtin(n, robot) for n in NAMES}


def _segments(mask: np.ndarray) -> list[tuple[int, int]]:
    m = np.concatenate([[False], mask, [False]]).astype(np.int8)
    e = np.flatnonzero(np.diff(m))
    return list(zip(e[::2], e[1::2], strict=True))


def _body(motion, robot, name: str) -> np.ndarray:
    return motion.body_pos_w[:, robot.body_names.index(name)]


@pytest.mark.parametrize("name", NAMES)
def test_soundness(clips, robot, name):
    """>= 10 s, joints inside their ranges, foot spheres not below -5 mm, stance slide <= 2 cm."""
    m = clips[name]
    s = soundness(m, robot)
    print(f"{name}: {s.as_dict()}")
    assert s.duration_s >= 10.0
    assert s.max_joint_limit_violation <= 0.0
    assert s.min_foot_height >= -0.005
    assert s.max_stance_slide <= 0.02
    stance, _ = stance_slides(m, robot)
    assert s.stance_segments >= 8 and stance.mean() > 0.2  # the slide figure is not vacuous


@pytest.mark.parametrize("name", NAMES)
def test_well_formed(clips, robot, name):
    m = clips[name]
    assert m.fps == 50.0 and m.source["kind"] == "builtin" and m.source["synthetic"] is True
    for field in ("root_pos", "root_quat", "joint_pos", "joint_vel", "body_pos_w", "body_lin_vel_w"):
        assert np.isfinite(getattr(m, field)).all()
    np.testing.assert_allclose(np.linalg.norm(m.root_quat, axis=1), 1.0, atol=1e-12)
    assert (np.abs(m.joint_vel) <= robot.velocity_limit).all()
    assert m.root_pos[:, 2].min() > 0.5  # far from the 0.3 m fall line


def test_run_is_a_run(clips, robot):
    m = clips["run"]
    _, h = foot_sphere_heights(m, robot)
    flights = _segments(h.min(axis=1) > FootCfg().stance_height)
    speed = np.linalg.norm(m.root_lin_vel[:, :2], axis=1)
    travel = m.root_pos[-1, 0] - m.root_pos[0, 0]
    print(f"run: travel {travel:.1f} m, max speed {speed.max():.2f} m/s, {len(flights)} flight phases")
    assert travel > 10.0 and speed.max() > 1.5
    assert len(flights) >= 10  # both feet off the floor between steps
    left, right = h[:, :4].min(axis=1) < 0.01, h[:, 4:].min(axis=1) < 0.01
    assert len(_segments(left)) >= 10 and len(_segments(right)) >= 10


def test_jump_has_six_flights(clips, robot):
    m = clips["jump"]
    _, h = foot_sphere_heights(m, robot)
    flights = [(a, b) for a, b in _segments(h.min(axis=1) > 0.02) if (b - a) / m.fps >= 0.2]
    z = m.root_pos[:, 2]
    print(f"jump: {len(flights)} flights, pelvis {z.min():.2f}..{z.max():.2f} m")
    assert len(flights) == 6
    assert z.max() - z.min() > 0.25
    yaw = np.unwrap(2 * np.arctan2(m.root_quat[:, 3], m.root_quat[:, 0]))
    assert np.abs(np.diff(yaw)).max() * m.fps > 2.0  # the turning jumps spin in the air


def test_fight_punches_and_kicks(clips, robot):
    m = clips["fight"]
    heading = Q.rotate(m.root_quat, np.array([1.0, 0.0, 0.0]))
    reach = []
    for side in ("left", "right"):
        rel = _body(m, robot, f"{side}_wrist_yaw_link") - m.root_pos
        reach.append(np.sum(rel[:, :2] * heading[:, :2], axis=1))
    punches = sum(len(_segments(r > 0.42)) for r in reach)
    _, h = foot_sphere_heights(m, robot)
    kicks = len(_segments(h.max(axis=1) > 0.4))
    print(f"fight: {punches} punches (wrist > 0.42 m ahead), {kicks} kicks (a foot > 0.4 m up)")
    assert punches >= 8 and kicks == 2


def test_dance_turns_and_raises_arms(clips, robot):
    m = clips["dance"]
    yaw = np.unwrap(2 * np.arctan2(m.root_quat[:, 3], m.root_quat[:, 0]))
    torso = robot.body_names.index("torso_link")
    head = m.body_pos_w[:, torso] + Q.rotate(m.body_quat_w[:, torso], np.array([0.0, 0.0, 0.43]))
    up = np.minimum(_body(m, robot, "left_wrist_yaw_link")[:, 2], _body(m, robot, "right_wrist_yaw_link")[:, 2])
    sway = np.ptp(m.root_pos[: int(4 * m.fps), 1])
    print(f"dance: turned {yaw.max() - yaw.min():.2f} rad, both hands above the head {np.mean(up > head[:, 2]):.0%}")
    assert yaw.max() - yaw.min() > 2 * np.pi - 0.05
    assert np.mean(up > head[:, 2]) > 0.15
    assert sway > 0.15  # step-touch travels side to side


def test_generation_is_deterministic_and_cached(clips, robot, bcgd_home):
    again = generate_builtin("dance", robot)
    np.testing.assert_array_equal(again.joint_pos, clips["dance"].joint_pos)
    assert len(list((bcgd_home / "cache").glob("*.npz"))) == len(NAMES)
    cached = load_builtin("dance", robot)
    np.testing.assert_array_equal(cached.body_pos_w, clips["dance"].body_pos_w)
    assert BUILTINS["dance"].duration_s == pytest.approx(cached.duration)
