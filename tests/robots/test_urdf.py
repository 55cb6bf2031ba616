"""Our G1 URDF (``robots/urdf.py``) describes exactly our MJCF: both compiled by MuJoCo (which reads URDF)
and compared body by body, joint by joint, in forward kinematics and in the mass matrix at random poses."""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET

import mujoco
import numpy as np
import pytest

from bcg_deploy.errors import BcgdError
from bcg_deploy.robots import load_robot
from bcg_deploy.robots.urdf import author_urdf, matrix_to_rpy, quat_to_matrix, rpy_to_matrix
from tests.conftest import FACTS, require_shared


@pytest.fixture(scope="module")
def robot():
    return load_robot("g1")


@pytest.fixture(scope="module")
def models(robot):
    """(URDF model with a free joint on its root link, our MJCF model), both compiled by MuJoCo."""
    spec = mujoco.MjSpec.from_file(str(robot.urdf_path))
    spec.body("pelvis").add_freejoint()  # URDF has no floating base; the consumer adds its free flyer
    return spec.compile(), robot.load_model(scene=False)


def _inertia_tensors(m: mujoco.MjModel) -> np.ndarray:
    """Each body's inertia tensor about its centre of mass, in the body frame [nbody, 3, 3]."""
    out = np.zeros((m.nbody, 3, 3))
    for b in range(m.nbody):
        r = quat_to_matrix(m.body_iquat[b])
        out[b] = r @ np.diag(m.body_inertia[b]) @ r.T
    return out


def test_same_bodies_joints_axes_limits_masses_inertias(robot, models):
    mu, mm = models
    names = lambda m, obj, n: [mujoco.mj_id2name(m, obj, i) for i in range(n)]  # noqa: E731
    assert names(mu, mujoco.mjtObj.mjOBJ_BODY, mu.nbody) == names(mm, mujoco.mjtObj.mjOBJ_BODY, mm.nbody)
    assert names(mu, mujoco.mjtObj.mjOBJ_JOINT, mu.njnt)[1:] == list(robot.joint_names)
    np.testing.assert_array_equal(mu.body_parentid, mm.body_parentid)
    np.testing.assert_array_equal(mu.jnt_type, mm.jnt_type)
    np.testing.assert_array_equal(mu.jnt_qposadr, mm.jnt_qposadr)
    np.testing.assert_allclose(mu.jnt_axis, mm.jnt_axis, atol=1e-15)
    np.testing.assert_allclose(mu.jnt_range[1:], mm.jnt_range[1:], atol=0)
    np.testing.assert_allclose(mu.jnt_actfrcrange[1:, 1], robot.effort_limit, atol=0)  # URDF limit effort
    np.testing.assert_allclose(mu.body_pos[2:], mm.body_pos[2:], atol=1e-15)  # the root's is the free joint's
    np.testing.assert_allclose(mu.body_mass, mm.body_mass, atol=0)
    np.testing.assert_allclose(mu.body_ipos, mm.body_ipos, atol=1e-15)
    np.testing.assert_allclose(_inertia_tensors(mu), _inertia_tensors(mm), atol=1e-15, rtol=1e-12)
    assert float(mu.body_mass.sum()) == pytest.approx(33.341142, abs=1e-9)
    root = ET.fromstring(robot.urdf_path.read_text())
    vel = [float(j.find("limit").get("velocity")) for j in root.iter("joint")]
    np.testing.assert_array_equal(vel, robot.velocity_limit)


def test_forward_kinematics_and_mass_matrix_at_random_poses(robot, models):
    """Body frames and inertia frames in the world, and the joint-space mass matrix (ours minus its
    armature, which URDF cannot hold), at 50 random poses with joints across their whole range."""
    mu, mm = models
    du, dm = mujoco.MjData(mu), mujoco.MjData(mm)
    rng = np.random.default_rng(0)
    worst = {"xpos": 0.0, "xmat": 0.0, "xipos": 0.0, "M": 0.0}
    mu_m, mm_m = np.zeros((mu.nv, mu.nv)), np.zeros((mm.nv, mm.nv))
    for _ in range(50):
        quat = rng.normal(size=4)
        q = np.concatenate((rng.normal(size=3), quat / np.linalg.norm(quat),
                            rng.uniform(robot.joint_range[:, 0], robot.joint_range[:, 1])))  # fmt: skip
        du.qpos[:], dm.qpos[:] = q, q
        mujoco.mj_forward(mu, du)
        mujoco.mj_forward(mm, dm)
        mujoco.mj_fullM(mu, du, mu_m)
        mujoco.mj_fullM(mm, dm, mm_m)
        for k in ("xpos", "xmat", "xipos"):
            worst[k] = max(worst[k], float(np.abs(getattr(du, k) - getattr(dm, k)).max()))
        worst["M"] = max(worst["M"], float(np.abs(mu_m - (mm_m - np.diag(mm.dof_armature))).max()))
    assert max(worst.values()) < 1e-9, worst


def test_holosoma_reads_it_as_plain_xml(robot):
    """What holosoma's inference does with the text before pinocchio (policies/wbt.py:59-75: parse, strip
    visual and collision, re-serialise) leaves a tree whose revolute joints are exactly the dof names it maps
    (wbt.py:37-43) and which has the reference body torso_link (wbt.py:46)."""
    text = robot.urdf_path.read_text()
    root = ET.fromstring(text)
    for parent in root.iter():
        for child in list(parent):
            if child.tag.split("}")[-1] in {"visual", "collision"}:
                parent.remove(child)
    root = ET.fromstring(ET.tostring(root, encoding="unicode"))
    joints = [j.get("name") for j in root.iter("joint") if j.get("type") == "revolute"]
    assert joints == list(robot.joint_names)
    links = [link.get("name") for link in root.iter("link")]
    assert links == list(robot.body_names) and "torso_link" in links
    children = {j.find("child").get("link") for j in root.iter("joint")}
    assert [link for link in links if link not in children] == ["pelvis"]  # one root: the free flyer's
    assert "mesh" not in text and "filename" not in text


def test_rpy_convention_round_trips(robot, models):
    """URDF rpy is fixed-axis X, Y, Z: R = Rz(yaw) Ry(pitch) Rx(roll); every body rotation survives it."""
    _, mm = models
    for b in range(2, mm.nbody):
        r = quat_to_matrix(mm.body_quat[b])
        np.testing.assert_allclose(rpy_to_matrix(matrix_to_rpy(r)), r, atol=1e-15)
    r = rpy_to_matrix((0.1, 0.0, 0.0))
    assert r[2, 1] == pytest.approx(np.sin(0.1)) and r[1, 2] == pytest.approx(-np.sin(0.1))


def _same_urdf(a: str, b: str) -> None:
    """Same elements, names and text; numbers equal to 1e-12 relative (the inertia tensors are rotated from
    principal axes, whose last bits depend on the machine's BLAS)."""
    ea, eb = list(ET.fromstring(a).iter()), list(ET.fromstring(b).iter())
    assert [(e.tag, sorted(e.attrib)) for e in ea] == [(e.tag, sorted(e.attrib)) for e in eb]
    for x, y in zip(ea, eb, strict=True):
        for key, va in x.attrib.items():
            vb = y.attrib[key]
            try:
                na, nb = np.array(va.split(), dtype=float), np.array(vb.split(), dtype=float)
            except ValueError:
                assert va == vb, (x.tag, key)
                continue
            np.testing.assert_allclose(na, nb, rtol=1e-12, atol=1e-18, err_msg=f"{x.tag} {key}")


def test_authored_from_the_facts(robot):
    """The committed g1.urdf is what robots.urdf.author_urdf writes from the facts; a hinge off its body origin
    (no URDF form) is refused."""
    facts = json.loads(require_shared(FACTS).read_text())
    _same_urdf(author_urdf(facts), robot.urdf_path.read_text())
    bad = copy.deepcopy(facts)
    bad["joints"][3]["pos"] = [0.0, 0.01, 0.0]
    with pytest.raises(BcgdError, match="left_hip_yaw_joint"):
        author_urdf(bad)
