"""amazon-far/holosoma's whole-body-tracking inference (``WholeBodyTrackingPolicy``), read at fc600e7.

The ONNX gives the actor and the reference (``joint_pos``, ``joint_vel``, ``ref_pos_xyz``, ``ref_quat_xyzw`` of the
reference body torso_link at the clamped ``time_step``) and JSON metadata (``kp``, ``kd``, ``robot_urdf``); the
observation layout, the default pose and the action scale come from the inference CONFIG, never from the ONNX
(paths under ``src/holosoma_inference/holosoma_inference/``).

holosoma #125: the released ``fastsac_g1_29dof_dancing.onnx`` carries no action scale and was trained with 1.0;
fc600e7's WBT task applies ``policy_action_scale = 1.0`` (``config/config_values/task.py:46``), later holosoma
applies 0.25 x effort / kp per joint to an ONNX without one (0.35-0.55: the robot falls) unless run with
``--task.no-action-scales-by-effort-limit-over-p-gain``.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

import mujoco
import numpy as np

from bcg_deploy.profiles.declarations import HOLOSOMA_ACTION_SCALE, HOLOSOMA_DEFAULT_JOINT_POS
from bcg_deploy.robots import RobotSpec
from bcg_deploy.rotations import quat_numpy as quat
from bcg_deploy.stacks.base import (
    Behaviour,
    Findings,
    OnnxFacts,
    RootMotion,
    StackInfo,
    check_static,
    joint_permutation,
    quat_matrix,
    table_rows,
)
from bcg_deploy.stacks.motion_tracking_controller import root_from_body

NAME = "holosoma"
_I = "amazon-far/holosoma@fc600e7 src/holosoma_inference/holosoma_inference/"
TERMS = {"motion_command": 58, "motion_ref_ori_b": 6, "base_ang_vel": 3, "dof_pos": 29, "dof_vel": 29, "actions": 29}
"""config/config_values/observation.py:106-142 (actor_obs terms and sizes; every scale 1.0, history 1)."""
ORDER = tuple(sorted(TERMS))
"""Concatenated sorted by name (policies/base.py:125-136, 498-527)."""
DEFAULT_DOF_ANGLES = HOLOSOMA_DEFAULT_JOINT_POS
"""config/config_values/robot.py:34-40, in dof_names order (robot.py:52-62, the G1 SDK order); the holosoma
observation profile's fixed default pose, which its training pins."""
ACTION_SCALE = HOLOSOMA_ACTION_SCALE
"""The WBT task's policy_action_scale (config/config_values/task.py:46); the holosoma profile's fixed scale."""
ACTION_CLIP = 100.0
"""np.clip(policy_action, -100, 100) (policies/wbt.py:308)."""
REF_BODY = "torso_link"
"""robot.motion body_name_ref (config/config_values/robot.py:109)."""
OUTPUTS = ("actions", "joint_pos", "joint_vel", "ref_quat_xyzw")  # policies/wbt.py:201, 211

INFO = StackInfo(
    name=NAME,
    repo="amazon-far/holosoma@fc600e7",
    loads=(
        "the ONNX: every metadata value json.loads'ed (policies/base.py:363-366); kp, kd (policies/base.py:369-370), "
        "robot_urdf as URDF text for pinocchio (policies/wbt.py:174-182)",
        "inference config g1-29dof-wbt: observation, default pose, action scale, rate (config/config_values/"
        "inference.py:29-55, observation.py:106-142, robot.py:17-110, task.py:38-53)",
    ),
    observation="sorted by name: actions 29, base_ang_vel 3, dof_pos 29, dof_vel 29, motion_command 58, "
    "motion_ref_ori_b 6 = 154, scales 1.0, history 1 (observation.py:106-142, policies/base.py:125-136)",
    actions="clip +/-100, q_target = default_dof_angles + policy_action_scale (1.0) * action (policies/wbt.py:307-312, "
    "policies/base.py:596)",
    gains="ONNX metadata kp / kd unless the config overrides them (policies/base.py:388-416)",
    control="rl_rate 50 Hz (config/config_values/task.py:39)",
    motion="the graph's tables at the clamped time_step (src/holosoma/holosoma/utils/inference_helpers.py:191-200)",
    behaviours=(
        Behaviour(
            "zero-observation setup call",
            "setup runs the policy on a zero observation at time_step 0: motion_command_0 and ref_quat_0",
            _I + "policies/wbt.py:192-208",
        ),
        Behaviour(
            "reference one step behind",
            "each step observes the reference of the PREVIOUS call (frame k - 1 at step k, frame 0 at step 0) and "
            "runs the policy with time_step k",
            _I + "policies/wbt.py:262-320",
        ),
        Behaviour(
            "yaw-offset anchor term (URDF FK)",
            "motion_ref_ori_b: 6D of (robot torso minus its start yaw)^-1 (reference torso minus its frame-0 yaw), "
            "robot torso by forward kinematics of the ONNX's robot_urdf from the IMU quaternion and encoders",
            _I + "policies/wbt.py:147-167, 268-277, 421-445",
        ),
        Behaviour(
            "clipped last action",
            "last action = the clipped, unscaled output (zero at start)",
            _I + "policies/wbt.py:307-310, policies/base.py:153, 225",
        ),
        Behaviour(
            "config default pose and scale",
            "default pose and action scale from the config, not the ONNX; an ONNX action_scale is ignored",
            _I + "policies/base.py:68, 149, 596",
        ),
        Behaviour(
            "stiff hold / gantry / start keys",
            "stiff hold, gantry and the ']' then 's' start sequence of its sim2sim",
            _I + "policies/wbt.py:105-145, 333-401; docs/workflows/sim-to-sim-wbt.md",
            "no: the clip starts at the policy's first step, from the reference's first frame",
        ),
    ),
    model="src/holosoma/holosoma/data/robots/g1/g1_29dof.xml (armature, joint friction 0.1, motor force ranges in "
    "the file), scene scenes/scene_g1_29dof_wbt_plane.xml: 2 ms, Newton, 50 iterations",
)


@dataclass
class HoloFiles:
    """The ONNX as the inference reads it, with the config it binds (policy order = config dof_names)."""

    onnx: OnnxFacts
    meta: dict = field(default_factory=dict)
    perm: np.ndarray | None = None
    kp: np.ndarray | None = None  # policy order
    kd: np.ndarray | None = None
    default: np.ndarray = field(default_factory=lambda: np.asarray(DEFAULT_DOF_ANGLES))
    scale: float = ACTION_SCALE
    urdf: str = ""
    num_frames: int | None = None


def strip_urdf(text: str) -> str:
    """The URDF without visual and collision elements (what the inference hands pinocchio, wbt.py:58-75)."""
    root = ET.fromstring(text)
    for parent in root.iter():
        for child in list(parent):
            if child.tag.split("}")[-1] in ("visual", "collision"):
                parent.remove(child)
    return ET.tostring(root, encoding="unicode")


def read(o: OnnxFacts, spec: RobotSpec, f: Findings) -> HoloFiles:
    """Read the ONNX the inference's way; every disagreement is a finding."""
    out = HoloFiles(o)
    for key, text in o.metadata.items():
        try:
            out.meta[key] = json.loads(text)
        except json.JSONDecodeError:
            f.bad(f"{o.path.name}: metadata {key!r} is not JSON (json.loads raises, policies/base.py:366)")
    check_static(o, f, NAME)
    for name in ("obs", "time_step"):
        if name not in o.inputs:
            f.bad(f"{o.path.name}: no input '{name}' (policies/wbt.py:200, 304)")
    for name in OUTPUTS:
        if name not in o.outputs:
            f.bad(f"{o.path.name}: no output '{name}' (policies/wbt.py:201, 211)")
    size = o.size("obs") if "obs" in o.inputs else None
    if size is not None and size != sum(TERMS.values()):
        f.bad(f"{o.path.name}: input obs takes {size} values; holosoma's WBT config builds {sum(TERMS.values())} "
              f"({', '.join(f'{t} {TERMS[t]}' for t in ORDER)})")  # fmt: skip
    out.perm = joint_permutation(list(spec.joint_names), spec, "holosoma dof_names", f)  # config order = SDK
    names = out.meta.get("dof_names")
    if names is not None and list(names) != list(spec.joint_names):
        f.bad(f"{o.path.name}: metadata dof_names differ from the config's dof_names order (the inference uses the "
              "config's, config/config_values/robot.py:52-62)")  # fmt: skip
    for key in ("kp", "kd"):
        v = out.meta.get(key)
        if v is None:
            f.bad(f"{o.path.name}: no metadata {key} and the G1 config sets none (policies/base.py:417-422)")
            continue
        arr = np.asarray(v, np.float64).reshape(-1)
        if arr.size != spec.num_joints:
            f.bad(f"{o.path.name}: metadata {key} has {arr.size} values, num_motors is {spec.num_joints}")
            continue
        setattr(out, key, arr)
    urdf = out.meta.get("robot_urdf")
    if not isinstance(urdf, str):
        f.bad(f"{o.path.name}: no metadata robot_urdf (URDF text; assert in policies/wbt.py:181)")
    else:
        out.urdf = urdf
        _check_urdf(urdf, spec, o, f)
    if "action_scale" in out.meta:
        s = np.asarray(out.meta["action_scale"], np.float64).reshape(-1)
        if not np.allclose(s, ACTION_SCALE):
            f.bad(f"{o.path.name}: metadata action_scale {s[:3].tolist()}..., but holosoma applies its config's "
                  f"policy_action_scale {ACTION_SCALE:g} (policies/base.py:149; it ignores the ONNX's)")  # fmt: skip
    else:
        f.note(
            f"{o.path.name} has no action_scale: holosoma fc600e7 applies its WBT config's {ACTION_SCALE:.1f}, the "
            "scale this policy was trained with; later holosoma derives 0.25 x effort / kp per joint (0.35-0.55) for "
            "an ONNX without one and the robot falls: run it there with "
            "--task.no-action-scales-by-effort-limit-over-p-gain (holosoma #125)"
        )
    out.num_frames = table_rows(o, "joint_pos")
    if out.kp is not None:
        layout = ", ".join(f"{t} {TERMS[t]}" for t in ORDER)
        f.fact(f"metadata kp {out.kp.min():g}-{out.kp.max():g}, kd {out.kd.min():g}-{out.kd.max():g}; "
               f"robot_urdf with the 29 G1 joints and {REF_BODY}; observation {layout}")  # fmt: skip
    f.fact(f"ONNX {o.path.name}: obs {o.inputs.get('obs')} + time_step -> {', '.join(OUTPUTS)}, opset {o.opset}, "
           f"{out.num_frames if out.num_frames is not None else '?'} frames; default pose and action scale "
           f"{ACTION_SCALE:.1f} from holosoma's config")  # fmt: skip
    return out


def _check_urdf(urdf: str, spec: RobotSpec, o: OnnxFacts, f: Findings) -> None:
    try:
        m = mujoco.MjModel.from_xml_string(strip_urdf(urdf))
    except (ET.ParseError, ValueError) as exc:
        f.bad(f"{o.path.name}: robot_urdf does not load ({str(exc).splitlines()[0][:100]})")
        return
    joints = {m.joint(i).name for i in range(m.njnt)}
    missing = [n for n in spec.joint_names if n not in joints]
    if missing:
        f.bad(f"{o.path.name}: robot_urdf lacks joint {missing[0]} (pinocchio model vs dof_names, wbt.py:40-43)")
    if mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, REF_BODY) < 0:
        f.bad(f"{o.path.name}: robot_urdf has no link {REF_BODY} (the reference body, wbt.py:46)")


class UrdfTorso:
    """The torso orientation the inference computes: forward kinematics of the ONNX's URDF (fixed base = the
    pelvis) rotated by the IMU quaternion (policies/wbt.py:147-167)."""

    def __init__(self, urdf: str, spec: RobotSpec) -> None:
        self.m = mujoco.MjModel.from_xml_string(strip_urdf(urdf))
        self.d = mujoco.MjData(self.m)
        self.adr = np.array([self.m.jnt_qposadr[mujoco.mj_name2id(self.m, mujoco.mjtObj.mjOBJ_JOINT, n)]
                             for n in spec.joint_names])  # fmt: skip
        self.body = mujoco.mj_name2id(self.m, mujoco.mjtObj.mjOBJ_BODY, REF_BODY)

    def matrix(self, base_quat: np.ndarray, joints: np.ndarray) -> np.ndarray:
        self.d.qpos[self.adr] = joints
        mujoco.mj_kinematics(self.m, self.d)
        return quat_matrix(base_quat) @ self.d.xmat[self.body].reshape(3, 3)


def _quat_of(r: np.ndarray) -> np.ndarray:
    q = np.zeros(4)
    mujoco.mju_mat2Quat(q, np.asarray(r, np.float64).reshape(9))
    return q


def _yaw(q: np.ndarray) -> float:
    """quat_to_rpy's yaw (utils/math/quat.py:57-60), w x y z."""
    w, x, y, z = q
    return float(np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))


def _remove_yaw(q: np.ndarray, yaw: float) -> np.ndarray:
    """quat_mul(rpy_to_quat(0, 0, -yaw), q), skipped below 1e-6 rad (policies/wbt.py:439-445)."""
    if abs(yaw) < 1e-6:
        return q
    return quat.mul(np.array([np.cos(-yaw / 2), 0.0, 0.0, np.sin(-yaw / 2)]), q)


def _matrix_first_two_columns(q: np.ndarray) -> np.ndarray:
    """matrix_from_quat(q)[..., :2].reshape(1, -1) (utils/math/quat.py:107-125; the 2 / |q|^2 form)."""
    r, i, j, k = q
    s = 2.0 / float(np.dot(q, q))
    m = np.array([
        [1 - s * (j * j + k * k), s * (i * j - k * r), s * (i * k + j * r)],
        [s * (i * j + k * r), 1 - s * (i * i + k * k), s * (j * k - i * r)],
        [s * (i * k - j * r), s * (j * k + i * r), 1 - s * (i * i + j * j)],
    ])  # fmt: skip
    return m[:, :2].reshape(6)


def root_motion(files: HoloFiles, session, spec: RobotSpec, control_dt: float) -> RootMotion:  # noqa: ANN001
    """The clip from the graph's tables; the pelvis pose from the torso pose (``ref_pos_xyz``,
    ``ref_quat_xyzw``) through the joints."""
    t = files.num_frames or 1
    feeds = {"obs": np.zeros(files.onnx.inputs["obs"], np.float32), "time_step": np.zeros((1, 1), np.float32)}
    names = ["joint_pos", "joint_vel", "ref_pos_xyz", "ref_quat_xyzw"]
    rows = [[] for _ in names]
    for i in range(t):
        feeds["time_step"][0, 0] = i
        for r, v in zip(rows, session.run(names, feeds), strict=True):
            r.append(np.asarray(v, np.float64).reshape(-1))
    jp, jv, pos, qx = (np.stack(r) for r in rows)
    jp, jv = jp[:, files.perm], jv[:, files.perm]
    q = qx[:, [3, 0, 1, 2]]  # x y z w -> w x y z
    root_p, root_q = root_from_body(spec, REF_BODY, pos, q, jp)
    return RootMotion(1.0 / control_dt, root_p, root_q, jp, jv, {"kind": "policy", "file": files.onnx.path.name})


class HoloRuntime:
    """``WholeBodyTrackingPolicy`` driving one run: ``act(k, qpos, qvel)`` is one ``rl_inference`` call."""

    def __init__(self, files: HoloFiles, session, spec: RobotSpec) -> None:  # noqa: ANN001
        self.f, self.session = files, session
        self.torso = UrdfTorso(files.urdf, spec)
        self.obs_shape = files.onnx.inputs["obs"]
        self.inv = np.argsort(files.perm)

    def _run(self, obs: np.ndarray, time_step: int) -> np.ndarray:
        feeds = {
            "obs": obs.reshape(self.obs_shape).astype(np.float32),
            "time_step": np.array([[time_step]], np.float32),
        }
        a, jp, jv, q = self.session.run(list(OUTPUTS), feeds)
        self.command = np.concatenate([np.reshape(jp, -1), np.reshape(jv, -1)]).astype(np.float32)
        self.ref_q = np.asarray(q, np.float64).reshape(-1)[[3, 0, 1, 2]]
        return np.asarray(a, np.float64).reshape(-1)

    def reset(self, qpos: np.ndarray) -> None:
        """setup_policy (zero observation at time_step 0) then _handle_start_policy (the two yaw offsets)."""
        self._run(np.zeros(int(np.prod(self.obs_shape))), 0)
        self.motion_yaw = _yaw(self.ref_q)
        self.robot_yaw = _yaw(_quat_of(self.torso.matrix(qpos[3:7], qpos[7:])))
        self.last = np.zeros(len(self.f.default))

    def act(self, k: int, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
        if k == 0:
            self.reset(qpos)
        q, dq = qpos[7:][self.inv], qvel[6:][self.inv]
        motion = _remove_yaw(self.ref_q, self.motion_yaw)
        robot = _remove_yaw(_quat_of(self.torso.matrix(qpos[3:7], qpos[7:])), self.robot_yaw)
        rel = quat.mul(robot * np.array([1.0, -1.0, -1.0, -1.0]), motion)  # subtract_frame_transforms
        terms = {
            "actions": self.last,
            "base_ang_vel": qvel[3:6],
            "dof_pos": q - self.f.default,
            "dof_vel": dq,
            "motion_command": self.command,
            "motion_ref_ori_b": _matrix_first_two_columns(rel),
        }
        obs = np.concatenate([np.asarray(terms[t], np.float32).reshape(-1) for t in ORDER])
        action = np.clip(self._run(obs, k), -ACTION_CLIP, ACTION_CLIP)
        self.last = action
        target = self.f.default + self.f.scale * action
        return target[self.f.perm]
