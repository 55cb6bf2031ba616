"""The Motion contract: a reference clip at the control rate, on our robot model.

Frames and units: world frame, z up, metres, radians, seconds; quaternions w x y z. Body arrays
are indexed by MuJoCo body id - 1 (``RobotSpec.body_names`` order; index 0 is the pelvis/root).
Joint arrays are in ``RobotSpec.joint_names`` order.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from bcg_deploy.rotations import quat_numpy as Q

# The per-frame arrays of a Motion, in declaration order (checkpoints and exports store exactly these).
ARRAY_FIELDS = (
    "root_pos",
    "root_quat",
    "joint_pos",
    "joint_vel",
    "root_lin_vel",
    "root_ang_vel",
    "body_pos_w",
    "body_quat_w",
    "body_lin_vel_w",
    "body_ang_vel_w",
)


class Sampled:
    """What a clip sampled at ``fps`` knows of its length, from its ``root_pos`` [T, ...]."""

    @property
    def num_frames(self) -> int:
        return int(self.root_pos.shape[0])

    @property
    def duration(self) -> float:
        """Seconds from the first to the last frame."""
        return (self.num_frames - 1) / self.fps


@dataclass(frozen=True, eq=False, kw_only=True)
class Motion(Sampled):
    """A reference motion sampled at ``fps`` (50 Hz, the control rate); T frames. The one container for a
    clip everywhere: the loaders' pipeline, training, checkpoints, the baked clip sim2sim reads back.

    Attributes:
        name: clip name (``dance``, or the file stem).
        source: provenance, JSON-serialisable: ``kind`` (``lafan1`` | ``builtin`` | ``csv`` | ``policy`` |
            ``motion_file`` | ``states``), ``file``, ``sha256``, ``start_s``, ``duration_s`` and anything else
            that identifies it.
        fps: frames per second of the arrays below.
        root_pos: [T, 3] pelvis position, world.
        root_quat: [T, 4] pelvis orientation, w x y z, world.
        joint_pos: [T, J] hinge angles.
        joint_vel: [T, J] hinge rates.
        root_lin_vel: [T, 3] pelvis linear velocity, world frame.
        root_ang_vel: [T, 3] pelvis angular velocity, world frame.
        body_pos_w: [T, NB, 3] body origin positions, world.
        body_quat_w: [T, NB, 4] body orientations, w x y z, world.
        body_lin_vel_w: [T, NB, 3] body origin linear velocities, world.
        body_ang_vel_w: [T, NB, 3] body angular velocities, world.

    The body arrays come from forward kinematics on our model (``build.motion_from_track``); they are None
    only inside the loading pipeline, for the generalized trajectory before that step (``resample``).
    """

    name: str = ""
    source: dict = field(default_factory=dict)
    fps: float
    root_pos: np.ndarray
    root_quat: np.ndarray
    joint_pos: np.ndarray
    joint_vel: np.ndarray
    root_lin_vel: np.ndarray
    root_ang_vel: np.ndarray
    body_pos_w: np.ndarray | None = None
    body_quat_w: np.ndarray | None = None
    body_lin_vel_w: np.ndarray | None = None
    body_ang_vel_w: np.ndarray | None = None
    extras: dict = field(default_factory=dict)

    @classmethod
    def from_bodies(
        cls,
        fps: float,
        joint_pos: np.ndarray,
        joint_vel: np.ndarray,
        body_pos_w: np.ndarray,
        body_quat_w: np.ndarray,
        body_lin_vel_w: np.ndarray,
        body_ang_vel_w: np.ndarray,
        name: str = "",
        source: dict | None = None,
    ) -> Motion:
        """A Motion whose root is body 0 (the pelvis) of the body arrays: a clip known by its bodies only (the
        one baked into an exported policy, a motion NPZ, states replayed through MuJoCo's kinematics)."""
        return cls(
            name=name,
            source=dict(source or {}),
            fps=float(fps),
            root_pos=body_pos_w[:, 0],
            root_quat=body_quat_w[:, 0],
            joint_pos=joint_pos,
            joint_vel=joint_vel,
            root_lin_vel=body_lin_vel_w[:, 0],
            root_ang_vel=body_ang_vel_w[:, 0],
            body_pos_w=body_pos_w,
            body_quat_w=body_quat_w,
            body_lin_vel_w=body_lin_vel_w,
            body_ang_vel_w=body_ang_vel_w,
        )

    @property
    def dt(self) -> float:
        return 1.0 / self.fps

    def qpos(self) -> np.ndarray:
        """MuJoCo generalized positions [T, 7 + J]: root position, root quaternion (wxyz), joints."""
        return np.concatenate([self.root_pos, self.root_quat, self.joint_pos], axis=-1)

    def qvel(self) -> np.ndarray:
        """MuJoCo generalized velocities [T, 6 + J]: root linear velocity (WORLD frame), root angular
        velocity (BODY frame, the free-joint convention), joint rates."""
        ang_local = Q.rotate_inverse(self.root_quat, self.root_ang_vel)
        return np.concatenate([self.root_lin_vel, ang_local, self.joint_vel], axis=-1)

    def truncated(self, num_frames: int) -> Motion:
        """The first ``num_frames`` frames (at least 2, at most all)."""
        n = max(2, min(num_frames, self.num_frames))
        return replace(self, **{k: getattr(self, k)[:n] for k in ARRAY_FIELDS if getattr(self, k) is not None})

    def identity(self) -> dict:
        """What a checkpoint or ONNX records to name this clip (name + source)."""
        return {"name": self.name, **self.source}
