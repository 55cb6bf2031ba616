"""BeyondMimic's C++ deploy, HybridRobotics/motion_tracking_controller (6beda6d), running an ONNX exported by
whole_body_tracking (cd65172 ``utils/exporter.py``) or mjlab (``tasks/tracking/rl/exporter.py``).

The file carries everything: the reference clip in the graph (``joint_pos``, ``joint_vel``, ``body_pos_w``,
``body_quat_w`` of ``body_names`` at the clamped ``time_step``) and CSV metadata (joint order, gains, default pose,
action scale, observation names and history lengths, anchor body). Paths below are of the controller unless
prefixed; its base class (``legged_rl_controllers``) is not public, so what it does is taken from how this
repository calls it and from whole_body_tracking's exporter.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mujoco
import numpy as np

from bcg_deploy.robots import RobotSpec
from bcg_deploy.stacks.base import (
    Behaviour,
    Findings,
    OnnxFacts,
    RootMotion,
    StackInfo,
    check_static,
    joint_permutation,
    quat_matrix,
    rot6,
    table_rows,
    yaw_matrix,
)

NAME = "motion_tracking_controller"
_C = "HybridRobotics/motion_tracking_controller@6beda6d "
_W = "HybridRobotics/whole_body_tracking@cd65172 source/whole_body_tracking/whole_body_tracking/"
META_KEYS = ("joint_names", "joint_stiffness", "joint_damping", "default_joint_pos", "action_scale",
             "observation_names", "command_names", "anchor_body_name", "body_names")  # fmt: skip
"""Read by the controller (``src/MotionOnnxPolicy.cpp:43-49`` and the base class's keys, which
whole_body_tracking ``utils/exporter.py:102-114`` writes)."""
OUTPUTS = ("actions", "joint_pos", "joint_vel", "body_pos_w", "body_quat_w")  # src/MotionOnnxPolicy.cpp:20-29
CONTROLLER_TERMS = ("motion_anchor_pos_b", "motion_ref_pos_b", "motion_anchor_ori_b", "motion_ref_ori_b",
                    "robot_body_pos", "robot_body_ori")  # fmt: skip  # src/MotionTrackingController.cpp:65-81
BASE_TERMS = ("command", "base_lin_vel", "base_ang_vel", "joint_pos", "joint_vel", "actions")
"""The whole_body_tracking policy-group terms (``tasks/tracking/tracking_env_cfg.py:118-129``) the base
controller builds."""

INFO = StackInfo(
    name=NAME,
    repo="HybridRobotics/motion_tracking_controller@6beda6d (ONNX of whole_body_tracking@cd65172 / mjlab)",
    loads=("policy.onnx only: graph + CSV metadata_props (README.md: joint order, impedance in the metadata)",),
    observation="metadata observation_names x observation_history_lengths, in that order (whole_body_tracking "
    "utils/exporter.py:91-110): command 2J, motion_anchor_pos_b 3, motion_anchor_ori_b 6, base_lin_vel 3, "
    "base_ang_vel 3, joint_pos J, joint_vel J, actions J (tracking_env_cfg.py:118-129)",
    actions="target = default_joint_pos + action_scale * actions, metadata joint order mapped by name",
    gains="metadata joint_stiffness / joint_damping (whole_body_tracking utils/exporter.py:105-106)",
    control="50 Hz policy (config/g1/controllers.yaml:52), 500 Hz controller manager (controllers.yaml:3)",
    motion="the graph's tables at the clamped time_step (whole_body_tracking utils/exporter.py:44-54)",
    behaviours=(
        Behaviour(
            "reset forward on zeros",
            "reset() runs the policy once on a ZERO observation at the start step: the first 'actions' "
            "(last action) term is that output, not zero",
            _C + "src/MotionOnnxPolicy.cpp:11-15",
        ),
        Behaviour(
            "reference from the last forward",
            "each update builds the observation from the reference of the previous forward (frame k at step k) "
            "and runs the policy with time_step k + 1",
            _C + "src/MotionOnnxPolicy.cpp:17-40",
        ),
        Behaviour(
            "start alignment (position, yaw)",
            "at reset the whole motion is moved so that its start anchor (torso) matches the robot's in position "
            "and yaw",
            _C + "src/MotionCommand.cpp:36-42, include/motion_tracking_controller/MotionCommand.h:43-49",
        ),
        Behaviour(
            "anchor terms",
            "anchor terms: R_a^T (T_init p_ref - p_a) and the 6D r00 r01 r10 r11 r20 r21 of R_a^T R_init R_ref, "
            "robot anchor by forward kinematics of the estimated base pose and the encoders",
            _C + "src/MotionCommand.cpp:49-64",
        ),
        Behaviour(
            "history layout > 1 frame",
            "observation history of more than one frame: layout of the (non-public) base class",
            "legged_rl_controllers (headers only)",
            "as Isaac Lab's, oldest frame first per term (whole_body_tracking ships history 1)",
        ),
        Behaviour(
            "state estimator",
            "the state estimator (base position and linear velocity) of legged_control2",
            _C + "config/g1/controllers.yaml:5-20",
            "no: the true MuJoCo base state, with --noise / --obs-latency as the estimator's error",
        ),
    ),
    model="unitree_description's mjcf/g1.xml (in qiayuanl/unitree docker images, not public); holosoma's "
    "src/holosoma/holosoma/data/robots/g1/g1_29dof.xml is a copy of it with actuators added (its header)",
)

TERM_SIZES = {
    "command": lambda j, b: 2 * j,
    "motion_anchor_pos_b": lambda j, b: 3,
    "motion_ref_pos_b": lambda j, b: 3,
    "motion_anchor_ori_b": lambda j, b: 6,
    "motion_ref_ori_b": lambda j, b: 6,
    "robot_body_pos": lambda j, b: 3 * b,
    "robot_body_ori": lambda j, b: 6 * b,
    "base_lin_vel": lambda j, b: 3,
    "base_ang_vel": lambda j, b: 3,
    "joint_pos": lambda j, b: j,
    "joint_vel": lambda j, b: j,
    "actions": lambda j, b: j,
}


def _csv(meta: dict, key: str) -> list[str]:
    return [s.strip() for s in meta[key].split(",")] if meta.get(key, "").strip() else []


@dataclass
class MtcFiles:
    """The ONNX as the controller reads it (policy order = metadata ``joint_names``)."""

    onnx: OnnxFacts
    joint_names: list[str] = field(default_factory=list)
    perm: np.ndarray | None = None  # model_vec = policy_vec[perm]
    kp: np.ndarray | None = None  # policy order
    kd: np.ndarray | None = None
    default: np.ndarray | None = None
    scale: np.ndarray | None = None
    terms: list[tuple[str, int, int]] = field(default_factory=list)  # name, size, history
    anchor: str = ""
    body_names: list[str] = field(default_factory=list)
    num_frames: int | None = None


def read(o: OnnxFacts, spec: RobotSpec, f: Findings) -> MtcFiles:
    """Read the ONNX the controller's way; every disagreement is a finding."""
    out = MtcFiles(o)
    meta = o.metadata
    missing = [k for k in META_KEYS if k not in meta]
    if missing:
        f.bad(f"{o.path.name}: metadata lacks {', '.join(missing)} (the controller throws on a missing key)")
        return out
    check_static(o, f, NAME)
    for name in ("obs", "time_step"):
        if name not in o.inputs:
            f.bad(f"{o.path.name}: no input '{name}' (name2Index_.at, src/MotionOnnxPolicy.cpp:20)")
    if o.inputs.get("time_step") not in (None, [1, 1]):
        f.bad(f"{o.path.name}: time_step has shape {o.inputs['time_step']}, expected [1, 1]")
    for name in OUTPUTS:
        if name not in o.outputs:
            f.bad(f"{o.path.name}: no output '{name}' (src/MotionOnnxPolicy.cpp:23-29)")
    out.joint_names = _csv(meta, "joint_names")
    out.perm = joint_permutation(out.joint_names, spec, f"{o.path.name} metadata joint_names", f)
    j = len(out.joint_names)
    for key, attr in (("joint_stiffness", "kp"), ("joint_damping", "kd"), ("default_joint_pos", "default"),
                      ("action_scale", "scale")):  # fmt: skip
        try:
            v = np.array([float(x) for x in _csv(meta, key)])
        except ValueError:
            f.bad(f"{o.path.name}: metadata {key} is not comma-separated numbers (std::stod throws)")
            continue
        if v.size != j:
            f.bad(f"{o.path.name}: metadata {key} has {v.size} values for {j} joints")
            continue
        setattr(out, attr, v)
    if out.scale is not None and np.any(out.scale <= 0):
        f.bad(f"{o.path.name}: metadata action_scale has a value <= 0")
    out.anchor = meta["anchor_body_name"].strip()
    out.body_names = _csv(meta, "body_names")
    bodies = set(spec.body_names)
    for b in [out.anchor, *out.body_names]:
        if b not in bodies:
            f.bad(f"{o.path.name}: body '{b}' is not a G1 frame (src/MotionCommand.cpp:15-24)")
    if out.anchor not in out.body_names:
        f.bad(f"{o.path.name}: anchor {out.anchor} is not in body_names (src/MotionCommand.cpp:25-34)")
    names = _csv(meta, "observation_names")
    hist = _csv(meta, "observation_history_lengths") or ["1"] * len(names)
    if len(hist) != len(names):
        f.bad(f"{o.path.name}: {len(hist)} observation_history_lengths for {len(names)} observation_names")
        hist = ["1"] * len(names)
    for name, h in zip(names, hist, strict=True):
        if name not in TERM_SIZES:
            f.bad(f"{o.path.name}: observation term '{name}' is not one the controller builds "
                  f"({', '.join(TERM_SIZES)}; MotionTrackingController.cpp:65-81)")  # fmt: skip
            continue
        out.terms.append((name, TERM_SIZES[name](j, len(out.body_names)), max(1, int(float(h)))))
    if any(h > 1 for _, _, h in out.terms):
        f.note("observation history > 1: the base controller's layout is not public; modelled oldest frame first")
    size = o.size("obs") if "obs" in o.inputs else None
    total = sum(s * h for _, s, h in out.terms)
    if size is not None and len(out.terms) == len(names) and total != size:
        f.bad(f"{o.path.name}: observation_names make {total} values, input obs takes {size}")
    b = len(out.body_names)
    for name, per in (("body_pos_w", 3), ("body_quat_w", 4)):
        n = o.size(name) if name in o.outputs else None
        if n is not None and n != b * per:
            f.bad(f"{o.path.name}: output {name} has {o.outputs[name]}, expected {b} bodies x {per}")
    out.num_frames = table_rows(o, "joint_pos")
    if out.scale is not None and out.kp is not None:
        order = "G1 order" if out.perm is not None and list(out.perm) == list(range(j)) else "mapped by name"
        f.fact(f"metadata: {j} joints ({order}), "
               f"action scale {out.scale.min():g}-{out.scale.max():g}, kp {out.kp.min():g}-{out.kp.max():g}, "
               f"terms {', '.join(f'{n} {s}x{h}' for n, s, h in out.terms)}")  # fmt: skip
    f.fact(f"ONNX {o.path.name}: obs {o.inputs.get('obs')} + time_step -> actions {o.outputs.get('actions')}, "
           f"opset {o.opset}, {len(out.terms)} terms, anchor {out.anchor}, {b} bodies, "
           f"{out.num_frames if out.num_frames is not None else '?'} frames")  # fmt: skip
    return out


def root_motion(files: MtcFiles, session, spec: RobotSpec, control_dt: float) -> RootMotion:  # noqa: ANN001
    """The clip from the graph's tables: pelvis pose from the ``pelvis`` body if listed, else from the anchor
    through the joints (forward kinematics on the packaged G1)."""
    t = files.num_frames or 1
    feeds = {"obs": np.zeros(files.onnx.inputs["obs"], np.float32), "time_step": np.zeros((1, 1), np.float32)}
    rows = {k: [] for k in ("joint_pos", "joint_vel", "body_pos_w", "body_quat_w")}
    for i in range(t):
        feeds["time_step"][0, 0] = i
        outs = session.run(list(rows), feeds)
        for k, v in zip(rows, outs, strict=True):
            rows[k].append(np.asarray(v, np.float64).reshape(-1))
    jp = np.stack(rows["joint_pos"])[:, files.perm]
    jv = np.stack(rows["joint_vel"])[:, files.perm]
    bp = np.stack(rows["body_pos_w"]).reshape(t, -1, 3)
    bq = np.stack(rows["body_quat_w"]).reshape(t, -1, 4)
    src = {"kind": "policy", "file": files.onnx.path.name}
    if "pelvis" in files.body_names:
        i = files.body_names.index("pelvis")
        return RootMotion(1.0 / control_dt, bp[:, i], bq[:, i], jp, jv, src)
    a = files.body_names.index(files.anchor)
    pos, q = root_from_body(spec, files.anchor, bp[:, a], bq[:, a], jp)
    return RootMotion(1.0 / control_dt, pos, q, jp, jv, src)


def root_from_body(spec: RobotSpec, body: str, pos: np.ndarray, q: np.ndarray, joints: np.ndarray):
    """Pelvis positions [T, 3] and quaternions [T, 4] w x y z from a body's world pose and the joints
    (model order), by forward kinematics on the packaged G1: T_pelvis = T_body T_pelvis->body^-1."""
    m = spec.load_model()
    d = mujoco.MjData(m)
    bid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, body)
    out_p, out_q = np.zeros((len(pos), 3)), np.zeros((len(pos), 4))
    for i in range(len(pos)):
        d.qpos[:] = 0.0
        d.qpos[3] = 1.0
        d.qpos[7:] = joints[i]
        mujoco.mj_kinematics(m, d)
        r_pb, p_pb = d.xmat[bid].reshape(3, 3), d.xpos[bid].copy()  # body in the pelvis frame
        r_wb = quat_matrix(q[i])
        r_wp = r_wb @ r_pb.T
        out_p[i] = pos[i] - r_wp @ p_pb
        mujoco.mju_mat2Quat(out_q[i], r_wp.reshape(9))
    return out_p, out_q


class MtcRuntime:
    """The controller driving one run: ``act(k, qpos, qvel)`` is one policy update (targets in model order)."""

    def __init__(self, files: MtcFiles, session, model: mujoco.MjModel) -> None:  # noqa: ANN001
        self.f, self.session = files, session
        self.m, self.d = model, mujoco.MjData(model)
        self.anchor_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, files.anchor)
        self.body_ids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, b) for b in files.body_names]
        self.anchor_i = files.body_names.index(files.anchor)
        self.obs_shape = files.onnx.inputs["obs"]
        self.inv = np.argsort(files.perm)  # policy_vec = model_vec[inv]
        self.buffers: dict[str, list[np.ndarray]] = {}

    def forward(self, obs: np.ndarray, time_step: int) -> np.ndarray:
        """MotionOnnxPolicy::forward: the action, and the reference kept for the next observation."""
        feeds = {"obs": obs.reshape(self.obs_shape).astype(np.float32),
                 "time_step": np.array([[time_step]], np.float32)}  # fmt: skip
        a, jp, jv, bp, bq = self.session.run(list(OUTPUTS), feeds)
        self.jp, self.jv = np.asarray(jp, np.float64).reshape(-1), np.asarray(jv, np.float64).reshape(-1)
        self.bp, self.bq = np.asarray(bp, np.float64).reshape(-1, 3), np.asarray(bq, np.float64).reshape(-1, 4)
        self.last = np.asarray(a, np.float64).reshape(-1)
        return self.last

    def _fk(self, qpos: np.ndarray) -> None:
        self.d.qpos[:] = qpos
        mujoco.mj_kinematics(self.m, self.d)
        self.p_a = self.d.xpos[self.anchor_id].copy()
        self.r_a = self.d.xmat[self.anchor_id].reshape(3, 3).copy()

    def reset(self, qpos: np.ndarray) -> None:
        """policy reset (forward on zeros at the start step 0), then MotionCommandTerm::reset (alignment)."""
        self.buffers.clear()
        self.forward(np.zeros(int(np.prod(self.obs_shape))), 0)
        self.step = 1
        self._fk(qpos)
        r_ref = quat_matrix(self.bq[self.anchor_i])
        self.r_init = yaw_matrix(self.r_a) @ yaw_matrix(r_ref).T
        self.p_init = self.p_a - self.r_init @ self.bp[self.anchor_i]

    def _terms(self, qpos: np.ndarray, qvel: np.ndarray) -> dict[str, np.ndarray]:
        r_base = quat_matrix(qpos[3:7])
        q = qpos[7:][self.inv]
        v = {
            "command": np.concatenate([self.jp, self.jv]),
            "base_lin_vel": r_base.T @ qvel[:3],
            "base_ang_vel": qvel[3:6],
            "joint_pos": q - self.f.default,
            "joint_vel": qvel[6:][self.inv],
            "actions": self.last,
        }
        v["motion_anchor_pos_b"] = self.r_a.T @ (self.r_init @ self.bp[self.anchor_i] + self.p_init - self.p_a)
        v["motion_anchor_ori_b"] = rot6(self.r_a.T @ self.r_init @ quat_matrix(self.bq[self.anchor_i]))
        v["motion_ref_pos_b"], v["motion_ref_ori_b"] = v["motion_anchor_pos_b"], v["motion_anchor_ori_b"]
        xp, xm = self.d.xpos[self.body_ids], self.d.xmat[self.body_ids].reshape(-1, 3, 3)
        v["robot_body_pos"] = ((xp - self.p_a) @ self.r_a).reshape(-1)
        v["robot_body_ori"] = np.concatenate([rot6(self.r_a.T @ r) for r in xm])
        return v

    def act(self, k: int, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
        if k == 0:
            self.reset(qpos)
        self._fk(qpos)
        values = self._terms(qpos, qvel)
        parts = []
        for name, _, h in self.f.terms:
            buf = self.buffers.setdefault(name, [values[name]] * h)
            buf.append(values[name])
            del buf[: len(buf) - h]
            parts.extend(buf)
        actions = self.forward(np.concatenate(parts), self.step)
        self.step += 1
        target = self.f.default + self.f.scale * actions
        return target[self.f.perm]
