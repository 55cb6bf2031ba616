"""bcgd export: parity (onnxruntime vs torch), folded normaliser, metadata as consumers read it."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from bcg_deploy.errors import BcgdError
from bcg_deploy.export import ExportConfig, export_policy, inspect_policy
from bcg_deploy.export.parity import clip_states, raw_inputs
from bcg_deploy.observations.paper import ObservationModule
from bcg_deploy.training.checkpoint import MOTION_ARRAYS, load_checkpoint
from bcg_deploy.training.config import TrainConfig
from bcg_deploy.training.networks import Actor
from bcg_deploy.training.normalizer import RunningNormalizer
from tests.export.conftest import one_torch_thread


def _session(path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _meta(path) -> dict[str, str]:
    return {p.key: p.value for p in onnx.load(str(path)).metadata_props}


@pytest.fixture(scope="module")
def obs_export(tmp_path_factory, ckpt_dir):
    out = tmp_path_factory.mktemp("obs") / "policy_obs.onnx"
    with one_torch_thread():
        return export_policy(ExportConfig(checkpoint=ckpt_dir / "run.pt", output=out, inputs="obs"))


@pytest.fixture(scope="module")
def states(motion):
    """Clip states plus noise (independent of the exporter's own parity inputs)."""
    rng = np.random.default_rng(42)
    base = clip_states({k: getattr(motion, k) for k in MOTION_ARRAYS})
    q, qd = base.q.copy(), base.qd.copy()
    q[:, 7:] += rng.normal(0, 0.05, q[:, 7:].shape)
    qd += rng.normal(0, 0.2, qd.shape)
    t = base.t + rng.integers(-1, 3, len(base.t))
    return q, qd, t


def test_raw_export_verified_and_self_contained(raw_export):
    path = raw_export.path
    p = raw_export.parity
    assert p["max_abs_err"] <= 1e-5 and p["num_inputs"] >= 1000
    # the exported (restructured) graph vs the straightforward training-module path, float32 both
    assert p["max_abs_err_vs_reference_module"] <= 2e-5 and p["max_abs_err_vs_torch_float64"] <= 1e-5
    assert p["sources"]["clip_frames"] > 0 and p["sources"]["mujoco_rollout"] > 0 and p["sources"]["noisy"] > 0
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [17]
    assert not any(
        init.data_location == onnx.TensorProto.EXTERNAL for init in model.graph.initializer
    )  # weights inside
    assert sorted(x.name for x in path.parent.iterdir()) == ["policy.onnx"]  # no side files
    meta = _meta(path)
    stored = json.loads(meta["bcgd.parity"])
    assert stored["max_abs_err"] == p["max_abs_err"] and stored["num_inputs"] == p["num_inputs"]
    assert json.loads(meta["bcgd.opset"]) == 17
    sess = _session(path)
    assert [i.name for i in sess.get_inputs()] == [
        "base_pos", "base_quat", "base_lin_vel", "base_ang_vel", "joint_pos", "joint_vel", "time_step",
    ]  # fmt: skip
    assert [o.name for o in sess.get_outputs()] == [
        "actions", "joint_pos_target", "ref_joint_pos", "ref_joint_vel",
        "body_pos_w", "body_quat_w", "body_lin_vel_w", "body_ang_vel_w",
    ]  # fmt: skip
    assert all(isinstance(i.shape[0], str) for i in sess.get_inputs())  # dynamic batch


def test_matches_training_path(raw_export, ckpt_dir, robot, states):
    """ONNX == the training code's own float64 pipeline: obs module -> running normaliser -> actor."""
    q, qd, t = states
    ckpt = load_checkpoint(ckpt_dir / "run.pt", robot=robot)
    om = ObservationModule(robot, ckpt["motion_arrays"], dtype=torch.float64)
    norm = RunningNormalizer.from_state_dict(ckpt["obs_normalizer"])
    actor = Actor.from_state_dict(ckpt["actor"]).double()
    with torch.no_grad():
        want = actor.deterministic(norm(om(torch.as_tensor(q), torch.as_tensor(qd), torch.as_tensor(t)))).numpy()
    names = [i.name for i in _session(raw_export.path).get_inputs()]
    feeds = {n: x.numpy() for n, x in zip(names, raw_inputs(q, qd, t), strict=True)}
    sess = _session(raw_export.path)
    out = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))
    # float32 inputs vs float64 states + float32 MLP: a few 1e-6
    np.testing.assert_allclose(out["actions"], want, atol=2e-5, rtol=0)
    target = np.clip(robot.default_joint_pos + robot.action_scale * out["actions"], *robot.joint_range.T)
    np.testing.assert_allclose(out["joint_pos_target"], target, atol=1e-6, rtol=0)
    # reference frame at the clamped current step, exact (float32 of the clip)
    idx = np.clip(t.astype(int), 0, len(ckpt["motion_arrays"]["root_pos"]) - 1)
    for name, key in (("ref_joint_pos", "joint_pos"), ("body_quat_w", "body_quat_w"), ("body_pos_w", "body_pos_w")):
        np.testing.assert_array_equal(out[name], ckpt["motion_arrays"][key].numpy()[idx].astype(np.float32))
    # batch 1 works and agrees
    one = _session(raw_export.path).run(["actions"], {k: v[:1] for k, v in feeds.items()})[0]
    np.testing.assert_allclose(one, out["actions"][:1], atol=1e-6)


def test_normaliser_is_folded(raw_export, ckpt_dir, tmp_path, states, robot):
    """Same actor, other normaliser statistics: different actions, each matching its own torch."""
    other = export_policy(ExportConfig(checkpoint=ckpt_dir / "run_other_norm.pt", output=tmp_path / "other.onnx"))
    assert other.parity["max_abs_err"] <= 1e-5
    a = load_checkpoint(ckpt_dir / "run.pt")
    b = load_checkpoint(ckpt_dir / "run_other_norm.pt")
    assert all(torch.equal(a["actor"][k], b["actor"][k]) for k in a["actor"])  # the very same actor
    q, qd, t = states
    names = [i.name for i in _session(raw_export.path).get_inputs()]
    feeds = {n: x.numpy() for n, x in zip(names, raw_inputs(q, qd, t), strict=True)}
    act_a = _session(raw_export.path).run(["actions"], feeds)[0]
    act_b = _session(other.path).run(["actions"], feeds)[0]
    assert np.abs(act_a - act_b).max() > 0.05
    for ck, act in ((a, act_a), (b, act_b)):
        om = ObservationModule(robot, ck["motion_arrays"], dtype=torch.float64)
        norm = RunningNormalizer.from_state_dict(ck["obs_normalizer"])
        actor = Actor.from_state_dict(ck["actor"]).double()
        with torch.no_grad():
            want = actor.deterministic(norm(om(torch.as_tensor(q), torch.as_tensor(qd), torch.as_tensor(t)))).numpy()
        np.testing.assert_allclose(act, want, atol=2e-5, rtol=0)


def test_paper_export_metadata(raw_export, robot, motion):
    """The paper profile's CSV keys (full precision) and bcgd.* JSON keys."""
    meta = _meta(raw_export.path)
    for key in ("joint_names", "joint_stiffness", "joint_damping", "default_joint_pos", "action_scale",
                "observation_names", "observation_history_lengths", "command_names", "anchor_body_name",
                "body_names", "run_path"):  # fmt: skip
        assert key in meta, key
    joints = meta["joint_names"].split(",")
    assert joints == list(robot.joint_names) and len(joints) == 29
    for key, want in (
        ("joint_stiffness", robot.kp),
        ("joint_damping", robot.kd),
        ("default_joint_pos", robot.default_joint_pos),
        ("action_scale", robot.action_scale),
    ):
        vals = [float(x) for x in meta[key].split(",")]
        assert len(vals) == 29
        assert vals == list(want)  # full precision: exactly the RobotSpec float64 values
    bodies = meta["body_names"].split(",")
    assert meta["anchor_body_name"] in bodies and bodies == list(robot.body_names)
    names = meta["observation_names"].split(",")
    assert len(names) == len(meta["observation_history_lengths"].split(",")) == 11
    assert meta["command_names"] == "motion"
    for key in [k for k in meta if k.startswith("bcgd.")]:
        json.loads(meta[key])
    assert json.loads(meta["bcgd.control_dt"]) == 0.02 and json.loads(meta["bcgd.physics_dt"]) == 0.005
    assert json.loads(meta["bcgd.quat_order"]) == "wxyz"
    obs = json.loads(meta["bcgd.observation"])
    assert sum(t["size"] for t in obs) == 849 and [t["name"] for t in obs] == names
    assert json.loads(meta["bcgd.input_noise"])["base_pos"] == [0.25, 0.25, 0.01]
    assert json.loads(meta["bcgd.motion"])["num_frames"] == motion.num_frames
    assert json.loads(meta["bcgd.robot"]) == robot.identity()
    training = json.loads(meta["bcgd.training"])
    assert training["kappa"] == 300.0 and training["iterations"] == 0 and "enabled" in training["bundling"]
    assert training["obs_noise_scale"] == TrainConfig().env.obs_noise_scale
    dr = json.loads(meta["bcgd.domain_randomization"])
    assert dr["friction"] == [0.3, 1.6] and dr["com_offset_m"] == [-0.03, 0.03]
    assert dr["torso_com_offset_m"] == [0.025, 0.05, 0.05] and dr["torso_body"] == "torso_link"
    assert dr["reset_rot"] == [0.1, 0.1, 0.2] and dr["reset_scale"] == 1.0
    assert json.loads(meta["bcgd.push"])["interval_s"] == [1.0, 3.0]
    assert json.loads(meta["bcgd.action"])["scale"] == list(robot.action_scale)


def test_paper_obs_signature_agrees_with_raw(obs_export, raw_export, robot, states, ckpt_dir):
    assert obs_export.parity["max_abs_err"] <= 1e-5 and obs_export.parity["num_inputs"] >= 1000
    sess = _session(obs_export.path)
    assert [i.name for i in sess.get_inputs()] == ["obs", "time_step"]
    assert [o.name for o in sess.get_outputs()] == [
        "actions", "joint_pos_target", "joint_pos", "joint_vel",
        "body_pos_w", "body_quat_w", "body_lin_vel_w", "body_ang_vel_w",
    ]  # fmt: skip
    # the two signatures agree when fed the same state (obs computed by the training module, float64)
    q, qd, t = states
    om = ObservationModule(robot, load_checkpoint(ckpt_dir / "run.pt")["motion_arrays"], dtype=torch.float64)
    with torch.no_grad():
        obs = om(torch.as_tensor(q), torch.as_tensor(qd), torch.as_tensor(t)).float().numpy()
    a_obs = sess.run(["actions"], {"obs": obs, "time_step": t.astype(np.float32)[:, None]})[0]
    raw = _session(raw_export.path)
    feeds = {i.name: x.numpy() for i, x in zip(raw.get_inputs(), raw_inputs(q, qd, t), strict=True)}
    np.testing.assert_allclose(a_obs, raw.run(["actions"], feeds)[0], atol=1e-5, rtol=0)


def test_parity_failure_writes_nothing(ckpt_dir, tmp_path):
    out = tmp_path / "never.onnx"
    with pytest.raises(BcgdError, match="parity check failed") as e:
        export_policy(ExportConfig(checkpoint=ckpt_dir / "run.pt", output=out, parity_tol=1e-12, rollout_steps=0))
    assert "\n" not in str(e.value)
    assert "float32 observation" in str(e.value) and "float64 observation" in str(e.value)  # both tried
    assert not out.exists() and not list(tmp_path.iterdir())


def test_float32_parity_miss_falls_back_to_float64(raw_export, ckpt_dir, tmp_path):
    """A tolerance below the float32 graph's parity error (same inputs: it must fail) gives the float64
    observation graph, and the inspect re-run rebuilds that precision from the graph."""
    assert raw_export.obs_dtype == "float32"
    assert not any(i.data_type == onnx.TensorProto.DOUBLE for i in onnx.load(str(raw_export.path)).graph.initializer)
    tol = 0.6 * raw_export.parity["max_abs_err"]
    out = tmp_path / "policy64.onnx"
    res = export_policy(ExportConfig(checkpoint=ckpt_dir / "run.pt", output=out, parity_tol=tol))
    assert res.obs_dtype == "float64" and res.parity["max_abs_err"] <= tol
    assert any(i.data_type == onnx.TensorProto.DOUBLE for i in onnx.load(str(out)).graph.initializer)
    rerun = inspect_policy(out, checkpoint=ckpt_dir / "run.pt", samples=200)["parity_rerun"]
    assert rerun["passed"] and rerun["tolerance"] == tol
