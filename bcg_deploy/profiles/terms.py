"""The term maths of the deployable profiles, defined once (torch; batch-first; any float dtype).

``compute(profile, signals)`` returns the observation [B, profile.obs_dim] in the profile's order.
``signals`` (a mapping of tensors; world frame z up; rotation matrices map body -> world):

| key | shape | meaning |
|---|---|---|
| ``base_mat_w`` | [B, 3, 3] | pelvis orientation |
| ``base_lin_vel_w`` | [B, 3] | pelvis linear velocity, world, m/s |
| ``base_ang_vel_b`` | [B, 3] | pelvis angular velocity, pelvis frame, rad/s |
| ``joint_pos``, ``joint_vel`` | [B, J] | rad, rad/s |
| ``default_joint_pos`` | [J] | rad |
| ``anchor_pos_w``, ``anchor_mat_w`` | [B, 3], [B, 3, 3] | the robot's anchor body (torso_link) |
| ``motion_anchor_pos_w``, ``motion_anchor_mat_w`` | [B, 3], [B, 3, 3] | reference anchor, frame t, robot's world |
| ``motion_joint_pos``, ``motion_joint_vel`` | [B, J] | the reference joints at frame t |
| ``last_action`` | [B, J] | the previous action in (-1, 1) |

Only the signals the profile's quantities read are needed. Training passes forward-kinematics values
(differentiable); sim2sim passes MuJoCo's (``xpos``/``xmat`` of the bodies, ``qvel``), with the
reference aligned to the robot as the consumer aligns it (``align_reference``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from bcg_deploy.profiles.declarations import ObsProfile
from bcg_deploy.rotations.quat_torch import heading_rot, mat_to_6d_rows

Signals = Mapping[str, torch.Tensor]


def _mv_t(m: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """m^T v for [B, 3, 3] and [B, 3]."""
    return (m.transpose(-1, -2) @ v[..., None])[..., 0]


QUANTITIES: dict[str, Callable[[Signals], torch.Tensor]] = {
    "motion_command": lambda s: torch.cat((s["motion_joint_pos"], s["motion_joint_vel"]), dim=-1),
    "motion_anchor_pos_b": lambda s: _mv_t(s["anchor_mat_w"], s["motion_anchor_pos_w"] - s["anchor_pos_w"]),
    "motion_anchor_ori_b": lambda s: mat_to_6d_rows(s["anchor_mat_w"].transpose(-1, -2) @ s["motion_anchor_mat_w"]),
    "base_lin_vel_b": lambda s: _mv_t(s["base_mat_w"], s["base_lin_vel_w"]),
    "base_ang_vel_b": lambda s: s["base_ang_vel_b"],
    "joint_pos_rel": lambda s: s["joint_pos"] - s["default_joint_pos"],
    "joint_vel_rel": lambda s: s["joint_vel"],
    "last_action": lambda s: s["last_action"],
}


def compute(profile: ObsProfile, signals: Signals) -> torch.Tensor:
    """The observation [B, obs_dim] of a deployable ``profile`` from ``signals`` (module docstring)."""
    if not profile.deployable:
        raise ValueError("the paper profile is computed by training's ObservationModule (raw-state ONNX)")
    return torch.cat([QUANTITIES[t.quantity](signals) for t in profile.terms], dim=-1)


def align_reference(
    robot_pos: torch.Tensor, robot_mat: torch.Tensor, ref_pos: torch.Tensor, ref_mat: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """World <- motion transform (R, p) that puts the reference anchor of the start frame onto the robot's
    anchor in position and yaw (motion_tracking_controller ``MotionCommandTerm::reset``): R = yaw(R_robot)
    yaw(R_ref)^T, p = p_robot - R p_ref. Apply as ``R @ x + p`` to reference positions, ``R @ M`` to
    rotations."""
    r = heading_rot(robot_mat) @ heading_rot(ref_mat).transpose(-1, -2)
    return r, robot_pos - (r @ ref_pos[..., None])[..., 0]
