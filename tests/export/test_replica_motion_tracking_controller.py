"""Replica of BeyondMimic's C++ deploy, HybridRobotics/motion_tracking_controller (commit 6beda6d), loading
and driving our ``--profile beyondmimic`` / ``beyondmimic_wose`` exports; the default export must fail it.

What the replica requires, and where the controller requires it:

- input ``obs`` bound by name, rank 2 (``OnnxPolicy::forward(observations)`` in
  ``src/MotionOnnxPolicy.cpp:21``; the base class ``legged_rl_controllers`` is public only as headers:
  ``name2Index_.at(...)`` lookups as in ``src/MotionOnnxPolicy.cpp:20,23-29``); the reference exporter
  the controller is written for: HybridRobotics/whole_body_tracking (commit cd65172)
  ``source/whole_body_tracking/whole_body_tracking/utils/exporter.py:58-77`` (inputs ``obs`` [1, N] and
  ``time_step`` [1, 1], opset 11, ``dynamic_axes={}``: static shapes);
- input ``time_step`` [1, 1] float: ``src/MotionOnnxPolicy.cpp:18-20``;
- outputs ``joint_pos``, ``joint_vel`` (row 0), ``body_pos_w`` and ``body_quat_w`` (one row per body,
  quaternion w first): ``src/MotionOnnxPolicy.cpp:23-39``;
- metadata ``anchor_body_name`` (string) and ``body_names`` (CSV): ``src/MotionOnnxPolicy.cpp:43-49``;
  the anchor and every body must be frames of the robot model (``src/MotionCommand.cpp:15-24``) and the
  anchor one of ``body_names`` (``src/MotionCommand.cpp:25-34``);
- the base class's keys, comma-separated (``whole_body_tracking utils/exporter.py:102-122``): joint_names,
  joint_stiffness, joint_damping, default_joint_pos, action_scale, observation_names,
  observation_history_lengths, command_names; numbers parsed with ``std::stod`` / ``std::stoul``;
- every ``observation_names`` entry a term the controller can build: its own ``motion_anchor_pos_b`` /
  ``motion_ref_pos_b``, ``motion_anchor_ori_b`` / ``motion_ref_ori_b``, ``robot_body_pos``,
  ``robot_body_ori`` (``src/MotionTrackingController.cpp:65-81``) and the base controller's terms the
  whole_body_tracking policy group uses (``tasks/tracking/tracking_env_cfg.py:118-129``: command,
  base_lin_vel, base_ang_vel, joint_pos, joint_vel, actions); the obs width their sum;
- the terms' maths: anchor position ``anchorPoseReal.actInv(worldToInit.act(p))`` and orientation 6D
  ``rot(0,0), rot(0,1), rot(1,0), rot(1,1), rot(2,0), rot(2,1)`` (``src/MotionCommand.cpp:49-64``), the
  motion aligned at reset by yaw and position (``src/MotionCommand.cpp:36-42``, ``yawQuaternion`` in
  ``include/motion_tracking_controller/MotionCommand.h:43-49``), the command = reference joint positions
  then velocities (``src/MotionCommand.cpp:9-11``);
- the step sequence: ``reset`` runs ``forward(0)`` at the start step, then each update builds the
  observation and calls ``forward`` with the incremented time step (``src/MotionOnnxPolicy.cpp:11-21``);
- the joint target ``default_joint_pos + action_scale * actions`` (the base controller; INTEROP.md's
  reading of it), which must equal our training target.
"""

from __future__ import annotations

import mujoco
import numpy as np
import onnxruntime as ort
import pytest
import torch

from bcg_deploy.observations.profile import ProfileObservation
from bcg_deploy.profiles import get_profile
from bcg_deploy.training.checkpoint import load_checkpoint
from bcg_deploy.training.networks import Actor
from bcg_deploy.training.normalizer import RunningNormalizer

CONTROLLER_TERMS = {"motion_anchor_pos_b", "motion_ref_pos_b", "motion_anchor_ori_b", "motion_ref_ori_b",
                    "robot_body_pos", "robot_body_ori"}  # fmt: skip
BASE_TERMS = {"command", "base_lin_vel", "base_ang_vel", "joint_pos", "joint_vel", "actions"}
META_KEYS = ("joint_names", "joint_stiffness", "joint_damping", "default_joint_pos", "action_scale",
             "observation_names", "observation_history_lengths", "command_names", "anchor_body_name",
             "body_names")  # fmt: skip


class ControllerError(RuntimeError):
    """What the C++ controller would throw (std::out_of_range, std::runtime_error, std::invalid_argument)."""


def _stod(s: str) -> float:
    try:
        return float(s)
    except ValueError:
        raise ControllerError(f"std::stod({s!r})") from None


def _mat(quat_wxyz) -> np.ndarray:
    r = np.zeros(9)
    mujoco.mju_quat2Mat(r, np.asarray(quat_wxyz, np.float64))
    return r.reshape(3, 3)


def _yaw(r: np.ndarray) -> np.ndarray:
    """yawQuaternion as a matrix: atan2(2(wz + xy), 1 - 2(y^2 + z^2)) = atan2(r10, r00)."""
    y = np.arctan2(r[1, 0], r[0, 0])
    c, s = np.cos(y), np.sin(y)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


class MotionTrackingControllerReplica:
    """Loads a policy the controller's way and drives one robot state through reset + one update."""

    def __init__(self, path, model: mujoco.MjModel) -> None:
        self.sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        ins = {i.name: i for i in self.sess.get_inputs()}
        self.name2index = {n: k for k, n in enumerate(ins)} | {o.name: k for k, o in enumerate(self.sess.get_outputs())}
        for name in ("obs", "time_step", "joint_pos", "joint_vel", "body_pos_w", "body_quat_w"):
            if name not in self.name2index:
                raise ControllerError(f"name2Index_.at({name!r}): std::out_of_range")
        for name in ("obs", "time_step"):
            if len(ins[name].shape) != 2:
                raise ControllerError(f"input {name} shape {ins[name].shape}: not a rank-2 tensor")
        meta = self.sess.get_modelmeta().custom_metadata_map
        for key in META_KEYS:
            if key not in meta:
                raise ControllerError(f"metadata {key!r} missing")
        csv = lambda k: meta[k].split(",")  # noqa: E731
        self.joint_names = csv("joint_names")
        self.kp = np.array([_stod(x) for x in csv("joint_stiffness")])
        self.kd = np.array([_stod(x) for x in csv("joint_damping")])
        self.default = np.array([_stod(x) for x in csv("default_joint_pos")])
        self.scale = np.array([_stod(x) for x in csv("action_scale")])
        self.obs_names = csv("observation_names")
        self.history = [int(x) for x in csv("observation_history_lengths")]
        self.anchor, self.body_names = meta["anchor_body_name"], csv("body_names")
        self.m, self.d = model, mujoco.MjData(model)
        frames = {model.body(i).name for i in range(model.nbody)}
        for b in [self.anchor, *self.body_names]:
            if b not in frames:
                raise ControllerError(f"Frame {b} not found.")
        if self.anchor not in self.body_names:
            raise ControllerError(f"Anchor body {self.anchor} not found in body names.")
        nj, nb = len(self.joint_names), len(self.body_names)
        sizes = {"command": 2 * nj, "motion_anchor_pos_b": 3, "motion_ref_pos_b": 3, "motion_anchor_ori_b": 6,
                 "motion_ref_ori_b": 6, "robot_body_pos": 3 * nb, "robot_body_ori": 6 * nb, "base_lin_vel": 3,
                 "base_ang_vel": 3, "joint_pos": nj, "joint_vel": nj, "actions": nj}  # fmt: skip
        for n in self.obs_names:
            if n not in CONTROLLER_TERMS | BASE_TERMS:
                raise ControllerError(f"observation term {n!r}: the controller cannot build it")
        width = sum(sizes[n] * h for n, h in zip(self.obs_names, self.history, strict=True))
        if not isinstance(ins["obs"].shape[1], int) or width != ins["obs"].shape[1]:
            raise ControllerError(f"observation size {width} != obs input {ins['obs'].shape[1]}")
        self.sizes = sizes

    def _forward(self, obs: np.ndarray, time_step: int) -> np.ndarray:
        feeds = {"obs": obs[None].astype(np.float32), "time_step": np.array([[time_step]], np.float32)}
        names = ["actions", "joint_pos", "joint_vel", "body_pos_w", "body_quat_w"]
        a, jp, jv, bp, bq = self.sess.run(names, feeds)
        self.jp, self.jv = jp.reshape(-1, jp.shape[-1])[0], jv.reshape(-1, jv.shape[-1])[0]
        self.bp, self.bq = bp.reshape(-1, 3), bq.reshape(-1, 4)  # rows = bodies, quaternion w first
        return a.reshape(-1)

    def _pose(self, body: str) -> tuple[np.ndarray, np.ndarray]:
        i = mujoco.mj_name2id(self.m, mujoco.mjtObj.mjOBJ_BODY, body)
        return self.d.xpos[i].copy(), self.d.xmat[i].reshape(3, 3).copy()

    def run(self, qpos: np.ndarray, qvel: np.ndarray, start_step: int = 0) -> np.ndarray:
        """reset() at ``start_step`` with the robot in state (qpos, qvel), then one update: the joint target."""
        self.d.qpos[:], self.d.qvel[:] = qpos, qvel
        mujoco.mj_kinematics(self.m, self.d)
        self._forward(np.zeros(self.sess.get_inputs()[0].shape[1]), start_step)  # reset: forward(0)
        ai = self.body_names.index(self.anchor)
        p_a, r_a = self._pose(self.anchor)
        r_init = _yaw(r_a) @ _yaw(_mat(self.bq[ai])).T  # worldToInit = worldToAnchor * initToAnchor^-1 (yaw)
        p_init = p_a - r_init @ self.bp[ai]
        r_base = _mat(qpos[3:7])
        terms = {
            "command": np.concatenate((self.jp, self.jv)),
            "motion_anchor_pos_b": r_a.T @ (r_init @ self.bp[ai] + p_init - p_a),
            "motion_anchor_ori_b": (r_a.T @ r_init @ _mat(self.bq[ai]))[:, :2].reshape(-1),
            "base_lin_vel": r_base.T @ qvel[:3],
            "base_ang_vel": qvel[3:6],
            "joint_pos": qpos[7:] - self.default,
            "joint_vel": qvel[6:],
            "actions": np.zeros(len(self.joint_names)),
        }
        terms["motion_ref_pos_b"], terms["motion_ref_ori_b"] = (
            terms["motion_anchor_pos_b"],
            terms["motion_anchor_ori_b"],
        )
        obs = np.concatenate([terms[n] for n in self.obs_names])
        actions = self._forward(obs, start_step + 1)
        return self.default + self.scale * actions


def _training_target(ckpt_path, robot, q, qd, t):
    ck = load_checkpoint(ckpt_path)
    profile = ck["config"]["env"]["obs_profile"]
    om = ProfileObservation(robot, ck["motion_arrays"], get_profile(profile), dtype=torch.float64)
    actor = Actor.from_state_dict(ck["actor"]).double()
    norm = RunningNormalizer.from_state_dict(ck["obs_normalizer"]).double()
    with torch.no_grad():
        obs = om(torch.as_tensor(q)[None], torch.as_tensor(qd)[None], torch.tensor([t]), torch.zeros(1, 29))
        a = actor.deterministic(norm(obs))[0].numpy()
    return robot.default_joint_pos + robot.action_scale * a  # env.step: default + scale * action, no clip


@pytest.mark.parametrize("profile", ["beyondmimic", "beyondmimic_wose"])
def test_controller_loads_and_drives_our_export(deploy_exports, ckpt_dir, robot, profile):
    res = deploy_exports[profile]
    rep = MotionTrackingControllerReplica(res.path, robot.load_model())
    assert rep.joint_names == list(robot.joint_names) and rep.anchor == "torso_link"
    assert rep.obs_names == list(get_profile(profile).term_names)
    np.testing.assert_array_equal(rep.kp, robot.kp)  # full precision survives std::stod
    ck = load_checkpoint(ckpt_dir / f"run_{profile}.pt")
    a = {k: np.asarray(v, np.float64) for k, v in ck["motion_arrays"].items() if k != "fps"}
    t = 40
    rot = _mat(a["root_quat"][t])
    q = np.concatenate((a["root_pos"][t], a["root_quat"][t], a["joint_pos"][t]))
    qd = np.concatenate((a["root_lin_vel"][t], rot.T @ a["root_ang_vel"][t], a["joint_vel"][t]))
    q[:2] += 0.3  # the robot elsewhere than the clip: the controller's alignment absorbs it
    target = rep.run(q, qd, start_step=t)
    q[:2] -= 0.3
    np.testing.assert_allclose(target, _training_target(ckpt_dir / f"run_{profile}.pt", robot, q, qd, t), atol=1e-5)


@pytest.fixture(scope="module")
def paper_obs_export(tmp_path_factory, ckpt_dir):
    from bcg_deploy.export import ExportConfig, export_policy

    out = tmp_path_factory.mktemp("paper_obs") / "policy.onnx"
    return export_policy(ExportConfig(checkpoint=ckpt_dir / "run.pt", output=out, inputs="obs", parity_samples=64,
                                      rollout_steps=0))  # fmt: skip


def test_negative_control_default_export_fails(raw_export, paper_obs_export, robot):
    """The default export has no ``obs`` input; the paper profile's ``--inputs obs`` names terms the
    controller cannot build (the failures the issue reported)."""
    with pytest.raises(ControllerError, match=r"name2Index_.at\('obs'\)"):
        MotionTrackingControllerReplica(raw_export.path, robot.load_model())
    with pytest.raises(ControllerError, match="root_height"):  # the paper observation: terms it cannot build
        MotionTrackingControllerReplica(paper_obs_export.path, robot.load_model())
