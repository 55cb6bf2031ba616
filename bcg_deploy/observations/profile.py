"""The actor observation of a deployable profile (``bcg_deploy.profiles``) as a torch module for training.

``ProfileObservation(robot, motion_arrays, profile)`` mirrors ``ObservationModule``'s interface (``obs_dim``,
``terms``, ``spec()``, ``noise_vector``, ``kinematics``, ``reference_frame``, the ``ref_*`` clip buffers) and
adds the previous action: ``forward(q, qd, time_step, last_action) -> obs [B, obs_dim]``. The signals come
from this module's torch forward kinematics of ``q`` (pelvis and anchor body poses) and the clip at the
CURRENT frame ``time_step`` (clamped; ``max(time_step - lag, 0)`` for a profile whose consumer hands the reference
``reference_lag`` steps late), with the reference in the training world (the robot starts on the
clip, as in whole_body_tracking's training); the maths is ``profiles.terms.compute``, the same function
sim2sim evaluates on MuJoCo's state.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from bcg_deploy.observations.kinematics import Kinematics
from bcg_deploy.observations.paper import FRAME_ARRAYS, ObservationModule, motion_array
from bcg_deploy.profiles import ObsProfile, get_profile
from bcg_deploy.profiles.terms import compute
from bcg_deploy.robots import RobotSpec
from bcg_deploy.rotations.quat_torch import quat_to_mat


class ProfileObservation(nn.Module):
    """Raw state + previous action + baked clip -> a deployable profile's observation (module docstring)."""

    def __init__(
        self, robot: RobotSpec, motion_arrays: Any, profile: str | ObsProfile, dtype: torch.dtype = torch.float32
    ) -> None:
        super().__init__()
        self.profile = get_profile(profile) if isinstance(profile, str) else profile
        if not self.profile.deployable:
            raise ValueError("the paper profile is training's ObservationModule")
        self.kinematics = Kinematics(robot, torch.float64)
        self.terms = self.profile.terms
        self.obs_dim = self.profile.obs_dim
        if robot.num_joints != 29:
            raise ValueError(f"profile {self.profile.name} is declared for 29 joints, robot has {robot.num_joints}")
        self.anchor_index = robot.body_names.index(self.profile.anchor_body)
        arr = {k: motion_array(motion_arrays, k) for k in FRAME_ARRAYS}
        missing = [k for k, v in arr.items() if v is None]
        if missing:
            raise ValueError(f"motion arrays lack {', '.join(missing)}")
        self.num_frames = int(arr["joint_pos"].shape[0])
        for k in FRAME_ARRAYS:
            self.register_buffer(f"ref_{k}", arr[k])
        quat = arr["body_quat_w"][:, self.anchor_index]
        self.register_buffer("ref_anchor_pos", arr["body_pos_w"][:, self.anchor_index].clone())
        self.register_buffer("ref_anchor_mat", quat_to_mat(quat / quat.norm(dim=-1, keepdim=True)))
        self.register_buffer("default_joint_pos", torch.as_tensor(np.asarray(robot.default_joint_pos, np.float64)))
        noise = torch.cat([torch.full((t.size,), t.noise, dtype=torch.float64) for t in self.terms])
        self.register_buffer("noise_vector", noise)
        self.to(dtype)

    def spec(self) -> list[dict[str, Any]]:
        return self.profile.spec()

    def _index(self, time_step: torch.Tensor, lag: int = 0) -> torch.Tensor:
        return (time_step.reshape(-1).to(torch.long) - lag).clamp(0, self.num_frames - 1)

    def forward(
        self,
        q: torch.Tensor,
        qd: torch.Tensor,
        time_step: torch.Tensor,
        last_action: torch.Tensor,
        transforms: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Observation [B, obs_dim] (noise-free) of the state (q, qd) at reference frame ``time_step``;
        ``transforms``: the world body transforms of ``q`` [B, NB, 4, 4] if the caller has them."""
        a = self.kinematics.transforms(q) if transforms is None else transforms  # [B, NB, 4, 4] world
        idx = self._index(time_step, self.profile.reference_lag)
        signals = {
            "base_mat_w": a[:, 0, :3, :3],
            "base_lin_vel_w": qd[:, 0:3],
            "base_ang_vel_b": qd[:, 3:6],
            "joint_pos": q[:, 7:],
            "joint_vel": qd[:, 6:],
            "default_joint_pos": self.default_joint_pos,
            "anchor_pos_w": a[:, self.anchor_index, :3, 3],
            "anchor_mat_w": a[:, self.anchor_index, :3, :3],
            "motion_anchor_pos_w": self.ref_anchor_pos[idx],
            "motion_anchor_mat_w": self.ref_anchor_mat[idx],
            "motion_joint_pos": self.ref_joint_pos[idx],
            "motion_joint_vel": self.ref_joint_vel[idx],
            "last_action": last_action.to(q.dtype),
        }
        return compute(self.profile, signals)

    add_noise = ObservationModule.add_noise  # obs + U(-n, n) per entry, n = noise_vector

    def reference_frame(self, time_step: torch.Tensor) -> dict[str, torch.Tensor]:
        """The clip at the clamped current frame t (w-first quaternions)."""
        idx = self._index(time_step)
        return {k: getattr(self, f"ref_{k}")[idx] for k in FRAME_ARRAYS}


class PrivilegedObservation(nn.Module):
    """The critic's observation for a deployable actor: the paper's 849 noise-free values (root height,
    heading-frame velocities, body rotations, key points, the reference at t+1..t+3) and the previous
    action, ``forward(q, qd, time_step, last_action, transforms=None) -> [B, 849 + J]``."""

    def __init__(self, robot: RobotSpec, motion_arrays: Any, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.paper = ObservationModule(robot, motion_arrays, dtype=dtype)
        self.obs_dim = self.paper.obs_dim + robot.num_joints

    def forward(
        self,
        q: torch.Tensor,
        qd: torch.Tensor,
        time_step: torch.Tensor,
        last_action: torch.Tensor,
        transforms: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return torch.cat((self.paper(q, qd, time_step, transforms=transforms), last_action.to(q.dtype)), dim=-1)


def make_observation(robot: RobotSpec, motion_arrays: Any, profile: str, dtype: torch.dtype) -> nn.Module:
    """The actor observation module of ``profile`` (``paper``: ``ObservationModule``)."""
    if get_profile(profile).deployable:
        return ProfileObservation(robot, motion_arrays, profile, dtype)
    return ObservationModule(robot, motion_arrays, dtype=dtype)
