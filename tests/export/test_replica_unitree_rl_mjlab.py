"""Replica of Unitree's C++ deploy, unitreerobotics/unitree_rl_mjlab (commit 5b7e396), G1 ``State_Mimic``,
loading and driving our ``--profile unitree`` export; the default export must fail it.

(unitreerobotics/unitree_rl_lab's g1_29dof Mimic state, 4711dee, reads the same policy folder with a CSV
motion: ``test_replica_unitree_rl_lab.py``.)

What the replica requires, and where the deploy requires it (paths under ``deploy/``):

- the policy folder: ``params/deploy.yaml`` and ``exported/policy.onnx`` (``robots/g1/src/State_Mimic.cpp:117-121``);
- deploy.yaml: ``step_dt`` (``include/isaaclab/envs/manager_based_rl_env.h:29``); the observation terms in
  document order, one group named ``obs`` when the first term has ``params``
  (``include/isaaclab/manager/observation_manager.h:95-107``), each registered, else "Observation term 'x'
  is not registered." (``observation_manager.h:133-136``), ``history_length``, ``scale``, ``clip``
  (``observation_manager.h:129-143``); ``actions.JointPositionAction`` ``scale``, ``offset``, ``clip``
  (``include/isaaclab/envs/mdp/actions/joint_actions.h:20-36``) with the target
  ``raw * scale + offset`` then the clip if any (``joint_actions.h:39-60``); ``joint_ids_map``,
  ``stiffness``, ``damping``, ``default_joint_pos`` (the reference ``robots/g1/config/policy/mimic/
  dance1_subject2/params/deploy.yaml:1-16``);
- the registered terms: ``base_ang_vel``, ``projected_gravity``, ``joint_pos``, ``joint_pos_rel``,
  ``joint_vel_rel``, ``last_action``, ``velocity_commands``, ``gait_phase``
  (``include/isaaclab/envs/mdp/observations/observations.h:13-137``) and Mimic's ``motion_command``,
  ``motion_anchor_ori_b`` (``robots/g1/src/State_Mimic.cpp:46-77``), with their maths: command = motion
  joint positions then velocities; anchor orientation ``rot = ((init * ref)^-1 * real)^T``, 6D
  ``rot(0,0), rot(0,1), rot(1,0), rot(1,1), rot(2,0), rot(2,1)``, real and reference torso =
  pelvis quaternion times waist yaw (z), roll (x), pitch (y) (``State_Mimic.cpp:10-38,63-77``) and
  ``init_quat = yaw(robot torso) * yaw(reference pelvis)^T`` at the start (``State_Mimic.cpp:162-166``);
- ONNX runtime binding (``include/isaaclab/algorithms/algorithms.h:32-92``): every model input name must be
  a group of the observation map (``obs``); input sizes are products of the model's dims (a symbolic
  dim makes a negative size: "tried creating tensor with negative value in shape"); only output 0 is
  read, ``output_shape[1]`` values;
- the motion file: NPZ read with cnpy as float32 ``body_pos_w`` [frame, body, 3], ``body_quat_w``
  [frame, body, 4] w x y z (the root = body 0), ``joint_pos``, ``joint_vel`` [frame, dof], at a fixed
  dt of 1/50 s (``robots/g1/include/State_Mimic.h:38-93``), frame = floor(t / dt) clamped
  (``State_Mimic.h:95-101``).
"""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np
import onnxruntime as ort
import pytest
import torch
import yaml

from bcg_deploy.observations.profile import ProfileObservation
from bcg_deploy.profiles import get_profile
from bcg_deploy.training.checkpoint import load_checkpoint
from bcg_deploy.training.networks import Actor
from bcg_deploy.training.normalizer import RunningNormalizer

REGISTERED = {"base_ang_vel", "projected_gravity", "joint_pos", "joint_pos_rel", "joint_vel_rel", "last_action",
              "velocity_commands", "gait_phase", "motion_command", "motion_anchor_ori_b"}  # fmt: skip


class DeployError(RuntimeError):
    """What the C++ deploy would throw."""


def _qmat(qwxyz) -> np.ndarray:
    r = np.zeros(9)
    mujoco.mju_quat2Mat(r, np.asarray(qwxyz, np.float64) / np.linalg.norm(qwxyz))
    return r.reshape(3, 3)


def _axis(axis: int, angle: float) -> np.ndarray:
    q = np.zeros(4)
    mujoco.mju_axisAngle2Quat(q, np.eye(3)[axis], angle)
    return _qmat(q)


def _torso(root_quat, joints) -> np.ndarray:
    return _qmat(root_quat) @ _axis(2, joints[12]) @ _axis(0, joints[13]) @ _axis(1, joints[14])


def _yaw(r: np.ndarray) -> np.ndarray:
    y = np.arctan2(r[1, 0], r[0, 0])
    return _axis(2, y)


class StateMimicReplica:
    """Loads ``policy_dir`` and a motion file the deploy's way; ``run`` does enter() + the first step."""

    def __init__(self, policy_dir: Path, motion_file: Path | None) -> None:
        cfg_path, onnx_path = policy_dir / "params" / "deploy.yaml", policy_dir / "exported" / "policy.onnx"
        if not cfg_path.is_file():
            raise DeployError(f"YAML::LoadFile({cfg_path}): bad file")
        self.cfg = yaml.safe_load(cfg_path.read_text())
        self.step_dt = float(self.cfg["step_dt"])
        obs_cfg = self.cfg["observations"]
        first = next(iter(obs_cfg.values()))
        if not isinstance(first, dict) or "params" not in first:
            raise DeployError("observation groups: only the single-group layout is replicated")
        self.terms = []
        for name, term in obs_cfg.items():
            if name not in REGISTERED:
                raise DeployError(f"Observation term '{name}' is not registered.")
            if term.get("clip") is not None or int(term.get("history_length", 1)) != 1:
                raise DeployError(f"term {name}: clip/history beyond this replica")
            self.terms.append((name, np.asarray(term["scale"], np.float32) if term.get("scale") else None))
        act = self.cfg["actions"]["JointPositionAction"]
        self.scale = np.asarray(act["scale"], np.float32)
        self.offset = np.asarray(act["offset"], np.float32)
        self.clip = act.get("clip")
        self.default = np.asarray(self.cfg["default_joint_pos"], np.float32)
        self.sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
        self.inputs = []
        for i in self.sess.get_inputs():
            if i.name != "obs":
                raise DeployError(f"Input name {i.name} not found in observations.")
            size = 1
            for dim in i.shape:
                size *= dim if isinstance(dim, int) else -1
            if size <= 0:
                raise DeployError("tried creating tensor with negative value in shape")
            self.inputs.append((i.name, size, list(i.shape)))
        out = self.sess.get_outputs()[0]
        self.out_name, self.action_dim = out.name, int(out.shape[1])
        if motion_file is not None:  # None: the policy folder alone (unitree_rl_lab's Mimic reads a CSV instead)
            self._load_npz(motion_file)

    def _load_npz(self, motion_file: Path) -> None:
        z = np.load(motion_file)
        for k in ("body_pos_w", "body_quat_w", "joint_pos", "joint_vel"):
            if k not in z.files or z[k].dtype != np.float32:
                raise DeployError(f"cnpy {motion_file}: {k} must be a float32 array")
        self.m_root_pos, self.m_root_quat = z["body_pos_w"][:, 0], z["body_quat_w"][:, 0]
        self.m_jp, self.m_jv = z["joint_pos"], z["joint_vel"]
        self.dt = 1.0 / 50.0

    def run(self, qpos: np.ndarray, qvel: np.ndarray, time_start: float) -> np.ndarray:
        """enter() with the robot in (qpos, qvel) at ``time_start`` s into the motion, then one env.step()."""
        frame = min(int(np.floor(np.clip(time_start, 0, len(self.m_jp) * self.dt) / self.dt)), len(self.m_jp) - 1)
        real = _torso(qpos[3:7], qpos[7:])
        init = _yaw(real) @ _yaw(_qmat(self.m_root_quat[frame])).T
        ref = _torso(self.m_root_quat[frame], self.m_jp[frame])
        rot = ((init @ ref).T @ real).T
        return self.act({
            "motion_command": np.concatenate((self.m_jp[frame], self.m_jv[frame])),
            "motion_anchor_ori_b": rot[:, :2].reshape(-1),
            "base_ang_vel": qvel[3:6],
            "joint_pos_rel": qpos[7:] - self.default,
            "joint_vel_rel": qvel[6:],
            "last_action": np.zeros(self.action_dim),
        })  # fmt: skip

    def act(self, values: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(observation, joint target) of one env.step() from the registered terms' values."""
        obs = np.concatenate([values[n] * (1.0 if s is None else s) for n, s in self.terms]).astype(np.float32)
        name, size, shape = self.inputs[0]
        if obs.size != size:
            raise DeployError(f"observation {obs.size} values, model input {size}")
        raw = self.sess.run([self.out_name], {name: obs.reshape(shape)})[0].reshape(-1)[: self.action_dim]
        target = raw * self.scale + self.offset
        if self.clip is not None:
            target = np.clip(target, np.asarray(self.clip)[:, 0], np.asarray(self.clip)[:, 1])
        return obs, target.astype(np.float64)


def test_state_mimic_loads_and_drives_our_export(deploy_exports, ckpt_dir, robot):
    """The observation the deploy builds equals sim2sim's contract (``ObsContract``, unitree convention) and,
    for every term but the anchor orientation, the training observation; the anchor term differs from
    training only by the deploy's start alignment (reference pelvis yaw against robot torso yaw, i.e. the
    start frame's waist yaw), which sim2sim reproduces. The joint target is default + scale * tanh(mean)
    of that observation, in float64 torch."""
    from bcg_deploy.motions.motion import Motion
    from bcg_deploy.sim2sim.obs_contract import ObsContract

    res = deploy_exports["unitree"]
    policy_dir = res.path.parent.parent
    assert res.side_files["deploy_yaml"] == policy_dir / "params" / "deploy.yaml"
    rep = StateMimicReplica(policy_dir, res.side_files["motion_npz"])
    assert rep.step_dt == 0.02 and rep.action_dim == 29 and rep.clip is None
    assert rep.cfg["joint_ids_map"] == list(range(29)) and rep.cfg["stiffness"] == list(robot.kp)
    ck = load_checkpoint(ckpt_dir / "run_beyondmimic_wose.pt")
    a = {k: np.asarray(v, np.float64) for k, v in ck["motion_arrays"].items() if k != "fps"}
    np.testing.assert_array_equal(rep.m_jp, a["joint_pos"].astype(np.float32))
    t = 40
    rot = _qmat(a["root_quat"][t])
    q = np.concatenate((a["root_pos"][t], a["root_quat"][t], a["joint_pos"][t]))
    qd = np.concatenate((a["root_lin_vel"][t], rot.T @ a["root_ang_vel"][t], a["joint_vel"][t]))
    obs, target = rep.run(q, qd, time_start=t * 0.02 + 1e-4)
    z = np.load(res.side_files["motion_npz"])
    ref = Motion.from_bodies(50.0, *(np.asarray(z[k], np.float64)[t:] for k in ("joint_pos", "joint_vel", "body_pos_w",
                    "body_quat_w", "body_lin_vel_w", "body_ang_vel_w")))  # fmt: skip
    contract = ObsContract(get_profile("unitree"), robot.load_model(), ref, robot.joint_names, robot.body_names,
                           robot.default_joint_pos)  # fmt: skip
    contract.reset(q)
    np.testing.assert_allclose(obs, contract.observation(0, q, qd, np.zeros(29))[0], atol=1e-6)
    om = ProfileObservation(robot, ck["motion_arrays"], "unitree", dtype=torch.float64)
    with torch.no_grad():
        train = om(torch.as_tensor(q)[None], torch.as_tensor(qd)[None], torch.tensor([t]), torch.zeros(1, 29))[0]
    keep = np.r_[0:58, 64:154]  # all but motion_anchor_ori_b
    np.testing.assert_allclose(obs[keep], train.numpy()[keep], atol=1e-6)
    actor = Actor.from_state_dict(ck["actor"]).double()
    norm = RunningNormalizer.from_state_dict(ck["obs_normalizer"]).double()
    with torch.no_grad():
        act = actor.deterministic(norm(torch.as_tensor(obs, dtype=torch.float64)[None]))[0].numpy()
    np.testing.assert_allclose(target, robot.default_joint_pos + robot.action_scale * act, atol=1e-5)
    np.testing.assert_allclose(_torso(q[3:7], q[7:]), _qmat(_mj_torso_quat(robot, q)), atol=1e-9)


def _mj_torso_quat(robot, q) -> np.ndarray:
    """torso_link's world quaternion by MuJoCo forward kinematics (the deploy's waist chain must equal it)."""
    m = robot.load_model()
    d = mujoco.MjData(m)
    d.qpos[:] = q
    mujoco.mj_kinematics(m, d)
    return d.xquat[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "torso_link")].copy()


def test_motion_npz_format(deploy_exports):
    z = np.load(deploy_exports["unitree"].side_files["motion_npz"])
    t = z["joint_pos"].shape[0]
    assert z["body_pos_w"].shape == (t, 30, 3) and z["body_quat_w"].shape == (t, 30, 4)
    assert z["joint_vel"].shape == (t, 29) and float(z["fps"][0]) == 50.0
    np.testing.assert_allclose(np.linalg.norm(z["body_quat_w"], axis=-1), 1.0, atol=1e-6)  # w x y z unit


def test_negative_control_default_export_fails(raw_export, tmp_path):
    """The default export: no params/deploy.yaml beside it, and its symbolic batch dimension."""
    with pytest.raises(DeployError, match="YAML::LoadFile"):
        StateMimicReplica(raw_export.path.parent.parent, tmp_path / "none.npz")
    policy_dir = tmp_path / "pol"
    (policy_dir / "exported").mkdir(parents=True)
    (policy_dir / "params").mkdir()
    (policy_dir / "exported" / "policy.onnx").write_bytes(raw_export.path.read_bytes())
    (policy_dir / "params" / "deploy.yaml").write_text(yaml.safe_dump({
        "step_dt": 0.02, "default_joint_pos": [0.0] * 29,
        "actions": {"JointPositionAction": {"scale": [1.0] * 29, "offset": [0.0] * 29, "clip": None}},
        "observations": {"base_ang_vel": {"params": {}, "clip": None, "scale": None, "history_length": 1}},
    }))  # fmt: skip
    with pytest.raises(DeployError, match="Input name base_pos not found"):
        StateMimicReplica(policy_dir, tmp_path / "none.npz")
