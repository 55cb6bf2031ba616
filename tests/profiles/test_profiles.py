"""The observation profiles: declarations as the consumers declare them, maths against MuJoCo, training
with a deployable profile (plain SHAC and SHAC + BCG) recording it in run.pt."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from bcg_deploy.cli import _register, app
from bcg_deploy.errors import BcgdError
from bcg_deploy.observations.paper import ObservationModule
from bcg_deploy.observations.profile import ProfileObservation
from bcg_deploy.profiles import PROFILES, get_profile, make_obs_terms, profile_of_config
from bcg_deploy.profiles.terms import align_reference
from bcg_deploy.robots import load_robot
from bcg_deploy.rotations.quat_torch import heading_rot
from bcg_deploy.training import checkpoint as ckpt_io

from ..training.conftest import tiny_cfg


def test_paper_profile_is_the_849_observation():
    robot = load_robot("g1")
    paper = get_profile("paper")
    assert paper.obs_dim == 849 and paper.terms == make_obs_terms()
    assert paper.spec() == ObservationModule(robot, _clip(robot)).spec()


def test_deployable_layouts():
    """whole_body_tracking tracking_env_cfg.py:118-129 (order, noise), flat_env_cfg.py:38-39 (WoSE drops two);
    unitree_rl_mjlab deploy.yaml:17-53 (names, order)."""
    bm = get_profile("beyondmimic")
    assert bm.term_names == ("command", "motion_anchor_pos_b", "motion_anchor_ori_b", "base_lin_vel",
                             "base_ang_vel", "joint_pos", "joint_vel", "actions")  # fmt: skip
    assert [t.size for t in bm.terms] == [58, 3, 6, 3, 3, 29, 29, 29] and bm.obs_dim == 160
    assert [t.noise for t in bm.terms] == [0.0, 0.25, 0.05, 0.5, 0.2, 0.01, 0.5, 0.0]
    wose = get_profile("beyondmimic_wose")
    assert wose.term_names == tuple(n for n in bm.term_names if n not in ("motion_anchor_pos_b", "base_lin_vel"))
    un = get_profile("unitree")
    assert un.term_names == ("motion_command", "motion_anchor_ori_b", "base_ang_vel", "joint_pos_rel",
                             "joint_vel_rel", "last_action")  # fmt: skip
    assert [t.quantity for t in un.terms] == [t.quantity for t in wose.terms]
    for p in PROFILES.values():
        assert all(p.signal(n) for n in p.term_names)
        assert p.pins == (p.name == "holosoma")
    with pytest.raises(BcgdError, match="observation profile 'nope'"):
        get_profile("nope")
    assert profile_of_config({"env": {"num_envs": 2}}) == "paper"  # old checkpoints


# holosoma fc600e7 src/holosoma_inference/holosoma_inference/config/config_values/robot.py:52-62 (dof_names)
_LEG = ("hip_pitch", "hip_roll", "hip_yaw", "knee", "ankle_pitch", "ankle_roll")
_ARM = ("shoulder_pitch", "shoulder_roll", "shoulder_yaw", "elbow", "wrist_roll", "wrist_pitch", "wrist_yaw")
HOLOSOMA_DOF_NAMES = (
    *(f"{side}_{j}_joint" for side in ("left", "right") for j in _LEG),
    "waist_yaw_joint", "waist_roll_joint", "waist_pitch_joint",
    *(f"{side}_{j}_joint" for side in ("left", "right") for j in _ARM),
)  # fmt: skip


def test_holosoma_layout_and_pins():
    """holosoma sorts the actor terms by name before concatenating, in training
    (managers/observation/manager.py:138-142) and in inference (policies/base.py:126, 506); sizes
    config_values/observation.py:117-126 (inference), noise config_values/wbt/g1/observation.py:10-39 (trainer);
    default pose inference robot.py:34-40 and action scale 1.0 task.py:29 (fixed: not read from the ONNX)."""
    h = get_profile("holosoma")
    assert h.term_names == ("actions", "base_ang_vel", "dof_pos", "dof_vel", "motion_command", "motion_ref_ori_b")
    assert list(h.term_names) == sorted(h.term_names)
    assert [t.size for t in h.terms] == [29, 3, 29, 29, 58, 6] and h.obs_dim == 154
    assert [t.noise for t in h.terms] == [0.0, 0.2, 0.01, 0.5, 0.0, 0.05]
    assert sorted(t.quantity for t in h.terms) == sorted(t.quantity for t in get_profile("unitree").terms)
    robot = load_robot("g1")
    assert robot.joint_names == HOLOSOMA_DOF_NAMES  # the pinned pose is in our joint order
    pinned = h.pin(robot)
    assert pinned.default_joint_pos[[0, 3, 4, 15, 16, 18, 23]].tolist() == [-0.312, 0.669, -0.363, 0.2, 0.2, 0.6, -0.2]
    assert np.all(pinned.action_scale == 1.0) and pinned.kp is robot.kp
    assert get_profile("unitree").pin(robot) is robot
    assert [p.reference_lag for p in PROFILES.values()] == [int(p.name == "holosoma") for p in PROFILES.values()]
    clip = _clip(robot)
    mod = ProfileObservation(robot, clip, "holosoma", dtype=torch.float64)
    q = torch.zeros(1, 36, dtype=torch.float64)
    q[0, 3] = 1.0
    cmd = lambda step: mod(q, torch.zeros(1, 35), torch.tensor([step]), torch.zeros(1, 29))[0, 90:119]  # noqa: E731
    np.testing.assert_array_equal(cmd(0).numpy(), clip["joint_pos"][0])  # frame 0 at the first step, as holosoma
    np.testing.assert_array_equal(cmd(4).numpy(), clip["joint_pos"][3])


def _clip(robot, n=6, seed=0):
    """Reference arrays from MuJoCo FK of a few random poses (Motion layout)."""
    rng = np.random.default_rng(seed)
    m = robot.load_model()
    d = mujoco.MjData(m)
    out = {k: [] for k in ("root_pos", "root_quat", "joint_pos", "joint_vel", "body_pos_w", "body_quat_w",
                           "body_lin_vel_w", "body_ang_vel_w")}  # fmt: skip
    for _ in range(n):
        q = _random_q(robot, rng)
        d.qpos[:] = q
        mujoco.mj_kinematics(m, d)
        out["root_pos"].append(q[:3])
        out["root_quat"].append(q[3:7])
        out["joint_pos"].append(q[7:])
        out["joint_vel"].append(rng.normal(size=robot.num_joints))
        out["body_pos_w"].append(d.xpos[1:].copy())
        out["body_quat_w"].append(d.xquat[1:].copy())
        out["body_lin_vel_w"].append(rng.normal(size=(m.nbody - 1, 3)))
        out["body_ang_vel_w"].append(rng.normal(size=(m.nbody - 1, 3)))
    return {k: np.asarray(v) for k, v in out.items()}


def _random_q(robot, rng):
    quat = rng.normal(size=4)
    return np.concatenate(([0.1, -0.2, 0.8], quat / np.linalg.norm(quat), robot.default_joint_pos
                           + rng.uniform(-0.3, 0.3, robot.num_joints)))  # fmt: skip


@pytest.mark.parametrize("name", ["beyondmimic", "beyondmimic_wose", "unitree", "holosoma"])
def test_profile_maths_against_mujoco(name):
    """Each term from first principles on MuJoCo's xpos/xmat (the anchor is torso_link)."""
    robot = load_robot("g1")
    clip = _clip(robot)
    mod = ProfileObservation(robot, clip, name, dtype=torch.float64)
    rng = np.random.default_rng(1)
    m = robot.load_model()
    d = mujoco.MjData(m)
    q = _random_q(robot, rng)
    qd = rng.normal(size=m.nv)
    act = rng.uniform(-1, 1, robot.num_joints)
    step = 3
    obs = mod(torch.as_tensor(q)[None], torch.as_tensor(qd)[None], torch.tensor([step]), torch.as_tensor(act)[None])
    t = step - get_profile(name).reference_lag  # the frame the consumer hands the motion terms at this step
    d.qpos[:] = q
    mujoco.mj_kinematics(m, d)
    torso = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "torso_link")
    ra, pa = d.xmat[torso].reshape(3, 3), d.xpos[torso]
    ti = robot.body_names.index("torso_link")
    rm = np.zeros(9)
    mujoco.mju_quat2Mat(rm, clip["body_quat_w"][t, ti])
    rel = ra.T @ rm.reshape(3, 3)
    expect = {
        "motion_command": np.concatenate((clip["joint_pos"][t], clip["joint_vel"][t])),
        "motion_anchor_pos_b": ra.T @ (clip["body_pos_w"][t, ti] - pa),
        "motion_anchor_ori_b": rel[:, :2].reshape(-1),
        "base_lin_vel_b": d.xmat[1].reshape(3, 3).T @ qd[:3],
        "base_ang_vel_b": qd[3:6],
        "joint_pos_rel": q[7:] - robot.default_joint_pos,
        "joint_vel_rel": qd[6:],
        "last_action": act,
    }
    want = np.concatenate([expect[t.quantity] for t in get_profile(name).terms])
    np.testing.assert_allclose(obs[0].numpy(), want, atol=1e-10)


def test_align_reference_matches_the_controller_formula():
    """motion_tracking_controller src/MotionCommand.cpp:37-42: worldToInit = worldToAnchor * initToAnchor^-1
    with both rotations reduced to yaw; the start frame's anchor lands on the robot's in position and yaw."""
    rng = np.random.default_rng(2)
    mats = []
    for _ in range(2):
        r = np.zeros(9)
        qq = rng.normal(size=4)
        mujoco.mju_quat2Mat(r, qq / np.linalg.norm(qq))
        mats.append(torch.as_tensor(r.reshape(1, 3, 3)))
    p_robot, p_ref = torch.as_tensor(rng.normal(size=(1, 3))), torch.as_tensor(rng.normal(size=(1, 3)))
    r, p = align_reference(p_robot, mats[0], p_ref, mats[1])
    torch.testing.assert_close((r @ p_ref[..., None])[..., 0] + p, p_robot)
    torch.testing.assert_close(heading_rot(r @ mats[1]), heading_rot(mats[0]))


@pytest.mark.parametrize("bundle", [False, True])
def test_train_with_beyondmimic_records_profile(tmp_path, bundle):
    """``bcgd train dance --obs beyondmimic`` (plain SHAC and --bundle): run.pt has the 160-dim actor and
    the profile in its config and observation spec."""
    _register()
    args = ["train", "dance", "--obs", "beyondmimic", "--envs", "2", "--horizon", "2", "--iterations", "1",
            "--out", str(tmp_path), "--bundle" if bundle else "--no-bundle",
            *[x for o in ("shac.actor_hidden=8", "shac.critic_hidden=8", "add.hidden=8", "shac.critic_iterations=1",
                          "runner.tensorboard=false", "bcg.num_branches=2", "bcg.tau=0")
              for x in ("--set", o)]]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    ck = ckpt_io.load_checkpoint(tmp_path / "run.pt")
    assert ck["config"]["env"]["obs_profile"] == "beyondmimic"
    assert [t["name"] for t in ck["observation"]] == list(get_profile("beyondmimic").term_names)
    assert ck["obs_normalizer"]["mean"].shape[-1] == 160


def test_unknown_profile_is_one_line_error(tmp_path):
    _register()
    r = CliRunner().invoke(app, ["train", "dance", "--obs", "nope", "--iterations", "1", "--out", str(tmp_path)])
    assert isinstance(r.exception, BcgdError) and "env.obs_profile must be one of" in str(r.exception)


def test_holosoma_training_robot_is_pinned_and_recorded():
    """Training with the holosoma profile runs on its fixed default pose and action scale (training_robot), a
    different scale is refused, and run.pt records both so the export reads them back."""
    from bcg_deploy.training.config import training_robot

    robot = training_robot(tiny_cfg("env.obs_profile=holosoma").validate())
    np.testing.assert_array_equal(robot.default_joint_pos, get_profile("holosoma").default_joint_pos)
    assert np.all(robot.action_scale == 1.0)
    assert not np.array_equal(load_robot("g1").default_joint_pos, robot.default_joint_pos)
    with pytest.raises(BcgdError, match="profile holosoma fixes it"):
        tiny_cfg("env.obs_profile=holosoma", "env.action_scale=0.5").validate()
    tiny_cfg("env.obs_profile=holosoma", "env.action_scale=1.0").validate()
    factor = training_robot(tiny_cfg("env.obs_profile=holosoma", "env.action_scale_factor=3.0").validate())
    assert np.all(factor.action_scale == 1.0)  # the profile's scale, whatever the (default) factor
    ck = {"robot": {**robot.identity(), "action_scale": list(robot.action_scale),
                    "default_joint_pos": list(robot.default_joint_pos)}}  # fmt: skip
    back = ckpt_io.robot_of_checkpoint(ck, load_robot("g1"))
    np.testing.assert_array_equal(back.default_joint_pos, robot.default_joint_pos)
    ckpt_io.check_robot_identity(ck, back)
    with pytest.raises(BcgdError, match="another default pose"):
        ckpt_io.check_robot_identity(ck, load_robot("g1").with_action_scale(1.0))


def test_tiny_cfg_paper_default():
    assert tiny_cfg().env.obs_profile == "paper"
