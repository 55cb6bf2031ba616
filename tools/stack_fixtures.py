"""Policies in the formats of the two stacks that ship no released G1-29 tracking policy, assembled from released
files (for ``bcgd verify`` / ``bcgd sim2sim``; written outside the repository):

- ``lab FOLDER OUT``: a unitree_rl_lab g1_29dof Mimic layout (``config/config.yaml`` FSM entry with ``motion_file``
  and ``fps``, ``config/policy/mimic/<name>/exported/policy.onnx`` + ``params/deploy.yaml``, the CSV motion) from a
  unitree_rl_mjlab Mimic folder (the same State_Mimic contract; unitree_rl_lab 4711dee's State_Mimic reads a CSV) and
  the LAFAN1 G1 CSV it was made from (``--csv``, ``--fps``).
- ``wbt FOLDER OUT.onnx``: an ONNX as mjlab's tracking exporter writes it (unitree_rl_mjlab 5b7e396
  ``mjlab/tasks/tracking/rl/exporter.py:27-120``, ``mjlab/rl/exporter_utils.py``: inputs ``obs`` + ``time_step``, the
  clip as constant tables gathered at the clamped step, CSV metadata at 3 decimals) around a unitree_rl_mjlab Mimic
  folder's actor and its motion NPZ; motion_tracking_controller runs it.

Usage::

    python tools/stack_fixtures.py lab DIR/dance1_subject2 OUT --csv dance1_subject2.csv --fps 30
    python tools/stack_fixtures.py wbt DIR/dance1_subject2 OUT/policy.onnx
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
import onnx
import yaml
from onnx import TensorProto, helper, numpy_helper

from bcg_deploy.errors import BcgdError, run_script
from bcg_deploy.robots import load_robot
from bcg_deploy.stacks import inspect
from bcg_deploy.stacks.unitree import MJLAB

MJLAB_TERMS = {"motion_command": "command", "motion_anchor_ori_b": "motion_anchor_ori_b",
               "base_ang_vel": "base_ang_vel", "joint_pos_rel": "joint_pos", "joint_vel_rel": "joint_vel",
               "last_action": "actions"}  # fmt: skip
"""deploy.yaml term -> mjlab's tracking policy-group name (mjlab/tasks/tracking/tracking_env_cfg.py:46-79)."""
BODIES = ("pelvis", "left_hip_roll_link", "left_knee_link", "left_ankle_roll_link", "right_hip_roll_link",
          "right_knee_link", "right_ankle_roll_link", "torso_link", "left_shoulder_roll_link", "left_elbow_link",
          "left_wrist_yaw_link", "right_shoulder_roll_link", "right_elbow_link", "right_wrist_yaw_link")  # fmt: skip
"""mjlab/tasks/tracking/config/g1/env_cfgs.py:41-56 (motion body_names)."""


def _source(folder: Path):
    ins = inspect(folder, MJLAB)
    if not ins.ok:
        raise BcgdError(f"{folder}: not a unitree_rl_mjlab Mimic folder ({ins.findings.mismatches[0]})")
    return ins.files


def lab(folder: Path, out: Path, csv: Path, fps: float) -> None:
    src = _source(folder)
    name = folder.resolve().name
    pol = out / "config" / "policy" / "mimic" / name
    (pol / "exported").mkdir(parents=True, exist_ok=True)
    (pol / "params").mkdir(parents=True, exist_ok=True)
    for f in (folder / "exported").iterdir():
        shutil.copy2(f, pol / "exported" / f.name)
    shutil.copy2(folder / "params" / "deploy.yaml", pol / "params" / "deploy.yaml")
    shutil.copy2(csv, pol / "params" / csv.name)
    state = f"Mimic_{name}"
    cfg = {"FSM": {"_": {state: {"id": 101, "type": "Mimic"}},
                   state: {"fps": fps, "motion_file": f"config/policy/mimic/{name}/params/{csv.name}",
                           "policy_dir": f"config/policy/mimic/{name}/", "time_start": src.time_start}}}  # fmt: skip
    (out / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    print(f"wrote {pol} and {out / 'config' / 'config.yaml'} (fps {fps:g})")


def _csv3(values) -> str:
    return ",".join(f"{float(v):.3f}" if isinstance(v, (int, float, np.floating)) else str(v) for v in values)


def wbt(folder: Path, out: Path) -> None:
    src = _source(folder)
    spec = load_robot("g1")
    actor = onnx.load(str(folder / "exported" / "policy.onnx"))  # weights from policy.onnx.data
    g = actor.graph
    z = np.load(src.motion_path)
    idx = [spec.body_names.index(b) for b in BODIES]  # the NPZ's bodies are the G1's, pelvis first
    tables = {"joint_pos": z["joint_pos"], "joint_vel": z["joint_vel"], "body_pos_w": z["body_pos_w"][:, idx],
              "body_quat_w": z["body_quat_w"][:, idx], "body_lin_vel_w": z["body_lin_vel_w"][:, idx],
              "body_ang_vel_w": z["body_ang_vel_w"][:, idx]}  # fmt: skip
    t = z["joint_pos"].shape[0]
    act_out = g.output[0].name
    nodes = list(g.node)
    nodes.append(helper.make_node("Cast", ["time_step"], ["ts_i"], to=TensorProto.INT64))
    nodes.append(helper.make_node("Reshape", ["ts_i", "ts_shape"], ["ts_flat"]))
    nodes.append(helper.make_node("Clip", ["ts_flat", "ts_lo", "ts_hi"], ["ts_idx"]))
    inits = list(g.initializer) + [numpy_helper.from_array(np.array([1], np.int64), "ts_shape"),
                                   numpy_helper.from_array(np.array(0, np.int64), "ts_lo"),
                                   numpy_helper.from_array(np.array(t - 1, np.int64), "ts_hi")]  # fmt: skip
    outputs = [helper.make_tensor_value_info("actions", TensorProto.FLOAT, [1, 29])]
    if act_out != "actions":
        nodes.append(helper.make_node("Identity", [act_out], ["actions"]))
    for k, v in tables.items():
        inits.append(numpy_helper.from_array(np.ascontiguousarray(v, np.float32), f"table_{k}"))
        nodes.append(helper.make_node("Gather", [f"table_{k}", "ts_idx"], [k], axis=0))
        outputs.append(helper.make_tensor_value_info(k, TensorProto.FLOAT, [1, *v.shape[1:]]))
    inputs = list(g.input) + [helper.make_tensor_value_info("time_step", TensorProto.FLOAT, [1, 1])]
    graph = helper.make_graph(nodes, "mjlab_tracking_policy", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=list(actor.opset_import), ir_version=actor.ir_version)
    kp = np.asarray(src.kp)
    meta = {"run_path": f"assembled from {folder.name}", "joint_names": _csv3(spec.joint_names),
            "joint_stiffness": _csv3(kp), "joint_damping": _csv3(src.kd),
            "default_joint_pos": _csv3(src.default), "command_names": "motion",
            "observation_names": _csv3([MJLAB_TERMS[t.name] for t in src.terms]),
            "action_scale": _csv3(src.scale), "anchor_body_name": "torso_link",
            "body_names": _csv3(BODIES)}  # fmt: skip
    for k, v in meta.items():
        model.metadata_props.append(onnx.StringStringEntryProto(key=k, value=v))
    onnx.checker.check_model(model)
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out))
    print(f"wrote {out}: {t} frames, {len(BODIES)} bodies, opset {model.opset_import[0].version}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    a_lab = sub.add_parser("lab")
    a_lab.add_argument("folder", type=Path)
    a_lab.add_argument("out", type=Path)
    a_lab.add_argument("--csv", type=Path, required=True)
    a_lab.add_argument("--fps", type=float, default=30.0)
    a_wbt = sub.add_parser("wbt")
    a_wbt.add_argument("folder", type=Path)
    a_wbt.add_argument("out", type=Path)
    a = ap.parse_args()
    if a.what == "lab":
        lab(a.folder, a.out, a.csv, a.fps)
    else:
        wbt(a.folder, a.out)


if __name__ == "__main__":
    run_script(main)
