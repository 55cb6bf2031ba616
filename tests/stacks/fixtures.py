"""Small policies in each deploy stack's file format, built here (no mirror, no released file needed).

The actor is linear, ``actions = obs W + b`` with a non-zero bias (so a zero observation gives a non-zero action,
which makes motion_tracking_controller's reset call visible); the reference is a short clip of the G1 standing and
swaying its joints, bodies by MuJoCo forward kinematics. Formats, as each stack reads them:

- unitree: ``params/deploy.yaml`` laid out as unitree_rl_mjlab 5b7e396's released
  ``deploy/robots/g1/config/policy/mimic/dance1_subject2/params/deploy.yaml``, ``exported/policy.onnx`` (input
  ``obs`` [1, N], output 0 ``actions`` [1, 29]), ``params/motion.npz`` (float32 ``body_pos_w``, ``body_quat_w``,
  ``joint_pos``, ``joint_vel``) or ``params/motion.csv`` with ``config/config.yaml`` giving its ``fps``;
- motion_tracking_controller: ``obs`` + ``time_step`` -> ``actions``, ``joint_pos``, ``joint_vel``, ``body_pos_w``,
  ``body_quat_w``, ``body_lin_vel_w``, ``body_ang_vel_w`` with CSV metadata (whole_body_tracking cd65172
  ``utils/exporter.py:44-122``);
- holosoma: ``obs`` + ``time_step`` -> ``actions``, ``joint_pos``, ``joint_vel``, ``ref_pos_xyz``, ``ref_quat_xyzw``
  with JSON metadata ``kp``, ``kd``, ``dof_names``, ``robot_urdf`` (holosoma fc600e7
  ``src/holosoma/holosoma/utils/inference_helpers.py:191-243``).
"""

from __future__ import annotations

import json
from pathlib import Path

import mujoco
import numpy as np
import onnx
import yaml
from onnx import TensorProto, helper, numpy_helper

from bcg_deploy.robots import load_robot

SPEC = load_robot("g1")
J = SPEC.num_joints
UNITREE_TERMS = [("motion_command", 58), ("motion_anchor_ori_b", 6), ("base_ang_vel", 3), ("joint_pos_rel", 29),
                 ("joint_vel_rel", 29), ("last_action", 29)]  # fmt: skip
MTC_TERMS = [("command", 58), ("motion_anchor_ori_b", 6), ("base_ang_vel", 3), ("joint_pos", 29), ("joint_vel", 29),
             ("actions", 29)]  # fmt: skip
BIAS = 0.05


def clip(frames: int = 40, fps: float = 50.0) -> dict[str, np.ndarray]:
    """A standing clip: pelvis at 0.79 m turning slowly, joints swaying about the default pose (model order)."""
    t = np.arange(frames) / fps
    jp = SPEC.default_joint_pos[None] + 0.1 * np.sin(2 * np.pi * 0.5 * t[:, None] + np.arange(J)[None])
    jv = np.gradient(jp, 1 / fps, axis=0)
    yaw = 0.3 + 0.2 * t
    quat = np.stack([np.cos(yaw / 2), 0 * yaw, 0 * yaw, np.sin(yaw / 2)], axis=1)
    pos = np.stack([0.1 * t, 0 * t, 0.79 + 0 * t], axis=1)
    m = SPEC.load_model()
    d = mujoco.MjData(m)
    bp, bq = np.zeros((frames, m.nbody - 1, 3)), np.zeros((frames, m.nbody - 1, 4))
    for i in range(frames):
        d.qpos[:3], d.qpos[3:7], d.qpos[7:] = pos[i], quat[i], jp[i]
        mujoco.mj_kinematics(m, d)
        bp[i], bq[i] = d.xpos[1:], d.xquat[1:]
    return {"joint_pos": jp, "joint_vel": jv, "root_pos": pos, "root_quat": quat, "body_pos_w": bp, "body_quat_w": bq}


def _actor(obs_dim: int, seed: int = 0) -> tuple[list, list]:
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((obs_dim, J)) * 0.01).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["obs", "W"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["actions"])]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.full(J, BIAS, np.float32), "b")]
    return nodes, inits


def _tables(nodes: list, inits: list, tables: dict[str, np.ndarray]) -> list:
    t = next(iter(tables.values())).shape[0]
    nodes += [helper.make_node("Cast", ["time_step"], ["ts_i"], to=TensorProto.INT64),
              helper.make_node("Reshape", ["ts_i", "ts_shape"], ["ts_flat"]),
              helper.make_node("Clip", ["ts_flat", "ts_lo", "ts_hi"], ["ts_idx"])]  # fmt: skip
    inits += [numpy_helper.from_array(np.array([1], np.int64), "ts_shape"),
              numpy_helper.from_array(np.array(0, np.int64), "ts_lo"),
              numpy_helper.from_array(np.array(t - 1, np.int64), "ts_hi")]  # fmt: skip
    outs = []
    for k, v in tables.items():
        inits.append(numpy_helper.from_array(np.ascontiguousarray(v, np.float32), f"table_{k}"))
        nodes.append(helper.make_node("Gather", [f"table_{k}", "ts_idx"], [k], axis=0))
        outs.append(helper.make_tensor_value_info(k, TensorProto.FLOAT, [1, *v.shape[1:]]))
    return outs


def _save(path: Path, nodes, inits, inputs, outputs, meta: dict[str, str], opset: int = 13) -> Path:
    graph = helper.make_graph(nodes, "policy", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)
    for k, v in meta.items():
        model.metadata_props.append(onnx.StringStringEntryProto(key=k, value=v))
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def _io(obs_dim: int, time_step: bool = True) -> list:
    ins = [helper.make_tensor_value_info("obs", TensorProto.FLOAT, [1, obs_dim])]
    return ins + ([helper.make_tensor_value_info("time_step", TensorProto.FLOAT, [1, 1])] if time_step else [])


def mtc_onnx(path: Path, frames: int = 40, terms=MTC_TERMS, obs_dim: int | None = None, **meta_over) -> Path:
    """A whole_body_tracking-format policy (CSV metadata at 3 decimals, as its exporter writes)."""
    c = clip(frames)
    bodies = ["pelvis", "torso_link", "left_ankle_roll_link", "right_ankle_roll_link"]
    idx = [SPEC.body_names.index(b) for b in bodies]
    obs_dim = obs_dim or sum(s for _, s in terms)
    nodes, inits = _actor(obs_dim)
    zeros = np.zeros((frames, len(bodies), 3))
    outs = _tables(nodes, inits, {"joint_pos": c["joint_pos"], "joint_vel": c["joint_vel"],
                                  "body_pos_w": c["body_pos_w"][:, idx], "body_quat_w": c["body_quat_w"][:, idx],
                                  "body_lin_vel_w": zeros, "body_ang_vel_w": zeros})  # fmt: skip
    outs.insert(0, helper.make_tensor_value_info("actions", TensorProto.FLOAT, [1, J]))
    f3 = lambda v: ",".join(f"{x:.3f}" for x in v)  # noqa: E731
    meta = {"joint_names": ",".join(SPEC.joint_names), "joint_stiffness": f3(SPEC.kp), "joint_damping": f3(SPEC.kd),
            "default_joint_pos": f3(SPEC.default_joint_pos), "action_scale": f3(SPEC.action_scale),
            "observation_names": ",".join(n for n, _ in terms),
            "observation_history_lengths": ",".join("1" for _ in terms), "command_names": "motion",
            "anchor_body_name": "torso_link", "body_names": ",".join(bodies), "run_path": "t"} | meta_over  # fmt: skip
    return _save(path, nodes, inits, _io(obs_dim), outs, meta)


def urdf_text() -> str:
    """A URDF of the packaged G1's kinematic tree (pelvis the root link), for holosoma's robot_urdf."""
    m = SPEC.load_model()
    links, joints = [], []
    for b in range(1, m.nbody):
        name = m.body(b).name
        mass, inertia = max(float(m.body_mass[b]), 1e-3), np.maximum(m.body_inertia[b], 1e-6)
        links.append(f'<link name="{name}"><inertial><origin xyz="0 0 0"/><mass value="{mass}"/>'
                     f'<inertia ixx="{inertia[0]}" iyy="{inertia[1]}" izz="{inertia[2]}" ixy="0" ixz="0" iyz="0"/>'
                     "</inertial></link>")  # fmt: skip
        if b == 1:
            continue
        r = np.zeros(9)
        mujoco.mju_quat2Mat(r, m.body_quat[b])
        rpy = _rpy(r.reshape(3, 3))
        jid = m.body_jntadr[b]
        xyz = " ".join(repr(float(x)) for x in m.body_pos[b])
        parent = m.body(m.body_parentid[b]).name
        if jid >= 0:
            axis = " ".join(repr(float(x)) for x in m.jnt_axis[jid])
            lo, hi = m.jnt_range[jid]
            joints.append(f'<joint name="{m.joint(jid).name}" type="revolute"><parent link="{parent}"/>'
                          f'<child link="{name}"/><origin xyz="{xyz}" rpy="{rpy}"/><axis xyz="{axis}"/>'
                          f'<limit lower="{lo}" upper="{hi}" effort="100" velocity="30"/></joint>')  # fmt: skip
        else:
            joints.append(f'<joint name="{name}_fixed" type="fixed"><parent link="{parent}"/><child link="{name}"/>'
                          f'<origin xyz="{xyz}" rpy="{rpy}"/></joint>')  # fmt: skip
    return '<?xml version="1.0"?><robot name="g1">' + "".join(links + joints) + "</robot>"


def _rpy(r: np.ndarray) -> str:
    roll = np.arctan2(r[2, 1], r[2, 2])
    pitch = np.arcsin(-np.clip(r[2, 0], -1, 1))
    yaw = np.arctan2(r[1, 0], r[0, 0])
    return f"{float(roll)!r} {float(pitch)!r} {float(yaw)!r}"


def holosoma_onnx(path: Path, frames: int = 40, obs_dim: int = 154, **meta_over) -> Path:
    """A holosoma WBT-format policy (JSON metadata; reference = torso_link pose, quaternion x y z w)."""
    c = clip(frames)
    ti = SPEC.body_names.index("torso_link")
    nodes, inits = _actor(obs_dim)
    outs = _tables(nodes, inits, {"joint_pos": c["joint_pos"], "joint_vel": c["joint_vel"],
                                  "ref_pos_xyz": c["body_pos_w"][:, ti],
                                  "ref_quat_xyzw": c["body_quat_w"][:, ti][:, [1, 2, 3, 0]]})  # fmt: skip
    outs.insert(0, helper.make_tensor_value_info("actions", TensorProto.FLOAT, [1, J]))
    meta = {"dof_names": list(SPEC.joint_names), "kp": SPEC.kp.tolist(), "kd": SPEC.kd.tolist(),
            "command_ranges": None, "robot_urdf": urdf_text()} | meta_over  # fmt: skip
    return _save(path, nodes, inits, _io(obs_dim), outs, {k: json.dumps(v) for k, v in meta.items()}, opset=13)


def unitree_folder(root: Path, stack: str = "unitree_rl_mjlab", frames: int = 40, obs_dim: int | None = None,
                   edit=None, motion_edit=None) -> Path:  # fmt: skip
    """A Unitree Mimic policy folder ``root/policy`` (``edit(doc)`` changes deploy.yaml, ``motion_edit(arrays)``
    the NPZ arrays); unitree_rl_lab: a CSV at 50 fps named with its fps by ``root/config/config.yaml``."""
    folder = root / "config" / "policy" / "mimic" / "policy"
    c = clip(frames)
    n_obs = sum(s for _, s in UNITREE_TERMS)
    nodes, inits = _actor(obs_dim or n_obs)
    out = [helper.make_tensor_value_info("actions", TensorProto.FLOAT, [1, J])]
    _save(folder / "exported" / "policy.onnx", nodes, inits, _io(obs_dim or n_obs, False), out, {}, opset=17)
    f = lambda v: [round(float(x), 4) for x in v]  # noqa: E731
    doc = {"joint_ids_map": list(range(J)), "step_dt": 0.02, "stiffness": f(SPEC.kp), "damping": f(SPEC.kd),
           "default_joint_pos": f(SPEC.default_joint_pos), "commands": {},
           "actions": {"JointPositionAction": {"clip": None, "joint_names": [".*"], "scale": f(SPEC.action_scale),
                                               "offset": f(SPEC.default_joint_pos), "joint_ids": None}},
           "observations": {n: {"params": {"command_name": "motion"} if n.startswith("motion") else {}, "clip": None,
                                "scale": [1.0] * s, "history_length": 1} for n, s in UNITREE_TERMS}}  # fmt: skip
    if edit is not None:
        edit(doc)
    (folder / "params").mkdir(parents=True, exist_ok=True)
    (folder / "params" / "deploy.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    f32 = lambda v: np.asarray(v, np.float32)  # noqa: E731
    if stack == "unitree_rl_mjlab":
        arrays = {"fps": np.array([50]), "joint_pos": f32(c["joint_pos"]), "joint_vel": f32(c["joint_vel"]),
                  "body_pos_w": f32(c["body_pos_w"]), "body_quat_w": f32(c["body_quat_w"])}  # fmt: skip
        if motion_edit is not None:
            motion_edit(arrays)
        np.savez(folder / "params" / "motion.npz", **arrays)
        motion, state = "motion.npz", {}
    else:
        rows = np.concatenate([c["root_pos"], c["root_quat"][:, [1, 2, 3, 0]], c["joint_pos"]], axis=1)
        if motion_edit is not None:
            rows = motion_edit(rows)
        np.savetxt(folder / "params" / "motion.csv", rows, delimiter=",", fmt="%.6f")
        motion, state = "motion.csv", {"fps": 50}
    state |= {"motion_file": f"config/policy/mimic/policy/params/{motion}", "policy_dir": "config/policy/mimic/policy/"}
    (root / "config" / "config.yaml").write_text(yaml.safe_dump({"FSM": {"Mimic_Test": state}}))
    return folder
