"""Replica of holosoma's whole-body-tracking inference (amazon-far/holosoma fc600e7, ``WholeBodyTrackingPolicy``)
loading and driving the export of a tiny ``bcgd train dance --obs holosoma`` run; other exports must fail it.

Paths under ``src/holosoma_inference/holosoma_inference/``. What the replica does, and where holosoma does it:

- config (what the inference uses instead of anything in the ONNX): G1 ``dof_names``
  (``config/config_values/robot.py:52-62``), ``default_dof_angles`` (``robot.py:34-40``), ``num_motors`` 29
  (``robot.py:29``), reference body ``torso_link`` (``robot.py:105``); the ``wbt`` observation: terms, sizes,
  scales, history 1 (``config/config_values/observation.py:106-142``); ``policy_action_scale`` 1.0 and
  ``rl_rate`` 50 (``config/config_values/task.py:26-30``);
- observation buffers: terms sorted by name, zero-initialised template (``policies/base.py:119-136``);
  each term times its scale, float32 (``base.py:476-490``), concatenated in sorted order (``base.py:498-530``);
- ``setup_policy`` (``policies/wbt.py:169-217``): ``onnxruntime.InferenceSession(path)``; ``json.loads`` of
  EVERY metadata value (``wbt.py:175-178``); ``robot_urdf`` asserted present and given to the pinocchio
  robot (``wbt.py:181-182``); ``kp`` / ``kd`` as arrays (``wbt.py:184-185``) whose lengths must be
  ``num_motors`` (``base.py:424-432``); a first call ``run(["joint_pos", "joint_vel", "ref_quat_xyzw"],
  {"obs": template, "time_step": zeros((1, 1), float32)})`` (``wbt.py:193-208``); then every step
  ``run(["actions", "joint_pos", "joint_vel", "ref_quat_xyzw"], ...)`` (``wbt.py:210-215``);
- ``PinocchioRobot`` (``wbt.py:28-75``), pinocchio-free: the URDF parsed with ``xml.etree`` (holosoma:
  ``defusedxml.ElementTree``, the same API), visual and collision elements removed, re-serialised; the model
  built by MuJoCo (which compiles URDF) with a free joint on the root link where pinocchio adds
  ``JointModelFreeFlyer``; its joints (minus the root) must be as many as ``dof_names`` and each one of them
  (``wbt.py:36-43``, ``utils/math/misc.py:1-6``); ``torso_link`` must be a frame (``wbt.py:46``); the
  reference body orientation by forward kinematics of [root position, root quaternion, joints in the
  model's order] (``wbt.py:147-167,48-56``);
- the observation terms (``wbt.py:262-293``): ``motion_command`` and ``motion_ref_ori_b`` from the PREVIOUS
  call's outputs, yaw offsets removed (robot's at start, motion's of the first output: ``wbt.py:268-277,
  421-445``), rotation matrix first two columns flattened row-major (``utils/math/quat.py:102-125``);
  ``base_ang_vel``, ``dof_pos`` (minus ``default_dof_angles``), ``dof_vel`` from the robot state
  ``[pos 3, quat wxyz 4, q 29, lin vel 3, ang vel (body) 3, qd 29]`` (``wbt.py:279-288``); ``actions`` the
  previous output after the +-100 clip (``wbt.py:307-310``);
- the step (``wbt.py:295-320``, ``base.py:596``): ``time_step`` = the motion step, target =
  ``default_dof_angles + policy_action_scale * clip(actions, -100, 100)``; the step advances after the call.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import mujoco
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from bcg_deploy.errors import BcgdError
from bcg_deploy.export import ExportConfig, export_policy
from bcg_deploy.observations.profile import ProfileObservation
from bcg_deploy.profiles import get_profile
from bcg_deploy.robots import load_robot
from bcg_deploy.training.checkpoint import load_checkpoint, robot_of_checkpoint
from bcg_deploy.training.networks import Actor
from bcg_deploy.training.normalizer import RunningNormalizer
from tests.conftest import REPO

_LEG = ("hip_pitch", "hip_roll", "hip_yaw", "knee", "ankle_pitch", "ankle_roll")
_ARM = ("shoulder_pitch", "shoulder_roll", "shoulder_yaw", "elbow", "wrist_roll", "wrist_pitch", "wrist_yaw")
DOF_NAMES = [*(f"{s}_{j}_joint" for s in ("left", "right") for j in _LEG),
             "waist_yaw_joint", "waist_roll_joint", "waist_pitch_joint",
             *(f"{s}_{j}_joint" for s in ("left", "right") for j in _ARM)]  # fmt: skip
DEFAULT_DOF_ANGLES = np.array([-0.312, 0.0, 0.0, 0.669, -0.363, 0.0] * 2 + [0.0] * 3
                              + [0.2, 0.2, 0.0, 0.6, 0.0, 0.0, 0.0, 0.2, -0.2, 0.0, 0.6, 0.0, 0.0, 0.0])  # fmt: skip
NUM_MOTORS = 29
BODY_NAME_REF = "torso_link"
OBS_TERMS = ["motion_command", "motion_ref_ori_b", "base_ang_vel", "dof_pos", "dof_vel", "actions"]
OBS_DIMS = {"motion_command": 58, "motion_ref_pos_b": 3, "motion_ref_ori_b": 6, "base_lin_vel": 3,
            "base_ang_vel": 3, "dof_pos": 29, "dof_vel": 29, "actions": 29}  # fmt: skip
OBS_SCALES = dict.fromkeys(OBS_DIMS, 1.0)
POLICY_ACTION_SCALE = 1.0


class HolosomaError(RuntimeError):
    """What holosoma's inference would raise."""


def _quat_mul(a, b):  # w x y z
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])  # fmt: skip


def _yaw(q):  # utils/math/quat.py:37-62 (ZYX yaw of w x y z)
    w, x, y, z = q
    return float(np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))


def _remove_yaw(q, yaw):  # wbt.py:439-445
    if abs(yaw) < 1e-6:
        return q
    return _quat_mul(np.array([np.cos(-yaw / 2), 0.0, 0.0, np.sin(-yaw / 2)]), q)


def _mat(q):
    out = np.zeros(9)
    mujoco.mju_quat2Mat(out, np.asarray(q, np.float64) / np.linalg.norm(q))
    return out.reshape(3, 3)


class UrdfRobot:
    """``PinocchioRobot`` without pinocchio: the same parse and checks, MuJoCo for the kinematics."""

    def __init__(self, urdf_text: str) -> None:
        root = ET.fromstring(urdf_text)
        for parent in root.iter():
            for child in list(parent):
                if child.tag.split("}")[-1] in {"visual", "collision"}:
                    parent.remove(child)
        xml = ET.tostring(root, encoding="unicode")
        spec = mujoco.MjSpec.from_string(xml)
        children = {j.find("child").get("link") for j in root.iter("joint")}
        roots = [link.get("name") for link in root.iter("link") if link.get("name") not in children]
        if len(roots) != 1:
            raise HolosomaError(f"URDF has {len(roots)} root links")
        spec.body(roots[0]).add_freejoint()
        self.model = spec.compile()
        self.data = mujoco.MjData(self.model)
        names = [self.model.joint(j).name for j in range(1, self.model.njnt)]
        if len(names) != len(DOF_NAMES):
            raise HolosomaError("The number of joints in the pinocchio robot and the real robot are not the same")
        for n in names:
            if n not in DOF_NAMES:
                raise HolosomaError(f"The specified name ({n}) doesn't exist: {DOF_NAMES}")
        self.real2pin = [DOF_NAMES.index(n) for n in names]
        self.ref_body = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, BODY_NAME_REF)
        if self.ref_body < 0:
            raise HolosomaError(f"no frame {BODY_NAME_REF} in the URDF")

    def ref_body_quat(self, state: np.ndarray) -> np.ndarray:
        """w x y z orientation of the reference body (wbt.py:147-167)."""
        self.data.qpos[:] = np.concatenate((state[:7], state[7:36][self.real2pin]))
        mujoco.mj_kinematics(self.model, self.data)
        return self.data.xquat[self.ref_body].copy()


class WbtReplica:
    """holosoma's ``WholeBodyTrackingPolicy`` around one ONNX file; ``start`` then ``step`` per control tick."""

    def __init__(self, path: Path) -> None:
        self.terms = sorted(OBS_TERMS)
        self.template = np.zeros((1, sum(OBS_DIMS[t] for t in self.terms)), np.float32)
        self.sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.metadata = {p.key: json.loads(p.value) for p in onnx.load(str(path)).metadata_props}
        if "robot_urdf" not in self.metadata:
            raise HolosomaError("Robot urdf text not found in ONNX metadata")
        self.robot = UrdfRobot(self.metadata["robot_urdf"])
        self.kp = np.array(self.metadata["kp"]) if "kp" in self.metadata else None
        self.kd = np.array(self.metadata["kd"]) if "kd" in self.metadata else None
        if self.kp is None or self.kd is None:
            raise HolosomaError("No KP/KD values found.")
        if len(self.kp) != NUM_MOTORS or len(self.kd) != NUM_MOTORS:
            raise HolosomaError(f"KP/KD array length does not match num_motors ({NUM_MOTORS})")
        first = {"obs": self.template.copy(), "time_step": np.zeros((1, 1), np.float32)}
        jp, jv, quat = self.sess.run(["joint_pos", "joint_vel", "ref_quat_xyzw"], first)
        self.motion_command = np.concatenate((jp, jv), axis=1)
        self.ref_quat_xyzw = quat
        self.ref_quat_xyzw_0 = quat.copy()
        self.last_action = np.zeros((1, NUM_MOTORS))
        self.motion_timestep = 0

    def start(self, state: np.ndarray) -> None:
        """The start key (``_handle_start_policy`` + start of the motion clip, wbt.py:333-337,393-401)."""
        self.robot_yaw = _yaw(self.robot.ref_body_quat(state))
        q = self.ref_quat_xyzw_0[0]
        self.motion_yaw = _yaw(np.r_[q[3], q[:3]])
        self.motion_timestep = 0

    def observation(self, state: np.ndarray) -> np.ndarray:
        """``prepare_obs_for_rl`` of the robot state (wbt.py:262-293, base.py:476-537)."""
        q = self.ref_quat_xyzw[0]
        motion = _remove_yaw(np.r_[q[3], q[:3]], self.motion_yaw)
        robot = _remove_yaw(self.robot.ref_body_quat(state), self.robot_yaw)
        rel = _mat(robot).T @ _mat(motion)  # subtract_frame_transforms then matrix_from_quat
        n = NUM_MOTORS
        values = {
            "motion_command": self.motion_command,
            "motion_ref_ori_b": rel[:, :2].reshape(1, -1),
            "base_ang_vel": state[None, 7 + n + 3 : 7 + n + 6],
            "dof_pos": state[None, 7 : 7 + n] - DEFAULT_DOF_ANGLES,
            "dof_vel": state[None, 7 + n + 6 : 7 + 2 * n + 6],
            "actions": self.last_action,
        }
        return np.concatenate([(values[t] * OBS_SCALES[t]).astype(np.float32) for t in self.terms], axis=1)

    def step(self, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(observation, joint position target) of one ``rl_inference`` (wbt.py:295-320, base.py:596)."""
        obs = self.observation(state)
        feed = {"time_step": np.array([[self.motion_timestep]], np.float32), "obs": obs}
        action, jp, jv, quat = self.sess.run(["actions", "joint_pos", "joint_vel", "ref_quat_xyzw"], feed)
        self.motion_command, self.ref_quat_xyzw = np.concatenate((jp, jv), axis=1), quat
        action = np.clip(action, -100, 100)
        self.last_action = action.copy()
        self.motion_timestep += 1
        return obs[0], (action * POLICY_ACTION_SCALE + DEFAULT_DOF_ANGLES)[0]


def _clip_state(a: dict, k: int, yaw: float = 0.0, shift=(0.0, 0.0, 0.0)) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(q, qd in MuJoCo layout, holosoma robot state) of clip frame k, turned by ``yaw`` about z and moved."""
    rz = np.array([[np.cos(yaw), -np.sin(yaw), 0.0], [np.sin(yaw), np.cos(yaw), 0.0], [0.0, 0.0, 1.0]])
    quat = _quat_mul(np.array([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]), a["root_quat"][k])
    q = np.concatenate((rz @ a["root_pos"][k] + np.asarray(shift), quat, a["joint_pos"][k]))
    lin = rz @ a["root_lin_vel"][k]
    ang_b = _mat(a["root_quat"][k]).T @ a["root_ang_vel"][k]
    qd = np.concatenate((lin, ang_b, a["joint_vel"][k]))
    return q, qd, np.concatenate((q, lin, ang_b, a["joint_vel"][k]))


def test_holosoma_loads_and_drives_our_export(tiny_holosoma):
    """Over 30 control steps of the clip (the robot on it, turned by 0.7 rad and moved: holosoma's yaw
    offsets remove that), the observation holosoma builds equals the training observation of the same state
    (ProfileObservation, with its one-step reference lag), and its joint target equals default + 1.0 x
    tanh(actor mean) of it in float64 torch: the training target."""
    run, res = tiny_holosoma
    rep = WbtReplica(res.path)
    ins = {i.name: i.shape for i in rep.sess.get_inputs()}
    assert ins == {"obs": [1, rep.template.shape[1]], "time_step": [1, 1]}
    assert [o.name for o in rep.sess.get_outputs()] == ["actions", "joint_pos", "joint_vel", "ref_pos_xyz",
                                                         "ref_quat_xyzw"]  # fmt: skip
    ck = load_checkpoint(run)
    robot = robot_of_checkpoint(ck, load_robot("g1"))
    np.testing.assert_array_equal(robot.default_joint_pos, DEFAULT_DOF_ANGLES)  # the profile's pins
    assert np.all(robot.action_scale == POLICY_ACTION_SCALE)
    assert rep.metadata["dof_names"] == DOF_NAMES and rep.metadata["command_ranges"] is None
    np.testing.assert_array_equal(rep.kp, robot.kp)
    np.testing.assert_array_equal(rep.kd, robot.kd)
    a = {k: np.asarray(v, np.float64) for k, v in ck["motion_arrays"].items() if k != "fps"}
    om = ProfileObservation(robot, ck["motion_arrays"], "holosoma", dtype=torch.float64)
    actor = Actor.from_state_dict(ck["actor"]).double()
    norm = RunningNormalizer.from_state_dict(ck["obs_normalizer"]).double()
    yaw, shift = 0.7, (1.5, -2.0, 0.0)
    rep.start(_clip_state(a, 0, yaw, shift)[2])
    last = np.zeros(29)
    for k in range(30):
        q, qd, _ = _clip_state(a, k)
        obs, target = rep.step(_clip_state(a, k, yaw, shift)[2])
        with torch.no_grad():
            train = om(torch.as_tensor(q)[None], torch.as_tensor(qd)[None], torch.tensor([k]),
                       torch.as_tensor(last)[None])[0].numpy()  # fmt: skip
            act = actor.deterministic(norm(torch.as_tensor(obs, dtype=torch.float64)[None]))[0].numpy()
        np.testing.assert_allclose(obs, train, atol=2e-6, err_msg=f"step {k}")
        np.testing.assert_allclose(target, robot.default_joint_pos + robot.action_scale * act, atol=1e-5)
        last = rep.last_action[0].astype(np.float64)
    ref = rep.sess.run(["ref_pos_xyz"], {"obs": rep.template, "time_step": np.array([[7.9]], np.float32)})[0]
    np.testing.assert_allclose(ref[0], a["body_pos_w"][7, robot.body_names.index("torso_link")], atol=1e-6)


def test_robot_urdf_kinematics_equal_our_model(tiny_holosoma):
    """The reference body orientation holosoma computes from the ONNX's robot_urdf equals MuJoCo's on our MJCF."""
    _, res = tiny_holosoma
    rep = WbtReplica(res.path)
    robot = load_robot("g1")
    m = robot.load_model()
    d = mujoco.MjData(m)
    torso = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "torso_link")
    rng = np.random.default_rng(0)
    for _ in range(10):
        quat = rng.normal(size=4)
        q = np.concatenate((rng.normal(size=3), quat / np.linalg.norm(quat),
                            rng.uniform(robot.joint_range[:, 0], robot.joint_range[:, 1])))  # fmt: skip
        d.qpos[:] = q
        mujoco.mj_kinematics(m, d)
        np.testing.assert_allclose(_mat(rep.robot.ref_body_quat(np.concatenate((q, np.zeros(35))))),
                                   d.xmat[torso].reshape(3, 3), atol=1e-12)  # fmt: skip


HOLOSOMA_MIRROR = REPO.parent / ".mirror" / "amazon-far+holosoma" / "repo"
RELEASED = "src/holosoma_inference/holosoma_inference/models/wbt/fastsac_g1_29dof_dancing.onnx"


def test_replica_accepts_holosomas_own_released_policy(tmp_path):
    """Positive control: the replica loads holosoma's released G1 dancing policy (its metadata, its URDF) and
    steps it (skipped where the read-only mirror of holosoma is absent)."""
    got = subprocess.run(["git", "-C", str(HOLOSOMA_MIRROR), "show", f"HEAD:{RELEASED}"], capture_output=True)
    if got.returncode != 0 or not got.stdout:
        pytest.skip(f"holosoma mirror {HOLOSOMA_MIRROR} absent")
    (tmp_path / "dance.onnx").write_bytes(got.stdout)
    rep = WbtReplica(tmp_path / "dance.onnx")
    assert rep.metadata["dof_names"] == DOF_NAMES and "ref_pos_xyz" in [o.name for o in rep.sess.get_outputs()]
    state = np.zeros(7 + 29 + 6 + 29)
    state[2], state[3], state[7:36] = 0.76, 1.0, rep.motion_command[0, :29]
    rep.start(state)
    obs, target = rep.step(state)
    assert obs.shape == (154,) and np.all(np.isfinite(target))


def test_negative_controls(tiny_unitree, tiny_holosoma, tmp_path):
    """Holosoma rejects the unitree export (its CSV metadata is not JSON) and an export without robot_urdf; our
    exporter refuses a unitree-trained actor for holosoma (other order, other default pose and scale)."""
    with pytest.raises(json.JSONDecodeError):
        WbtReplica(tiny_unitree[1].path)
    model = onnx.load(str(tiny_holosoma[1].path))
    keep = [p for p in model.metadata_props if p.key != "robot_urdf"]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    onnx.save(model, str(tmp_path / "no_urdf.onnx"))
    with pytest.raises(HolosomaError, match="Robot urdf text not found"):
        WbtReplica(tmp_path / "no_urdf.onnx")
    bad = ET.fromstring(json.loads(next(p.value for p in onnx.load(str(tiny_holosoma[1].path)).metadata_props
                                         if p.key == "robot_urdf")))  # fmt: skip
    bad.find("joint").set("name", "hip_joint")
    with pytest.raises(HolosomaError, match="hip_joint"):
        UrdfRobot(ET.tostring(bad, encoding="unicode"))
    out = tmp_path / "x" / "exported" / "policy.onnx"
    out.parent.mkdir(parents=True)
    with pytest.raises(BcgdError, match="trained on the unitree observation"):
        export_policy(ExportConfig(checkpoint=tiny_unitree[0], output=out, profile="holosoma"))
    assert get_profile("holosoma").pins and not out.exists()
    shutil.rmtree(out.parent.parent)
