"""``env.action_scale``: a run trained with one uniform action scale exports that scale, not the robot's."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from bcg_deploy.errors import BcgdError
from bcg_deploy.export import ExportConfig, export_policy
from bcg_deploy.export.parity import clip_states, raw_inputs
from bcg_deploy.training.checkpoint import (
    MOTION_ARRAYS,
    check_robot_identity,
    load_checkpoint,
    robot_of_checkpoint,
    save_checkpoint,
)
from bcg_deploy.training.config import TrainConfig, training_robot
from tests.export.conftest import make_payload


def test_training_robot_applies_the_uniform_scale(robot):
    cfg = TrainConfig()
    cfg.env.action_scale_factor = 1.0
    np.testing.assert_array_equal(training_robot(cfg).action_scale, robot.action_scale)  # the packaged scale
    cfg.env.action_scale = 0.4
    r = training_robot(cfg)
    np.testing.assert_array_equal(r.action_scale, np.full(29, 0.4))
    np.testing.assert_array_equal(r.kp, robot.kp)
    assert r.identity() == robot.identity()
    for bad in (0.0, -0.4, float("nan"), float("inf")):
        cfg.env.action_scale = bad
        with pytest.raises(BcgdError, match="env.action_scale must be a positive number"):
            cfg.validate()


def test_training_robot_applies_the_scale_factor(robot):
    cfg = TrainConfig()
    cfg.env.action_scale_factor = 2.0
    r = training_robot(cfg.validate())
    np.testing.assert_allclose(r.action_scale, 2.0 * robot.action_scale, rtol=0, atol=0)
    np.testing.assert_allclose(r.action_scale, 0.5 * robot.effort_limit / robot.kp, rtol=1e-12)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        cfg.env.action_scale_factor = bad
        with pytest.raises(BcgdError, match="env.action_scale_factor must be a positive number"):
            cfg.validate()
    cfg.env.action_scale_factor, cfg.env.action_scale = 2.0, 0.4  # a uniform scale replaces the factor's
    np.testing.assert_array_equal(training_robot(cfg.validate()).action_scale, np.full(29, 0.4))


def test_checkpoint_records_and_checks_the_scale(tmp_path, robot, motion):
    r04 = robot.with_action_scale(0.4)
    save_checkpoint(tmp_path / "run.pt", make_payload(r04, motion))
    ck = load_checkpoint(tmp_path / "run.pt")
    assert ck["robot"]["action_scale"] == [0.4] * 29
    np.testing.assert_array_equal(robot_of_checkpoint(ck, robot).action_scale, r04.action_scale)
    with pytest.raises(BcgdError, match=r"trained with action scale 0.4 on every joint rad, not this run's") as e:
        check_robot_identity(ck, robot, tmp_path / "run.pt")  # e.g. --resume without the run's env.action_scale
    assert "\n" not in str(e.value)
    old = {**ck, "robot": {k: v for k, v in ck["robot"].items() if k not in ("action_scale", "default_joint_pos")}}
    assert robot_of_checkpoint(old, robot) is robot  # files written before the keys: the packaged scale and pose
    check_robot_identity(old, robot)
    bad = {**ck, "robot": {**ck["robot"], "action_scale": [0.4] * 28}}
    with pytest.raises(BcgdError, match="expected 29 positive finite values"):
        robot_of_checkpoint(bad, robot)


def test_export_writes_and_applies_the_trained_scale(tmp_path, robot, motion):
    r04 = robot.with_action_scale(0.4)
    save_checkpoint(tmp_path / "run.pt", make_payload(r04, motion))
    out = tmp_path / "policy.onnx"
    export_policy(ExportConfig(checkpoint=tmp_path / "run.pt", output=out, parity_samples=300, rollout_steps=20))
    meta = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    assert [float(x) for x in meta["action_scale"].split(",")] == [0.4] * 29
    base = clip_states({k: getattr(motion, k) for k in MOTION_ARRAYS})
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    feeds = {i.name: x.numpy() for i, x in zip(sess.get_inputs(), raw_inputs(base.q, base.qd, base.t), strict=True)}
    res = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))
    target = np.clip(robot.default_joint_pos + 0.4 * res["actions"], *robot.joint_range.T)
    np.testing.assert_allclose(res["joint_pos_target"], target, atol=1e-6, rtol=0)
    assert not np.allclose(robot.action_scale, 0.4)  # the packaged scale would have given other targets
