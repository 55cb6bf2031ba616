"""The deploy side of an ``obs``-signature policy: sim2sim builds the observation itself, as the stack will.

For a policy exported with a deployable profile (``bcgd export --profile beyondmimic|beyondmimic_wose|
unitree``), ``ObsContract`` turns the sensed MuJoCo state (the raw inputs, after any noise or latency)
into the observation named by the metadata's ``observation_names``, with the maths of
``bcg_deploy.profiles.terms`` (the function training used) and the consumer's own conventions:

- the robot anchor: ``beyondmimic``: the torso_link frame by forward kinematics (pinocchio ``oMf`` in
  motion_tracking_controller ``src/MotionCommand.cpp:51``); ``unitree``: pelvis orientation times the
  waist yaw, roll, pitch rotations (unitree_rl_mjlab ``deploy/robots/g1/src/State_Mimic.cpp:10-25``);
- the reference anchor and its alignment at the start: ``beyondmimic``: the reference torso pose moved by
  the yaw-and-position transform that puts the start frame's anchor on the robot's
  (``MotionCommand.cpp:37-42``); ``unitree``: the reference pelvis orientation times the reference waist
  rotations (``State_Mimic.cpp:27-38``), turned by yaw(robot anchor) yaw(reference pelvis)^T
  (``State_Mimic.cpp:163-165``);
- the reference frame of control step k is frame k (start frame 0), the previous action is the policy's
  last output, and the joint target is ``default_joint_pos + action_scale * actions`` (the stack's formula).
"""

from __future__ import annotations

import mujoco
import numpy as np
import torch

from bcg_deploy.errors import BcgdError
from bcg_deploy.motions.motion import Motion
from bcg_deploy.profiles import PROFILES, ObsProfile
from bcg_deploy.profiles.terms import align_reference, compute
from bcg_deploy.rotations import quat_numpy as Q

_WAIST = ("waist_yaw_joint", "waist_roll_joint", "waist_pitch_joint")
CONVENTION = {"beyondmimic": "beyondmimic", "beyondmimic_wose": "beyondmimic", "unitree": "unitree"}


def profile_for_names(names: tuple[str, ...], declared: str | None, where: str) -> ObsProfile:
    """The deployable profile whose terms are exactly ``names`` (the metadata's observation_names)."""
    cands = [p for p in PROFILES.values() if p.deployable and p.term_names == names]
    if declared in PROFILES and PROFILES[declared].term_names == names:
        return PROFILES[declared]
    if cands:
        return cands[0]
    known = sorted({n for p in PROFILES.values() if p.deployable for n in p.term_names})
    bad = [n for n in names if n not in known]
    if bad:
        raise BcgdError(f"{where}: observation term {bad[0]!r} cannot be built by sim2sim; known: {', '.join(known)}")
    raise BcgdError(f"{where}: observation_names {','.join(names)} match no deployable profile's order")


def _mat(quat: np.ndarray) -> np.ndarray:
    return Q.to_matrix_mujoco(quat, normalize=True)  # MuJoCo's rounding, as its xmat


def _t(x: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x, np.float64))[None]


class ObsContract:
    """Observation builder for one run (``reset`` at the start, then ``observation`` every control step)."""

    def __init__(
        self,
        profile: ObsProfile,
        model: mujoco.MjModel,
        reference: Motion,
        joint_names: tuple[str, ...],
        body_names: tuple[str, ...],
        default_joint_pos: np.ndarray,
    ) -> None:
        self.profile = profile
        self.convention = CONVENTION[profile.name]
        self.ref = reference
        self.default = torch.as_tensor(np.asarray(default_joint_pos, np.float64))
        self._m = model
        self._d = mujoco.MjData(model)
        self.anchor_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, profile.anchor_body)
        if self.anchor_id < 0:
            raise BcgdError(f"the model has no body {profile.anchor_body!r} (the policy's anchor)")
        self.ref_anchor = body_names.index(profile.anchor_body)
        self.waist = [joint_names.index(n) for n in _WAIST]
        self.align_r, self.align_p = np.eye(3), np.zeros(3)

    def _robot_anchor(self, qpos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.convention == "unitree":
            return qpos[:3].copy(), self._waist_chain(_mat(qpos[3:7]), qpos[7:])
        self._d.qpos[:] = qpos
        mujoco.mj_kinematics(self._m, self._d)
        return self._d.xpos[self.anchor_id].copy(), self._d.xmat[self.anchor_id].reshape(3, 3).copy()

    def _waist_chain(self, root: np.ndarray, joints: np.ndarray) -> np.ndarray:
        yaw, roll, pitch = (joints[i] for i in self.waist)
        return root @ Q.axis_rotation(2, yaw) @ Q.axis_rotation(0, roll) @ Q.axis_rotation(1, pitch)

    def _ref_anchor(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        k = min(k, self.ref.num_frames - 1)
        if self.convention == "unitree":
            return self.ref.body_pos_w[k, 0], self._waist_chain(_mat(self.ref.body_quat_w[k, 0]), self.ref.joint_pos[k])
        return self.ref.body_pos_w[k, self.ref_anchor], _mat(self.ref.body_quat_w[k, self.ref_anchor])

    def reset(self, qpos: np.ndarray) -> None:
        """Align the reference to the robot at the start, as the consumer does."""
        p, r = self._robot_anchor(qpos)
        if self.convention == "unitree":
            ref_root = _mat(self.ref.body_quat_w[0, 0])
            rr, _ = align_reference(_t(p), _t(r), _t(p), _t(ref_root))
            self.align_r, self.align_p = rr[0].numpy(), np.zeros(3)
        else:
            rp, rm = self._ref_anchor(0)
            rr, pp = align_reference(_t(p), _t(r), _t(rp), _t(rm))
            self.align_r, self.align_p = rr[0].numpy(), pp[0].numpy()

    def observation(self, k: int, qpos: np.ndarray, qvel: np.ndarray, last_action: np.ndarray) -> np.ndarray:
        """The observation [1, obs_dim] float32 of the sensed state at control step ``k``."""
        p, r = self._robot_anchor(qpos)
        rp, rm = self._ref_anchor(k)
        kk = min(k, self.ref.num_frames - 1)
        signals = {
            "base_mat_w": _t(_mat(qpos[3:7])),
            "base_lin_vel_w": _t(qvel[:3]),
            "base_ang_vel_b": _t(qvel[3:6]),
            "joint_pos": _t(qpos[7:]),
            "joint_vel": _t(qvel[6:]),
            "default_joint_pos": self.default,
            "anchor_pos_w": _t(p),
            "anchor_mat_w": _t(r),
            "motion_anchor_pos_w": _t(self.align_r @ rp + self.align_p),
            "motion_anchor_mat_w": _t(self.align_r @ rm),
            "motion_joint_pos": _t(self.ref.joint_pos[kk]),
            "motion_joint_vel": _t(self.ref.joint_vel[kk]),
            "last_action": _t(last_action),
        }
        return compute(self.profile, signals).numpy().astype(np.float32)
