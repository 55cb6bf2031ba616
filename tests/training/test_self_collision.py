"""The self-penetration penalty against its oracles: MuJoCo's own collision detection for the pairs and
depths, float64 finite differences for the gradient, and the env's reward for its wiring."""

import mujoco
import numpy as np
import pytest
import torch

from bcg_deploy.observations.kinematics import Kinematics
from bcg_deploy.robots import load_robot
from bcg_deploy.training.config import SELF_COLLISION_WEIGHT, TrainConfig, self_collision_weight
from bcg_deploy.training.env.self_collision import SelfCollision, segment_distance, self_collision_pairs


@pytest.fixture(scope="module")
def robot():
    return load_robot()


def _random_poses(m: mujoco.MjModel, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    q = np.zeros((n, m.nq))
    q[:, 2], q[:, 3] = 1.0, 1.0
    q[:, 7:] = rng.uniform(m.jnt_range[1:, 0], m.jnt_range[1:, 1], size=(n, m.nq - 7))
    return q


def test_depths_equal_mujoco_contacts_over_random_poses(robot) -> None:
    """Every penetrating pair MuJoCo reports (robot alone, no floor) is one of ours with the same depth, and
    none of ours penetrates where MuJoCo reports nothing."""
    m = robot.load_model(scene=False)
    d = mujoco.MjData(m)
    sc = SelfCollision(m, torch.float64)
    kin = Kinematics(robot, torch.float64)
    poses = _random_poses(m, 60)
    pen = sc(kin.transforms(torch.as_tensor(poses))).numpy()
    touching = 0
    for q, ours in zip(poses, pen, strict=True):
        d.qpos[:] = q
        mujoco.mj_forward(m, d)
        theirs: dict[tuple[int, int], float] = {}
        for c in d.contact[: d.ncon]:
            key = (min(c.geom1, c.geom2), max(c.geom1, c.geom2))
            theirs[key] = max(theirs.get(key, 0.0), -c.dist)
        for i, pair in enumerate(sc.pair_geoms):
            assert ours[i] == pytest.approx(theirs.pop(pair, 0.0), abs=1e-8), pair
            touching += ours[i] > 0
        assert not theirs, f"MuJoCo pairs the penalty lacks: {theirs}"
    assert touching > 20  # random joint angles cross limbs: the comparison saw real contacts


def test_pairs_follow_the_models_filters(robot) -> None:
    m = robot.load_model(scene=False)
    pairs = self_collision_pairs(m)
    bodies = {(m.geom_bodyid[a], m.geom_bodyid[b]) for a, b in pairs}
    pelvis, hip_roll = m.body("pelvis").id, m.body("left_hip_roll_link").id
    assert (pelvis, hip_roll) not in bodies and (hip_roll, pelvis) not in bodies  # <exclude>
    assert all(m.body_parentid[a] != b and m.body_parentid[b] != a for a, b in bodies)
    left_foot, right_shin = m.body("left_ankle_roll_link").id, m.body("right_knee_link").id
    assert (left_foot, right_shin) in bodies or (right_shin, left_foot) in bodies


def test_segment_distance_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        pts = torch.tensor(rng.normal(size=(4, 3)), dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda x: segment_distance(x[0], x[1], x[2], x[3]), (pts,))
    point = torch.tensor(rng.normal(size=(2, 3)), dtype=torch.float64, requires_grad=True)
    seg = torch.as_tensor(rng.normal(size=(2, 3)), dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda x: segment_distance(x[0], x[0], seg[0], seg[1]), (point,))
    assert torch.autograd.gradcheck(lambda x: segment_distance(seg[0], seg[1], x[1], x[1]), (point,))


def test_weight_default_is_on_for_deploy_profiles_and_off_for_the_paper() -> None:
    cfg = TrainConfig()
    assert self_collision_weight(cfg.env) == SELF_COLLISION_WEIGHT < 0
    cfg.env.obs_profile = "paper"
    assert self_collision_weight(cfg.env) == 0.0
    cfg.env.self_collision_weight = -5.0
    assert self_collision_weight(cfg.env) == -5.0
