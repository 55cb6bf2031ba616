"""ONNX ``metadata_props`` of an exported policy: the ``bcgd.*`` JSON keys and the BeyondMimic CSV keys.

Numbers are written at full precision: CSV values with ``repr(float)`` (shortest round-trip form),
JSON values with ``json.dumps`` (also round-trip). See ``bcg_deploy.export`` for the key list.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime
import torch

import bcg_deploy
from bcg_deploy.export.graph import Signature, input_names, output_names
from bcg_deploy.observations.paper import raw_input_noise
from bcg_deploy.robots import RobotSpec

EXPORTER_VERSION = f"bcg-deploy {bcg_deploy.__version__} (export format 1)"
ANCHOR_BODY = "pelvis"  # every robot-relative observation term is anchored on the root (pelvis)
COMMAND_NAME = "motion"


def csv(values: Sequence[Any]) -> str:
    """Comma-separated values; floats as ``repr`` (full precision)."""
    out = []
    for v in values:
        out.append(repr(float(v)) if isinstance(v, (float, np.floating)) else str(v))
    return ",".join(out)


def float_list(x: Any) -> list[float]:
    """``x`` flattened to plain Python floats (JSON metadata)."""
    return [float(v) for v in np.asarray(x, dtype=np.float64).ravel()]


def _get(cfg: dict, dotted: str, default: Any = None) -> Any:
    cur: Any = cfg
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return default
        cur = cur[part]
    return cur


def obs_noise_scale(cfg: dict) -> float:
    """The multiple of ``bcgd.input_noise`` the actor's inputs carried in training (0 with the noise off)."""
    if not _get(cfg, "env.obs_noise", True):
        return 0.0
    return float(_get(cfg, "env.obs_noise_scale", 1.0))


def timing(cfg: dict, motion_fps: float) -> dict[str, Any]:
    """physics_dt, substeps, control_dt (s) from the training config (recorded, or derived)."""
    physics_dt = _get(cfg, "sim.physics_dt")
    substeps = _get(cfg, "sim.substeps")
    control_dt = _get(cfg, "sim.control_dt")
    if control_dt is None and physics_dt is not None and substeps is not None:
        control_dt = float(physics_dt) * int(substeps)
    if control_dt is None:
        control_dt = 1.0 / float(motion_fps)
    return {
        "physics_dt": None if physics_dt is None else float(physics_dt),
        "substeps": None if substeps is None else int(substeps),
        "control_dt": float(control_dt),
    }


def _range(v: Any) -> list[float] | None:
    """(lo, hi) from a pair or a symmetric half-width."""
    if v is None:
        return None
    if isinstance(v, (int, float)):
        return [-abs(float(v)), abs(float(v))]
    return [float(x) for x in v]


def domain_randomization(cfg: dict) -> dict[str, Any]:
    """The training DR ranges under the names sim2sim reads ({} when the config records none)."""
    dr = _get(cfg, "domain_rand")
    if not isinstance(dr, dict):
        return {}
    names = {
        "friction": "friction",
        "base_mass_add_kg": "base_mass_add",
        "link_mass_scale": "link_mass_scale",
        "com_offset_m": "link_com_offset",
        "kp_scale": "kp_scale",
        "kd_scale": "kd_scale",
        "armature_scale": "armature_scale",
        "joint_friction_scale": "joint_friction_scale",
        "joint_offset_rad": "default_joint_offset",
        "action_latency_steps": "action_latency",
    }
    out: dict[str, Any] = {"enabled": bool(dr.get("enabled", True))}
    for ours, theirs in names.items():
        if theirs in dr:
            out[ours] = _range(dr[theirs])
    if "torso_com_offset" in dr:
        out["torso_com_offset_m"] = [float(x) for x in dr["torso_com_offset"]]
        out["torso_body"] = str(dr.get("torso_body", "torso_link"))
    for k in ("reset_pos", "reset_rot", "reset_joint", "reset_scale"):
        if k in dr:
            out[k] = dr[k]
    return out


def push_schedule(cfg: dict) -> dict[str, Any]:
    dr = _get(cfg, "domain_rand")
    if not isinstance(dr, dict) or "push_interval_s" not in dr:
        return {}
    return {
        "enabled": bool(dr.get("enabled", True)),
        "interval_s": [float(x) for x in dr["push_interval_s"]],
        "lin_vel": [float(x) for x in dr.get("push_lin_vel", ())],
        "ang_vel": [float(x) for x in dr.get("push_ang_vel", ())],
    }


def io_description(signature: Signature, num_joints: int, num_bodies: int, obs_dim: int) -> dict[str, list]:
    """Names, shapes, frames and units of the graph's inputs and outputs."""
    j, nb = num_joints, num_bodies
    ins = {
        "base_pos": (["batch", 3], "world", "m"),
        "base_quat": (["batch", 4], "world, w x y z", "1"),
        "base_lin_vel": (["batch", 3], "world (MuJoCo free joint qvel[0:3])", "m/s"),
        "base_ang_vel": (["batch", 3], "base/body frame (MuJoCo free joint qvel[3:6])", "rad/s"),
        "joint_pos": (["batch", j], "joint_names order", "rad"),
        "joint_vel": (["batch", j], "joint_names order", "rad/s"),
        "obs": (["batch", obs_dim], "un-normalised observation, layout bcgd.observation", "mixed"),
        "time_step": (["batch", 1], "control step index t into the clip (float, truncated, clamped)", "step"),
    }
    ref = {
        "joint_pos": (["batch", j], "reference at t, joint_names order", "rad"),
        "joint_vel": (["batch", j], "reference at t, joint_names order", "rad/s"),
        "body_pos_w": (["batch", nb, 3], "reference at t, world, body_names order", "m"),
        "body_quat_w": (["batch", nb, 4], "reference at t, world, w x y z", "1"),
        "body_lin_vel_w": (["batch", nb, 3], "reference at t, world", "m/s"),
        "body_ang_vel_w": (["batch", nb, 3], "reference at t, world", "rad/s"),
    }
    outs = {
        "actions": (["batch", j], "tanh(actor mean), in (-1, 1)", "1"),
        "joint_pos_target": (["batch", j], "clip(default_joint_pos + action_scale * actions, joint range)", "rad"),
    }
    for name in output_names(signature)[2:]:
        outs[name] = ref[name.removeprefix("ref_")]

    def rows(table: dict, names: Sequence[str]) -> list[dict]:
        return [
            {"name": n, "shape": table[n][0], "dtype": "float32", "frame": table[n][1], "units": table[n][2]}
            for n in names
        ]

    return {"inputs": rows(ins, input_names(signature)), "outputs": rows(outs, output_names(signature))}


def build_metadata(
    ckpt: dict,
    robot: RobotSpec,
    signature: Signature,
    parity: dict,
    opset: int,
    run_path: str,
) -> dict[str, str]:
    """All ``metadata_props`` (string values) of a paper-profile (raw or obs signature) export."""
    spec = ckpt["observation"]
    obs_dim = sum(int(t["size"]) for t in spec)
    io = io_description(signature, robot.num_joints, len(robot.body_names), obs_dim)
    action = {
        "offset": float_list(robot.default_joint_pos),
        "scale": float_list(robot.action_scale),
        "clip": [-1.0, 1.0],
        "joint_pos_target_clip": {"lo": float_list(robot.joint_range[:, 0]), "hi": float_list(robot.joint_range[:, 1])},
        "formula": "actions = tanh(actor_mean(normalise(obs))); "
        "joint_pos_target = clip(offset + scale * actions, lo, hi)",
    }
    extra = {"profile": "paper", "signature": signature, "input_noise": raw_input_noise(spec)}
    meta = bcgd_keys(ckpt, robot, parity, opset, io, action, extra)
    return meta | csv_keys(spec, robot, run_path, ANCHOR_BODY)


def bcgd_keys(ckpt: dict, robot: RobotSpec, parity: dict, opset: int, io: dict, action: dict, extra: dict) -> dict:
    """The ``bcgd.*`` keys (JSON values) every export carries; ``extra`` adds or overrides some."""
    cfg = ckpt["config"] if isinstance(ckpt["config"], dict) else {}
    tm = timing(cfg, float(ckpt["motion_arrays"]["fps"]))
    bundling = _get(cfg, "bcg", {})
    ours: dict[str, Any] = {
        "control_dt": tm["control_dt"],
        "physics_dt": tm["physics_dt"],
        "substeps": tm["substeps"],
        "effort_limit": float_list(robot.effort_limit),
        "velocity_limit": float_list(robot.velocity_limit),
        "armature": float_list(robot.armature),
        "quat_order": "wxyz",
        "inputs": io["inputs"],
        "outputs": io["outputs"],
        "observation": ckpt["observation"],
        "action": action,
        "robot": robot.identity(),
        "motion": dict(ckpt["motion"]),
        "training": {
            "kappa": _get(cfg, "sim.kappa"),
            "bundling": bundling if isinstance(bundling, dict) else {},
            "iterations": int(ckpt["iteration"]),
            "iterations_planned": _get(cfg, "runner.iterations"),
            "num_envs": _get(cfg, "env.num_envs"),
            "seed": _get(cfg, "runner.seed"),
            "obs_noise_scale": obs_noise_scale(cfg),
            "physics_dt": tm["physics_dt"],
            "substeps": tm["substeps"],
        },
        "domain_randomization": domain_randomization(cfg),
        "push": push_schedule(cfg),
        "exporter_version": EXPORTER_VERSION,
        "opset": int(opset),
        "parity": parity,
        "versions": {"torch": torch.__version__, "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__},
    } | extra
    return {f"bcgd.{k}": json.dumps(_finite(v)) for k, v in ours.items()}


def csv_keys(spec: list[dict], robot: RobotSpec, run_path: str, anchor_body: str) -> dict[str, str]:
    """The BeyondMimic / mjlab keys of the observation ``spec``, comma-separated at full precision
    (whole_body_tracking ``utils/exporter.py`` ``attach_onnx_metadata``)."""
    return {
        "joint_names": csv(robot.joint_names),
        "joint_stiffness": csv(float_list(robot.kp)),
        "joint_damping": csv(float_list(robot.kd)),
        "default_joint_pos": csv(float_list(robot.default_joint_pos)),
        "action_scale": csv(float_list(robot.action_scale)),
        "observation_names": csv([t["name"] for t in spec]),
        "observation_history_lengths": csv([int(t.get("history", 1)) for t in spec]),
        "command_names": COMMAND_NAME,
        "anchor_body_name": anchor_body,
        "body_names": csv(robot.body_names),
        "run_path": run_path,
    }


def _finite(v: Any) -> Any:
    """JSON has no NaN/Inf: write them as strings (they only appear in a failed parity record)."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v
