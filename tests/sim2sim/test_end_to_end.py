"""End to end on an untrained policy exported by the real exporter: it runs, falls, and reports."""

from __future__ import annotations

import json

import numpy as np
import onnx

from bcg_deploy.sim2sim import Sim2SimConfig, run_sim2sim
from bcg_deploy.sim2sim.policy import OnnxPolicy
from bcg_deploy.training.config import DomainRandCfg
from tests.sim2sim.test_bad_inputs import run_cli


def test_untrained_policy_runs_and_falls(untrained_onnx, tmp_path, capsys):
    out = tmp_path / "report.json"
    code, err = run_cli(["sim2sim", untrained_onnx, "--runs", "2", "--json", out, "--plot", tmp_path / "e.png"], capsys)
    assert code in (0, None), err
    d = json.loads(out.read_text())
    assert d["aggregate"]["falls"] == 2
    for r in d["runs"]:
        assert r["fell"] and 0 < r["fall_time_s"] < 1.5 and r["e_track_cm"] > 0
    assert d["settings"]["policy"]["sha256"] and d["settings"]["control_dt"] == 0.02
    assert d["settings"]["substeps"] == 10 and d["settings"]["physics_dt"] == 0.002
    assert (tmp_path / "e.png").exists()


def test_reference_outputs_are_the_training_clip(untrained_onnx):
    from bcg_deploy.robots import load_robot
    from bcg_deploy.training.checkpoint import load_checkpoint, motion_from_checkpoint

    policy = OnnxPolicy(untrained_onnx, load_robot())
    ref = policy.reference()
    motion = motion_from_checkpoint(load_checkpoint(untrained_onnx.parent / "run.pt"))
    assert ref.num_frames == motion.num_frames
    np.testing.assert_allclose(ref.body_pos_w, motion.body_pos_w, atol=1e-5)
    np.testing.assert_allclose(ref.body_quat_w, motion.body_quat_w, atol=1e-5)
    np.testing.assert_allclose(ref.joint_pos, motion.joint_pos, atol=1e-5)


def test_determinism_with_noise(untrained_onnx):
    """Same seed: identical JSON. Other seed, or another run of the same report: different."""
    base = dict(runs=2, noise_scale=1.0, max_duration_s=0.5, stop_on_fall=False)
    a = run_sim2sim(untrained_onnx, Sim2SimConfig(seed=0, **base)).to_json()
    b = run_sim2sim(untrained_onnx, Sim2SimConfig(seed=0, **base)).to_json()
    c = run_sim2sim(untrained_onnx, Sim2SimConfig(seed=1, **base)).to_json()
    assert a == b
    assert a != c
    runs = json.loads(a)["runs"]
    assert runs[0]["e_track_cm"] != runs[1]["e_track_cm"]
    quiet = {**base, "noise_scale": 0.0, "init_noise": False}
    quiet = json.loads(run_sim2sim(untrained_onnx, Sim2SimConfig(seed=0, **quiet)).to_json())
    assert quiet["runs"][0]["e_track_cm"] == quiet["runs"][1]["e_track_cm"]  # nothing random: seeds do not matter
    assert any("the runs are identical" in n for n in quiet["settings"]["notes"])


def test_clean_runs_differ_by_their_seeded_initial_state(untrained_onnx):
    """Without any injection, the seeded initial-state perturbation (training's reset noise) makes each
    run a different run; equal seeds still give byte-identical reports; --no-init-noise replays frame 0."""
    base = dict(runs=3, max_duration_s=0.4, stop_on_fall=False, jobs=1)
    a = run_sim2sim(untrained_onnx, Sim2SimConfig(seed=0, **base))
    assert a.to_json() == run_sim2sim(untrained_onnx, Sim2SimConfig(seed=0, **base)).to_json()
    e = [r.e_track_cm for r in a.runs]
    assert len(set(e)) == 3, e
    s = json.loads(a.to_json())["settings"]
    assert s["init_noise"] == {"pos": [0.05, 0.05, 0.01], "rot": [0.1, 0.1, 0.2], "joint": 0.1}
    assert any("reset_pos/reset_rot/reset_joint" in n for n in s["notes"])  # read from the ONNX metadata
    off = run_sim2sim(untrained_onnx, Sim2SimConfig(seed=0, init_noise=False, **base))
    assert off.settings["init_noise"] is None and len({r.e_track_cm for r in off.runs}) == 1


def test_each_run_reports_its_initial_perturbation(untrained_onnx):
    """The report names each run's start (the draw of its own seeded stream), so a run that falls can be
    told apart by how it started; a run without the perturbation reports none."""
    from bcg_deploy.sim2sim.injection import InitNoise
    from bcg_deploy.sim2sim.runner import run_streams

    base = dict(runs=2, max_duration_s=0.1, stop_on_fall=False, jobs=1)
    runs = json.loads(run_sim2sim(untrained_onnx, Sim2SimConfig(seed=5, **base)).to_json())["runs"]
    for r in runs:
        want = InitNoise().draw(run_streams(5, r["index"])["init"], 29)
        got = r["initial_perturbation"]
        np.testing.assert_array_equal(got["root_offset_m"], want.pos)
        np.testing.assert_array_equal(got["root_roll_pitch_yaw_rad"], want.rpy)
        assert got["joint_offset_max_abs_rad"] == np.max(np.abs(want.joints)) <= 0.1
    assert runs[0]["initial_perturbation"] != runs[1]["initial_perturbation"]
    off = run_sim2sim(untrained_onnx, Sim2SimConfig(seed=5, init_noise=False, **base))
    assert all(r.initial_perturbation is None for r in off.runs)


def test_initial_perturbation_is_training_reset_noise():
    """The same maths as training's reset: position offset, world-frame RPY rotation (Rz Ry Rx) applied
    before the reference orientation, world angular velocity kept, joints clipped to their range."""
    from bcg_deploy.robots import load_robot
    from bcg_deploy.rotations import quat_numpy as quat
    from bcg_deploy.sim2sim.injection import InitNoise

    spec = load_robot()
    rng = np.random.default_rng(3)
    q0 = np.concatenate([[0.1, 0.2, 0.8], quat.normalize(np.array([0.9, 0.1, -0.2, 0.3])), spec.joint_range[:, 1]])
    v0 = np.concatenate([[0.5, 0.0, 0.1], [0.3, -0.2, 1.0], np.zeros(spec.num_joints)])
    n = InitNoise()
    q, v = n.perturb(q0, v0, spec.joint_range, np.random.default_rng(3))
    d = rng.uniform(-1, 1, 3) * np.asarray(n.pos)
    rpy = rng.uniform(-1, 1, 3) * np.asarray(n.rot)
    np.testing.assert_allclose(q[:3], q0[:3] + d)
    dq = quat.from_euler_zyx(*rpy)
    np.testing.assert_allclose(q[3:7], quat.mul(dq, q0[3:7]), atol=1e-12)
    np.testing.assert_allclose(quat.rotate(q[3:7], v[3:6]), quat.rotate(q0[3:7], v0[3:6]), atol=1e-12)
    assert np.all(q[7:] <= spec.joint_range[:, 1]) and np.any(q[7:] < q0[7:])  # upper limit: only downward moves
    np.testing.assert_array_equal(v[:3], v0[:3])


def test_parallel_runs_equal_serial_byte_for_byte(untrained_onnx):
    base = dict(runs=3, max_duration_s=0.3, noise_scale=1.0, latency_ms=(0.0, 10.0), stop_on_fall=False)
    serial = run_sim2sim(untrained_onnx, Sim2SimConfig(jobs=1, **base)).to_json()
    seen = []
    par = run_sim2sim(untrained_onnx, Sim2SimConfig(jobs=2, **base), progress=lambda *a: seen.append(a))
    assert par.to_json() == serial
    assert seen and seen[-1][0] == seen[-1][1] == 3 * 15 and "3/3 runs done" in seen[-1][2]


def test_everything_on_runs(untrained_onnx):
    cfg = Sim2SimConfig(
        runs=1, latency_ms=(5.0, 25.0), obs_latency_ms=(2.0, 2.0), noise_scale=0.5, randomize=True, push=True
    )
    rep = run_sim2sim(untrained_onnx, cfg)
    s = rep.settings
    assert tuple(s["randomize"]["friction"]) == DomainRandCfg().friction  # the range the policy trained with
    assert any("metadata bcgd.domain_randomization" in n for n in s["notes"])
    assert any("metadata bcgd.push" in n for n in s["notes"])
    assert any("metadata bcgd.input_noise" in n for n in s["notes"])
    assert rep.runs[0].randomization is not None


def test_replay_of_the_policy_clip_with_pinned_base(untrained_onnx):
    """The baseline: PD on the reference joints with the pelvis pinned tracks far better than the
    untrained policy (which falls), with zero root error."""
    r = run_sim2sim(untrained_onnx, Sim2SimConfig(runs=1, replay=True, pin_base=True)).runs[0]
    p = run_sim2sim(untrained_onnx, Sim2SimConfig(runs=1, stop_on_fall=False, init_noise=False)).runs[0]
    assert not r.fell and p.fell and r.steps == p.steps
    assert r.root_pos_err_cm < 1e-6
    assert r.e_track_cm < 0.25 * p.e_track_cm and r.joint_rmse_rad < 0.5 * p.joint_rmse_rad


def test_model_hash_mismatch_needs_force(untrained_onnx, tmp_path, capsys):
    """A policy exported for another robot model: its metadata names another model hash (and its content hash
    is sealed as the exporter seals it; an edit without that is refused as a changed file)."""
    from bcg_deploy.integrity import seal

    model = onnx.load(str(untrained_onnx))
    for p in model.metadata_props:
        if p.key == "bcgd.robot":
            p.value = json.dumps({"name": "g1", "model_hash": "f" * 64})
    path = tmp_path / "other_hash.onnx"
    path.write_bytes(seal(model))
    code, err = run_cli(["sim2sim", path, "--runs", "1"], capsys)
    assert code == 2 and "pass --force" in err
    rep = run_sim2sim(path, Sim2SimConfig(runs=1, force=True, max_duration_s=0.2))
    assert any("--force" in n for n in rep.settings["notes"])


def test_jobs_resolution():
    """jobs=0 parallelises only evaluations long enough to pay for starting worker processes."""
    from bcg_deploy.sim2sim.parallel import AUTO_PARALLEL_S, available_cores, resolve_jobs

    assert resolve_jobs(0, 5, 5 * 15.0) == 1  # 75 s: starting a worker costs more than it saves
    assert resolve_jobs(0, 10, 10 * 15.0) == min(available_cores(), 10)
    assert resolve_jobs(0, 1, AUTO_PARALLEL_S * 2) == 1  # never more processes than runs
    assert resolve_jobs(3, 2) == 2 and resolve_jobs(1, 8) == 1
