"""The Motion contract: a reference clip at the control rate, on our robot model.

Frames and units: world frame, z up, metres, radians, seconds; quaternions w x y z. Body arrays
are indexed by MuJoCo body id - 1 (``RobotSpec.body_names`` order; index 0 is the pelvis/root).
Joint arrays are in ``RobotSpec.joint_names`` order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


@dataclass(frozen=True, eq=False)
class Motion:
    """A reference motion sampled at ``fps`` (50 Hz, the control rate); T frames.

    Attributes:
        name: clip name (``dance``, or the file stem).
        source: provenance, JSON-serialisable: ``kind`` (``lafan1`` | ``builtin`` | ``csv``),
            ``file``, ``sha256``, ``start_s``, ``duration_s`` and anything else that identifies it.
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
    """

    name: str
    source: dict
    fps: float
    root_pos: np.ndarray
    root_quat: np.ndarray
    joint_pos: np.ndarray
    joint_vel: np.ndarray
    root_lin_vel: np.ndarray
    root_ang_vel: np.ndarray
    body_pos_w: np.ndarray
    body_quat_w: np.ndarray
    body_lin_vel_w: np.ndarray
    body_ang_vel_w: np.ndarray
    extras: dict = field(default_factory=dict)

    @property
    def num_frames(self) -> int:
        return int(self.root_pos.shape[0])

    @property
    def duration(self) -> float:
        """Seconds from the first to the last frame."""
        return (self.num_frames - 1) / self.fps

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

    def identity(self) -> dict:
        """What a checkpoint or ONNX records to name this clip (name + source)."""
        return {"name": self.name, **self.source}
