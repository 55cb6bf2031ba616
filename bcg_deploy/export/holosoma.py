"""The export for holosoma's whole-body-tracking inference (``bcgd export run.pt --profile holosoma``).

What holosoma binds, read at amazon-far/holosoma fc600e7 (paths under ``src/holosoma_inference/
holosoma_inference/``; the trainer's exporter under ``src/holosoma/holosoma/``):

- Metadata: ``json.loads`` on EVERY ``metadata_props`` value, failing hard on any that is not JSON
  (``policies/wbt.py:175-178``, ``policies/base.py:363-366``); it reads ``robot_urdf`` (required, asserted:
  ``wbt.py:181-182``), URDF text from which it builds a pinocchio model with a free flyer after stripping
  visual and collision elements (``wbt.py:28-75``): the revolute joints must be exactly its ``dof_names``
  (``wbt.py:36-43``) and the reference body ``torso_link`` a frame (``wbt.py:46``); and ``kp`` / ``kd``
  (``wbt.py:184-185``), lists of ``num_motors`` = 29 values (``base.py:388-432``). Its own exporter also writes
  ``dof_names``, ``command_ranges`` (null for tracking) and ``robot_urdf_path``
  (``holosoma/agents/ppo/ppo.py:623-630``, ``holosoma/utils/inference_helpers.py:230-251``).
- Graph: inputs ``obs`` [1, 154] and ``time_step`` [1, 1] float32 (``wbt.py:193-201,304``); outputs read by
  name: ``joint_pos``, ``joint_vel``, ``ref_quat_xyzw`` at setup (``wbt.py:201``) and ``actions``,
  ``joint_pos``, ``joint_vel``, ``ref_quat_xyzw`` every step (``wbt.py:210-215``); its exporter's full list is
  ``actions, joint_pos, joint_vel, ref_pos_xyz, ref_quat_xyzw`` (``inference_helpers.py:190-216``: the clip's
  joint positions and velocities and the reference body's world position and x y z w quaternion at
  ``min(time_step, T - 1)``, opset 13). The next observation's ``motion_command`` is the ``joint_pos``,
  ``joint_vel`` outputs of the previous call (``wbt.py:204-205,305``), ``motion_ref_ori_b`` uses
  ``ref_quat_xyzw`` (``wbt.py:268-277``).
- Action: ``q_target = default_dof_angles + policy_action_scale * clip(actions, -100, 100)`` with both
  constants from its config (``base.py:596``, ``wbt.py:307-312``): the G1 default pose and 1.0 for tracking,
  the profile's pins (``profiles/declarations.py``). Nothing in the ONNX changes them.

So the graph is: obs -> folded normaliser -> ``tanh(actor mean)`` (``actions``; |a| < 1 keeps holosoma's
+-100 clip inactive, and the target is the training target default + 1.0 x a), plus the clip's tables at the
clamped time step: ``joint_pos``, ``joint_vel`` (rad, rad/s, joint order) and the torso_link (anchor) pose
``ref_pos_xyz`` (m, world) and ``ref_quat_xyzw`` (x y z w: converted from our w x y z here, at the file
boundary). Static shapes, opset 13 (holosoma's own). Metadata: holosoma's keys (``dof_names``, ``kp``,
``kd``, ``command_ranges`` null, ``robot_urdf`` = our G1 URDF, ``robots/urdf.py``) and our ``bcgd.*`` keys,
every value JSON.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch
from torch import nn

from bcg_deploy.errors import BcgdError
from bcg_deploy.export.deploy import Consumer, check_profile, load_actor
from bcg_deploy.export.graph import FoldedNormalizer
from bcg_deploy.export.metadata import bcgd_keys
from bcg_deploy.observations.profile import ProfileObservation
from bcg_deploy.profiles import ObsProfile, raw_noise
from bcg_deploy.robots import RobotSpec
from bcg_deploy.robots.urdf import read_urdf
from bcg_deploy.training.networks import Actor

PROFILE = "holosoma"
OPSET = 13
OUTPUTS = ("actions", "joint_pos", "joint_vel", "ref_pos_xyz", "ref_quat_xyzw")
CONSUMER = Consumer(PROFILE, "holosoma WholeBodyTrackingPolicy", ("obs", "time_step"), OUTPUTS, False, OPSET)


def _floats(x: Any) -> list[float]:
    return [float(v) for v in np.asarray(x, dtype=np.float64).ravel()]


class HolosomaPolicy(nn.Module):
    """obs [1, 154], time_step [1, 1] -> actions [1, 29], joint_pos [1, 29], joint_vel [1, 29],
    ref_pos_xyz [1, 3], ref_quat_xyzw [1, 4] (the reference tables at the truncated, clamped time step)."""

    def __init__(self, normalizer: FoldedNormalizer, actor: Actor, obs_module: ProfileObservation) -> None:
        super().__init__()
        self.normalizer = normalizer
        self.actor = actor
        self.num_frames = obs_module.num_frames
        anchor = obs_module.anchor_index
        quat = obs_module.ref_body_quat_w[:, anchor]  # w x y z
        f32 = lambda t: t.detach().to(torch.float32).clone()  # noqa: E731
        self.register_buffer("table_joint_pos", f32(obs_module.ref_joint_pos))
        self.register_buffer("table_joint_vel", f32(obs_module.ref_joint_vel))
        self.register_buffer("table_ref_pos_xyz", f32(obs_module.ref_body_pos_w[:, anchor]))
        self.register_buffer("table_ref_quat_xyzw", f32(torch.cat((quat[:, 1:4], quat[:, :1]), dim=-1)))

    def forward(self, obs: torch.Tensor, time_step: torch.Tensor):
        action = self.actor.deterministic(self.normalizer(obs))
        idx = torch.clamp(time_step.long().reshape(-1), 0, self.num_frames - 1)  # [1]
        return (action, self.table_joint_pos[idx], self.table_joint_vel[idx], self.table_ref_pos_xyz[idx],
                self.table_ref_quat_xyzw[idx])  # fmt: skip


def check_pins(robot: RobotSpec, profile: ObsProfile) -> None:
    """The checkpoint's default pose and action scale must be the ones holosoma applies (the profile's pins)."""
    pose_ok = np.array_equal(robot.default_joint_pos, np.asarray(profile.default_joint_pos, dtype=np.float64))
    if not pose_ok or not np.all(robot.action_scale == profile.action_scale):
        raise BcgdError(
            f"--profile {profile.name}: the checkpoint was trained with another default pose or action scale than "
            f"the ones holosoma applies from its own config (its G1 default_dof_angles, scale {profile.action_scale:g})"
            f"; train with `bcgd train --obs {profile.name}`"
        )


def build_policy(ckpt: dict, robot: RobotSpec, profile: ObsProfile) -> tuple[HolosomaPolicy, ProfileObservation]:
    """The exported module and the training observation module of a holosoma-profile checkpoint."""
    check_profile(ckpt, profile)
    check_pins(robot, profile)
    if robot.urdf_path is None:
        raise BcgdError(f"--profile {profile.name}: robot {robot.name} has no URDF (holosoma requires robot_urdf)")
    obs_module = ProfileObservation(robot, ckpt["motion_arrays"], profile, dtype=torch.float64)
    norm, actor = load_actor(ckpt, robot, profile)
    return HolosomaPolicy(norm, actor, obs_module).eval(), obs_module


def io_rows(obs_dim: int, num_joints: int, anchor: str) -> dict[str, list]:
    """Names, static shapes, frames and units of the graph's inputs and outputs."""
    table = {
        "obs": ([1, obs_dim], "un-normalised observation, layout bcgd.observation (built by holosoma)", "mixed"),
        "time_step": ([1, 1], "control step index t into the clip (float, truncated, clamped)", "step"),
        "actions": ([1, num_joints], "tanh(actor mean); holosoma applies default_dof_angles + 1.0 * actions", "1"),
        "joint_pos": ([1, num_joints], "reference at t, joint_names order", "rad"),
        "joint_vel": ([1, num_joints], "reference at t, joint_names order", "rad/s"),
        "ref_pos_xyz": ([1, 3], f"reference {anchor} position at t, world", "m"),
        "ref_quat_xyzw": ([1, 4], f"reference {anchor} orientation at t, world, x y z w", "1"),
    }

    def rows(names):
        return [{"name": n, "shape": table[n][0], "dtype": "float32", "frame": table[n][1], "units": table[n][2]}
                for n in names]  # fmt: skip

    return {"inputs": rows(CONSUMER.inputs), "outputs": rows(CONSUMER.outputs)}


def metadata(ckpt: dict, robot: RobotSpec, profile: ObsProfile, parity: dict, opset: int, run_path: str) -> dict:
    """``metadata_props``: holosoma's keys and the ``bcgd.*`` keys, every value JSON (holosoma json.loads all)."""
    action = {
        "offset": _floats(robot.default_joint_pos),
        "scale": _floats(robot.action_scale),
        "clip": None,
        "formula": "actions = tanh(actor_mean(normalise(obs))); holosoma computes joint_pos_target = "
        "default_dof_angles + policy_action_scale * clip(actions, -100, 100) from its own config (G1 default pose, "
        "1.0 for tracking) = offset + scale * actions, the training target",
    }
    extra = {
        "profile": profile.name,
        "signature": "obs",
        "consumer": CONSUMER.stack,
        "anchor_body": profile.anchor_body,
        "observation": profile.spec(),
        "input_noise": raw_noise(profile),
        "run_path": run_path,
    }
    io = io_rows(profile.obs_dim, robot.num_joints, str(profile.anchor_body))
    ours = {
        "dof_names": list(robot.joint_names),
        "kp": _floats(robot.kp),
        "kd": _floats(robot.kd),
        "command_ranges": None,
        "robot_urdf": read_urdf(robot.urdf_path),
    }
    meta = {k: json.dumps(v) for k, v in ours.items()} | bcgd_keys(ckpt, robot, parity, opset, io, action, extra)
    for v in meta.values():  # what holosoma does first with the file: nothing here may make it fail
        json.loads(v)
    return meta
