"""Our G1 MJCF against the physical facts it was authored from (oracle: the facts file)."""

from __future__ import annotations

import json
import re

import mujoco
import numpy as np
import pytest

from bcg_deploy.robots import load_robot
from tests.conftest import FACTS, require_shared


@pytest.fixture(scope="module")
def facts() -> dict:
    return json.loads(require_shared(FACTS).read_text())


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return load_robot("g1").load_model(scene=True)


def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array(
        [
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ]
    )


def _quat_rot(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    return _quat_mul(_quat_mul(q, np.r_[0.0, v]), q * np.array([1, -1, -1, -1]))[1:]


def _axis_angle(axis: np.ndarray, angle: float) -> np.ndarray:
    return np.r_[np.cos(angle / 2), np.sin(angle / 2) * np.asarray(axis)]


def _same_rotation(q1: np.ndarray, q2: np.ndarray, tol: float) -> bool:
    return min(np.abs(q1 - q2).max(), np.abs(q1 + q2).max()) < tol


def _facts_fk(facts: dict, root_pos, root_quat, joint_pos) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """World pose of every body, composed directly from the facts (independent of MuJoCo)."""
    joint_of = {j["body"]: j for j in facts["joints"]}
    hinge_names = [j["name"] for j in facts["joints"][1:]]
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for body in facts["bodies"]:
        if body["parent"] == "world":
            out[body["name"]] = (np.asarray(root_pos, float), np.asarray(root_quat, float))
            continue
        ppos, pquat = out[body["parent"]]
        pos = ppos + _quat_rot(pquat, np.asarray(body["pos"]))
        quat = _quat_mul(pquat, np.asarray(body["quat_wxyz"]))
        joint = joint_of.get(body["name"])
        if joint is not None and joint["type"] == "hinge":
            angle = joint_pos[hinge_names.index(joint["name"])]
            quat = _quat_mul(quat, _axis_angle(joint["axis"], angle))
        out[body["name"]] = (pos, quat)
    return out


def test_sizes_and_mass(facts, model):
    assert (model.nq, model.nv, model.nu, model.nbody - 1) == (36, 35, 29, 30)
    assert abs(model.body_mass.sum() - facts["total_mass"]) < 0.01
    assert abs(load_robot("g1").total_mass - facts["total_mass"]) < 0.01


def test_bodies_match_facts(facts, model):
    for body in facts["bodies"]:
        b = model.body(body["name"])
        assert b.mass[0] == pytest.approx(body["mass"], abs=1e-6)
        np.testing.assert_allclose(b.pos, body["pos"], atol=1e-6)
        assert _same_rotation(b.quat, np.asarray(body["quat_wxyz"]) / np.linalg.norm(body["quat_wxyz"]), 1e-6)
        np.testing.assert_allclose(b.ipos, body["com_pos"], atol=1e-6)
        # The inertia tensor in the body frame is invariant to how the principal axes are ordered.
        want_r = np.zeros(9)
        mujoco.mju_quat2Mat(want_r, np.asarray(body["inertia_quat_wxyz"]) / np.linalg.norm(body["inertia_quat_wxyz"]))
        got_r = np.zeros(9)
        mujoco.mju_quat2Mat(got_r, b.iquat)
        want = want_r.reshape(3, 3) @ np.diag(body["principal_inertia"]) @ want_r.reshape(3, 3).T
        got = got_r.reshape(3, 3) @ np.diag(b.inertia) @ got_r.reshape(3, 3).T
        np.testing.assert_allclose(got, want, atol=1e-6 * max(body["principal_inertia"]))


def test_joints_and_actuators_match_facts(facts, model):
    spec = load_robot("g1")
    hinges = facts["joints"][1:]
    assert list(spec.joint_names) == [j["name"] for j in hinges]
    act = {a["joint"]: a for a in facts["actuators"]}
    omega = 2 * np.pi * 10.0
    for i, j in enumerate(hinges):
        mj = model.joint(j["name"])
        np.testing.assert_allclose(mj.axis, j["axis"], atol=1e-12)
        np.testing.assert_allclose(mj.range, j["range"], atol=1e-12)
        a = act[j["name"]]
        assert spec.armature[i] == pytest.approx(a["armature"], rel=1e-12)
        assert spec.kp[i] == pytest.approx(a["armature"] * omega**2, rel=1e-12)
        assert spec.kd[i] == pytest.approx(4.0 * a["armature"] * omega, rel=1e-12)
        assert spec.effort_limit[i] == a["effort_limit"]
        assert spec.velocity_limit[i] == a["velocity_limit"]
        assert spec.action_scale[i] == pytest.approx(0.25 * a["effort_limit"] / spec.kp[i], rel=1e-12)


def test_home_keyframe_matches_facts(facts, model):
    spec = load_robot("g1")
    pose = facts["poses"]["home"]
    np.testing.assert_allclose(spec.default_root_pos, pose["root_pos"])
    for name, value in zip(spec.joint_names, spec.default_joint_pos, strict=True):
        want = 0.0
        for pattern, v in pose["joint_pos"].items():
            if re.fullmatch(pattern, name):
                want = v
        assert value == want, name


def test_forward_kinematics_matches_facts(facts, model):
    rng = np.random.default_rng(0)
    data = mujoco.MjData(model)
    spec = load_robot("g1")
    lo, hi = spec.joint_range.T
    for _ in range(10):
        root_pos = rng.uniform(-2, 2, 3)
        root_quat = rng.normal(size=4)
        root_quat /= np.linalg.norm(root_quat)
        joints = rng.uniform(lo, hi)
        data.qpos[:] = np.r_[root_pos, root_quat, joints]
        mujoco.mj_kinematics(model, data)
        want = _facts_fk(facts, root_pos, root_quat, joints)
        for name, (pos, quat) in want.items():
            bid = model.body(name).id
            np.testing.assert_allclose(data.xpos[bid], pos, atol=1e-6)
            assert _same_rotation(data.xquat[bid], quat, 1e-6), name


def test_foot_contact_spheres_as_method_says(model):
    spec = load_robot("g1")
    assert len(spec.foot_contact_points) == 8
    want = {(-0.05, 0.025, -0.03), (-0.05, -0.025, -0.03), (0.12, 0.03, -0.03), (0.12, -0.03, -0.03)}
    for foot in spec.foot_bodies:
        pts = [c for c in spec.foot_contact_points if c.body == foot]
        assert {tuple(np.round(c.pos, 9)) for c in pts} == want
        assert all(c.radius == 0.005 for c in pts)
    # Foot capsules of the facts are visual only: the spheres are the feet's whole contact set.
    for g in range(model.ngeom):
        body = model.body(int(model.geom_bodyid[g])).name
        if body in spec.foot_bodies and model.geom_contype[g]:
            assert "foot_contact" in model.geom(g).name


def test_home_pose_stands_on_the_floor(model):
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, model.key("home").id)
    mujoco.mj_forward(model, data)
    heights = [
        data.geom_xpos[g, 2] - model.geom_size[g, 0] for g in range(model.ngeom) if "foot_contact" in model.geom(g).name
    ]
    assert max(abs(h) for h in heights) < 2e-3


def test_authoring_tool_reproduces_the_packaged_model(facts):
    """The committed MJCF is exactly what tools/author_g1_mjcf.py writes from the facts."""
    from tests.conftest import load_script

    author = load_script("tools/author_g1_mjcf.py")
    assert author.author_robot(facts) == load_robot("g1").mjcf_path.read_text()
