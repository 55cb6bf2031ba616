"""Exports for the deploy stacks: exactly what each one binds (``bcgd export run.pt --profile NAME``).

A deployable profile's policy is the flat observation (the consumer builds it on board, by term name)
-> folded normaliser -> deterministic actor ``actions = tanh(mean)``. The stack itself computes the joint
target ``default_joint_pos + action_scale * actions`` (no clip), which is exactly the training target
(``env.step``), so the graph holds no target and no clipping. Shapes are static (batch 1), opset 11.

- ``beyondmimic``, ``beyondmimic_wose`` (motion_tracking_controller): inputs ``obs`` [1, N], ``time_step``
  [1, 1]; outputs ``actions``, ``joint_pos``, ``joint_vel``, ``body_pos_w``, ``body_quat_w`` (w first),
  ``body_lin_vel_w``, ``body_ang_vel_w`` (the clip at the clamped time step); CSV metadata keys at full
  precision, anchor torso_link; no side file.
- ``unitree`` (unitree_rl_mjlab's G1 State_Mimic): input ``obs`` [1, 154]; output ``actions`` (the first
  and only one); ``params/deploy.yaml`` and ``params/<motion>.npz`` beside the ``exported/`` folder.

What each consumer reads, with the lines, is in ``tests/export/test_replica_*.py``. Every file also
carries the ``bcgd.*`` JSON keys (``bcgd.signature = "obs"``, ``bcgd.profile``, ``bcgd.observation``),
which sim2sim uses to build the same observation from the MuJoCo state.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import torch
import yaml
from torch import nn

from bcg_deploy.errors import BcgdError
from bcg_deploy.export.graph import REF_KEYS, FoldedNormalizer, trace_module
from bcg_deploy.export.metadata import bcgd_keys, csv_keys, float_list
from bcg_deploy.observations.profile import ProfileObservation
from bcg_deploy.profiles import ObsProfile, get_profile, profile_of_config, raw_noise
from bcg_deploy.robots import RobotSpec
from bcg_deploy.training.networks import Actor
from bcg_deploy.training.normalizer import RunningNormalizer

DEPLOY_OPSET = 11
COMMAND_NAME = "motion"


@dataclass(frozen=True)
class Consumer:
    """The binding of one deploy stack."""

    profile: str
    stack: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    side_files: bool  # deploy.yaml + motion NPZ + motion CSV and FSM entry (unitree layout)
    opset: int = DEPLOY_OPSET


_BM_OUT = ("actions",) + REF_KEYS
CONSUMERS = {
    "beyondmimic": Consumer("beyondmimic", "motion_tracking_controller", ("obs", "time_step"), _BM_OUT, False),
    "beyondmimic_wose": Consumer(
        "beyondmimic_wose", "motion_tracking_controller", ("obs", "time_step"), _BM_OUT, False
    ),
    "unitree": Consumer("unitree", "unitree_rl_mjlab State_Mimic", ("obs",), ("actions",), True),
}


class DeployPolicy(nn.Module):
    """obs [1, N] (+ time_step [1, 1]) -> actions [1, J] (+ the clip's frame at the clamped time step)."""

    def __init__(self, normalizer: FoldedNormalizer, actor: Actor, obs_module: ProfileObservation | None) -> None:
        super().__init__()
        self.normalizer = normalizer
        self.actor = actor
        self.obs_dim = actor.obs_dim
        self.with_reference = obs_module is not None
        if obs_module is not None:
            self.num_frames = obs_module.num_frames
            for k in REF_KEYS:
                self.register_buffer(f"table_{k}", getattr(obs_module, f"ref_{k}").to(torch.float32).clone())

    def forward(self, obs: torch.Tensor, time_step: torch.Tensor | None = None):
        action = self.actor.deterministic(self.normalizer(obs))
        if not self.with_reference:
            return (action,)
        idx = torch.clamp(time_step.long().reshape(-1), 0, self.num_frames - 1)  # [1]
        return (action,) + tuple(getattr(self, f"table_{k}")[idx] for k in REF_KEYS)


def check_profile(ckpt: dict, profile: ObsProfile) -> None:
    """The checkpoint's actor must have been trained on ``profile``'s terms (same maths, same order)."""
    trained = get_profile(profile_of_config(ckpt["config"]))
    want = [(t.quantity, t.size) for t in profile.terms]
    have = [(t.get("quantity", ""), int(t["size"])) for t in ckpt["observation"]]
    if have != want:
        lacking = [t.name for t in profile.terms if (t.quantity, t.size) not in have]
        what = f"lacks {', '.join(lacking)}" if lacking else "orders them differently"
        raise BcgdError(
            f"--profile {profile.name}: the checkpoint's actor was trained on the {trained.name} observation, which "
            f"{what}; train with `bcgd train --obs {profile.name}`"
        )


def build_deploy_policy(ckpt: dict, robot: RobotSpec, profile: ObsProfile) -> tuple[DeployPolicy, ProfileObservation]:
    """The exported module of a deployable profile and the training observation module of its checkpoint."""
    check_profile(ckpt, profile)
    obs_module = ProfileObservation(robot, ckpt["motion_arrays"], profile, dtype=torch.float64)
    norm, actor = load_actor(ckpt, robot, profile)
    ref = obs_module if "time_step" in CONSUMERS[profile.name].inputs else None
    return DeployPolicy(norm, actor, ref).eval(), obs_module


def load_actor(ckpt: dict, robot: RobotSpec, profile: ObsProfile) -> tuple[FoldedNormalizer, Actor]:
    """The checkpoint's folded observation normaliser and float32 actor, checked against the profile's sizes."""
    try:
        actor = Actor.from_state_dict(ckpt["actor"]).float().eval()
        f = RunningNormalizer.from_state_dict(ckpt["obs_normalizer"]).folded()
    except (KeyError, RuntimeError, IndexError) as exc:
        raise BcgdError(f"checkpoint actor/obs_normalizer do not load: {str(exc).splitlines()[0][:160]}") from None
    if actor.obs_dim != profile.obs_dim or f["mean"].numel() != profile.obs_dim or actor.act_dim != robot.num_joints:
        raise BcgdError(
            f"checkpoint actor is {actor.obs_dim}->{actor.act_dim}; profile {profile.name} needs "
            f"{profile.obs_dim}->{robot.num_joints}"
        )
    return FoldedNormalizer(f["mean"], f["std"], float(f["clip"])), actor


def trace_static(module: nn.Module, consumer: Consumer, obs_dim: int) -> onnx.ModelProto:
    """Trace ``module`` with static [1, ...] shapes at the consumer's opset (11 for the C++ runners)."""
    args: tuple = (torch.zeros(1, obs_dim),) + ((torch.zeros(1, 1),) if "time_step" in consumer.inputs else ())
    names_in, names_out = list(consumer.inputs), list(consumer.outputs)
    return trace_module(module, args, names_in, names_out, opset=consumer.opset, dynamic_batch=False)


def parity_feeds(
    obs_module: ProfileObservation, q: np.ndarray, qd: np.ndarray, t: np.ndarray, consumer: Consumer, seed: int
) -> list[tuple[torch.Tensor, ...]]:
    """Batch-1 input tuples: the profile's observation of each state with a random previous action and
    the training noise (float32)."""
    gen = torch.Generator().manual_seed(seed)
    n = q.shape[0]
    last = 2.0 * torch.rand(n, obs_module.default_joint_pos.numel(), generator=gen, dtype=torch.float64) - 1.0
    with torch.no_grad():
        obs = obs_module(torch.as_tensor(q), torch.as_tensor(qd), torch.as_tensor(t), last)
        obs = obs_module.add_noise(obs, gen).float()
    ts = torch.as_tensor(np.floor(t), dtype=torch.float32).reshape(-1, 1)
    if "time_step" in consumer.inputs:
        return [(obs[i : i + 1], ts[i : i + 1]) for i in range(n)]
    return [(obs[i : i + 1],) for i in range(n)]


def io_rows(consumer: Consumer, obs_dim: int, num_joints: int, num_bodies: int) -> dict[str, list]:
    """Names, static shapes, frames and units of the deploy graph's inputs and outputs."""
    j, nb = num_joints, num_bodies
    table = {
        "obs": ([1, obs_dim], "un-normalised observation, layout bcgd.observation (built by the stack)", "mixed"),
        "time_step": ([1, 1], "control step index t into the clip (float, truncated, clamped)", "step"),
        "actions": ([1, j], "tanh(actor mean); the stack applies default_joint_pos + action_scale * actions", "1"),
        "joint_pos": ([1, j], "reference at t, joint_names order", "rad"),
        "joint_vel": ([1, j], "reference at t, joint_names order", "rad/s"),
        "body_pos_w": ([1, nb, 3], "reference at t, world, body_names order", "m"),
        "body_quat_w": ([1, nb, 4], "reference at t, world, w x y z", "1"),
        "body_lin_vel_w": ([1, nb, 3], "reference at t, world", "m/s"),
        "body_ang_vel_w": ([1, nb, 3], "reference at t, world", "rad/s"),
    }

    def rows(names):
        return [{"name": n, "shape": table[n][0], "dtype": "float32", "frame": table[n][1], "units": table[n][2]}
                for n in names]  # fmt: skip

    return {"inputs": rows(consumer.inputs), "outputs": rows(consumer.outputs)}


def motion_npz(ckpt: dict) -> bytes:
    """unitree_rl_mjlab's motion file: float32 ``body_pos_w`` [T, NB, 3] (body 0 = pelvis), ``body_quat_w``
    [T, NB, 4] w x y z, ``joint_pos`` / ``joint_vel`` [T, J] at the control rate, plus ``fps``."""
    a = ckpt["motion_arrays"]

    def f32(k):
        v = a[k]
        return np.ascontiguousarray(np.asarray(v.detach().cpu() if isinstance(v, torch.Tensor) else v, np.float32))

    buf = io.BytesIO()
    arrays = {k: f32(k) for k in ("body_pos_w", "body_quat_w", "joint_pos", "joint_vel", "body_lin_vel_w",
                                  "body_ang_vel_w")}  # fmt: skip
    np.savez(buf, fps=np.array([float(a["fps"])], np.float32), **arrays)
    return buf.getvalue()


def unitree_deploy_yaml(robot: RobotSpec, profile: ObsProfile, control_dt: float) -> str:
    """unitree_rl_mjlab's ``params/deploy.yaml`` (joint order = the G1 SDK motor order = ours)."""
    j = robot.num_joints
    floats = lambda x: [float(v) for v in np.asarray(x, np.float64).ravel()]  # noqa: E731
    doc = {
        "joint_ids_map": list(range(j)),
        "step_dt": float(control_dt),
        "stiffness": floats(robot.kp),
        "damping": floats(robot.kd),
        "default_joint_pos": floats(robot.default_joint_pos),
        "commands": {},
        "actions": {
            "JointPositionAction": {
                "clip": None,
                "joint_names": [".*"],
                "scale": floats(robot.action_scale),
                "offset": floats(robot.default_joint_pos),
                "joint_ids": None,
            }
        },
        "observations": {
            t.name: {
                "params": {"command_name": COMMAND_NAME} if t.quantity.startswith("motion_") else {},
                "clip": None,
                "scale": [1.0] * t.size,
                "history_length": t.history,
            }
            for t in profile.terms
        },
    }
    head = "# unitree_rl_mjlab deploy parameters written by bcgd export (joint order = the G1 SDK motor order)\n"
    return head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None)


def side_file_paths(out: Path, motion_name: str) -> dict[str, Path]:
    """unitree layout: ``<policy_dir>/exported/policy.onnx`` beside ``<policy_dir>/params/``; an ``-o`` not in
    an ``exported`` folder gets ``params/`` in its own folder."""
    out = Path(out)
    root = out.parent.parent if out.parent.name == "exported" else out.parent
    return {"deploy_yaml": root / "params" / "deploy.yaml", "motion_npz": root / "params" / f"{motion_name}.npz"}


def deploy_metadata(
    ckpt: dict, robot: RobotSpec, profile: ObsProfile, parity: dict, opset: int, run_path: str
) -> dict[str, str]:
    """``metadata_props`` of a deploy export: the ``bcgd.*`` JSON keys and the CSV keys of the profile."""
    consumer = CONSUMERS[profile.name]
    spec = profile.spec()
    io_ = io_rows(consumer, profile.obs_dim, robot.num_joints, len(robot.body_names))
    action = {
        "offset": float_list(robot.default_joint_pos),
        "scale": float_list(robot.action_scale),
        "clip": None,
        "formula": "actions = tanh(actor_mean(normalise(obs))); the stack computes "
        "joint_pos_target = offset + scale * actions (no clip), the training target",
    }
    extra = {
        "profile": profile.name,
        "signature": "obs",
        "consumer": consumer.stack,
        "anchor_body": profile.anchor_body,
        "observation": spec,
        "input_noise": raw_noise(profile),
    }
    meta = bcgd_keys(ckpt, robot, parity, opset, io_, action, extra)
    return meta | csv_keys(spec, robot, run_path, profile.anchor_body)
