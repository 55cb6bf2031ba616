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


def _capsule_segments(facts: dict, body: str) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """(end a, end b, radius) of the facts' foot capsules of ``body``, in the body frame."""
    out = []
    for g in facts["collision_geoms"]:
        if g["body"] == body and g["type"] == "capsule" and "_foot" in g["name"]:
            mat = np.zeros(9)
            mujoco.mju_quat2Mat(mat, np.asarray(g["quat_wxyz"], float))
            axis = mat.reshape(3, 3)[:, 2] * g["size"][1]
            out.append((np.asarray(g["pos"]) - axis, np.asarray(g["pos"]) + axis, g["size"][0]))
    return out


def _hull(points: np.ndarray) -> np.ndarray:
    """Convex hull [k, 2] of 2-D points, counter-clockwise (monotone chain)."""
    pts = sorted(map(tuple, np.round(points, 12)))

    def cross(o: tuple, a: tuple, b: tuple) -> float:
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    def half(seq: list) -> list:
        out: list = []
        for p in seq:
            while len(out) >= 2 and cross(out[-2], out[-1], p) <= 0:
                out.pop()
            out.append(p)
        return out[:-1]

    return np.array(half(pts) + half(pts[::-1]))


def _area(hull: np.ndarray) -> float:
    x, y = hull[:, 0], hull[:, 1]
    return 0.5 * float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))


def _inside(hull: np.ndarray, p: np.ndarray) -> bool:
    e, d = np.roll(hull, -1, axis=0) - hull, p - hull
    return bool(np.all(e[:, 0] * d[:, 1] - e[:, 1] * d[:, 0] >= -1e-12))


def test_sole_spheres_sit_on_the_facts_foot_capsules(model, facts):
    """Each foot has six contact spheres, each on the axis of one of the facts' seven sole capsules with its
    radius (a capsule meets a plane at its end spheres), and their support polygon lies inside the capsule
    sole's and covers most of it."""
    spec = load_robot("g1")
    assert len(spec.foot_contact_points) == 12
    for foot in spec.foot_bodies:
        caps = _capsule_segments(facts, foot)
        assert len(caps) == 7
        pts = [c for c in spec.foot_contact_points if c.body == foot]
        assert len(pts) == 6
        for c in pts:
            p = np.asarray(c.pos)
            dist = [
                np.linalg.norm(p - (a + np.clip(np.dot(p - a, b - a) / np.dot(b - a, b - a), 0, 1) * (b - a)))
                for a, b, _ in caps
            ]
            k = int(np.argmin(dist))
            assert dist[k] < 2e-3, (foot, c.pos)  # on a capsule's axis (the facts' capsules are tilted by < 2 mm)
            assert c.radius == caps[k][2]
        capsule_sole = _hull(np.array([e[:2] for a, b, _ in caps for e in (a, b)]))
        sole = np.array([c.pos[:2] for c in pts])
        assert all(_inside(capsule_sole, p) for p in sole)  # no support the capsule sole lacks
        assert _area(_hull(sole)) > 0.8 * _area(capsule_sole)
    # Foot capsules of the facts are visual only: the spheres are the feet's whole contact set.
    for g in range(model.ngeom):
        body = model.body(int(model.geom_bodyid[g])).name
        if body in spec.foot_bodies and model.geom_contype[g]:
            assert "foot_contact" in model.geom(g).name


def test_body_primitives_collide_with_each_other_except_home_pose_overlaps(model):
    """Self-collision is on for every collision primitive; the only excluded body pairs are those whose
    primitives overlap in the home pose, and in the home pose no two bodies touch."""
    assert all(model.geom_conaffinity[g] == 1 for g in range(model.ngeom) if model.geom_contype[g])
    pairs = zip(*_excludes(model), strict=True)
    excluded = {tuple(sorted((model.body(b1).name, model.body(b2).name))) for b1, b2 in pairs}
    assert excluded == {
        ("left_elbow_link", "left_wrist_pitch_link"),
        ("left_hip_roll_link", "pelvis"),
        ("right_elbow_link", "right_wrist_pitch_link"),
        ("pelvis", "right_hip_roll_link"),
    }
    robot = load_robot("g1").load_model(scene=False)
    data = mujoco.MjData(robot)
    mujoco.mj_resetDataKeyframe(robot, data, robot.key("home").id)
    mujoco.mj_forward(robot, data)
    assert data.ncon == 0  # the robot alone: no floor, and no self-contact in the home pose


def _excludes(model) -> tuple[list[int], list[int]]:
    sig = model.exclude_signature  # body1 << 16 | body2
    return [int(s) >> 16 for s in sig], [int(s) & 0xFFFF for s in sig]


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
