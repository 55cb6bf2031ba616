"""sim2sim through the consumer's contract: for an obs-signature (deployable-profile) policy, sim2sim
builds the observation from the MuJoCo state by the metadata's term names; on the reference states it
equals the training observation module's (the policy saw in training what the stack will feed it).
``--mjcf``: another model, joints and bodies by name; a missing joint is a one-line error."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bcg_deploy.robots import load_robot
from bcg_deploy.sim2sim.evaluate import run_sim2sim
from bcg_deploy.sim2sim.obs_contract import ObsContract
from bcg_deploy.sim2sim.reference import initial_state
from bcg_deploy.sim2sim.setup import Sim2SimConfig, prepare

from .test_bad_inputs import run_cli


@pytest.fixture
def exports(deploy_exports):
    return deploy_exports


@pytest.mark.parametrize("profile", ["beyondmimic", "beyondmimic_wose"])
def test_contract_observation_equals_training(exports, profile):
    from bcg_deploy.observations.profile import ProfileObservation

    setup = prepare(exports[profile], Sim2SimConfig(runs=1))
    meta, ref = setup.policy.meta, setup.reference
    contract = ObsContract(setup.policy.profile, setup.model, ref, meta.joint_names, meta.body_names,
                           meta.default_joint_pos)  # fmt: skip
    arrays = {"joint_pos": ref.joint_pos, "joint_vel": ref.joint_vel, "body_pos_w": ref.body_pos_w,
              "body_quat_w": ref.body_quat_w, "body_lin_vel_w": ref.body_lin_vel_w,
              "body_ang_vel_w": ref.body_ang_vel_w}  # fmt: skip
    train = ProfileObservation(load_robot(), arrays, profile, dtype=torch.float64)
    rng = np.random.default_rng(0)
    q0, _ = initial_state(ref, setup.model.nq, setup.model.nv)
    contract.reset(q0)
    for k in (0, 7, ref.num_frames - 1):
        q, qd = initial_state(Reference_at(ref, k), setup.model.nq, setup.model.nv)
        last = rng.uniform(-1, 1, 29)
        got = contract.observation(k, q, qd, last).astype(np.float64)
        with torch.no_grad():
            want = train(torch.as_tensor(q)[None], torch.as_tensor(qd)[None], torch.tensor([k]),
                         torch.as_tensor(last)[None]).numpy()  # fmt: skip
        np.testing.assert_allclose(got, want, atol=2e-6)  # float32 observation


def Reference_at(ref, k):  # noqa: N802
    """The reference starting at frame k (initial_state reads frame 0)."""
    from bcg_deploy.motions.motion import Motion

    return Motion.from_bodies(ref.fps, ref.joint_pos[k:], ref.joint_vel[k:], ref.body_pos_w[k:], ref.body_quat_w[k:],
                     ref.body_lin_vel_w[k:], ref.body_ang_vel_w[k:])  # fmt: skip


@pytest.mark.parametrize("profile", ["beyondmimic", "beyondmimic_wose", "unitree"])
def test_sim2sim_runs_each_profile(exports, profile):
    rep = run_sim2sim(exports[profile], Sim2SimConfig(runs=1, max_duration_s=0.3, noise_scale=1.0))
    assert rep.runs[0].steps == 15 and np.isfinite(rep.runs[0].e_track_cm)
    assert rep.settings["noise_levels"]["joint_pos"] == 0.01


def test_mjcf_other_model_and_missing_joint(exports, tmp_path, capsys):
    robot = load_robot()
    text = robot.mjcf_path.read_text()
    same = robot.mjcf_path  # our own robot file without the scene: the floor is added
    rep = run_sim2sim(exports["beyondmimic"], Sim2SimConfig(runs=1, max_duration_s=0.3, mjcf=str(same)))
    base = run_sim2sim(exports["beyondmimic"], Sim2SimConfig(runs=1, max_duration_s=0.3))
    assert rep.runs[0].steps == base.runs[0].steps == 15
    assert rep.settings["mjcf"]["path"] == str(same)
    bad = tmp_path / "g1_no_knee.xml"
    bad.write_text(text.replace('name="left_knee_joint"', 'name="left_knee"'))
    code, err = run_cli(["sim2sim", exports["beyondmimic"], "--runs", "1", "--mjcf", bad], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "no joint 'left_knee_joint'" in lines[0], err
