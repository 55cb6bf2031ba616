"""RobotSpec: the one place where joint order, default pose, gains and limits live.

Everything is read from the compiled MJCF (the same file both simulators load), plus the few
robot facts MJCF has no field for (velocity limits, stored in the MJCF's ``<custom>`` block) and
the task-level choices of the robot's constants module (key bodies, action-scale recipe).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import mujoco
import numpy as np

from bcg_deploy.fileio import file_sha256


@dataclass(frozen=True)
class ContactPoint:
    """A foot contact sphere: ``pos`` (m) is in the ``body`` frame; ``radius`` in m."""

    body: str
    pos: tuple[float, float, float]
    radius: float


@dataclass(frozen=True)
class KeyPoint:
    """A tracked point: ``offset`` (m) in the ``body`` frame (zero for the body origin)."""

    name: str
    body: str
    offset: tuple[float, float, float] = (0.0, 0.0, 0.0)


@dataclass(frozen=True, eq=False)
class RobotSpec:
    """Frozen description of a robot; arrays are float64 in ``joint_names`` order.

    Units: rad, rad/s, N m, N m/rad, N m s/rad, kg m^2, kg. ``mjcf_path`` is the robot file;
    ``scene_path`` adds the floor and lights. ``model_hash`` is the sha256 of the robot file.
    ``urdf_path``: the same model as URDF (kinematics and inertia; ``robots/urdf.py``), for consumers that
    build their kinematics from a URDF; None when the robot has none.
    """

    name: str
    mjcf_path: Path
    scene_path: Path
    model_hash: str
    joint_names: tuple[str, ...]
    body_names: tuple[str, ...]
    default_root_pos: np.ndarray
    default_joint_pos: np.ndarray
    joint_range: np.ndarray
    kp: np.ndarray
    kd: np.ndarray
    effort_limit: np.ndarray
    velocity_limit: np.ndarray
    armature: np.ndarray
    action_scale: np.ndarray
    foot_bodies: tuple[str, ...]
    foot_contact_points: tuple[ContactPoint, ...]
    key_bodies: tuple[KeyPoint, ...]
    total_mass: float
    extras: dict = field(default_factory=dict)
    urdf_path: Path | None = None

    @property
    def num_joints(self) -> int:
        return len(self.joint_names)

    def load_model(self, scene: bool = True) -> mujoco.MjModel:
        """Compile the MJCF (with floor and lights when ``scene``) into a fresh ``MjModel``."""
        return mujoco.MjModel.from_xml_path(str(self.scene_path if scene else self.mjcf_path))

    def with_action_scale(self, scale: float | np.ndarray | None) -> RobotSpec:
        """This robot with ``scale`` (rad; one number for every joint, or one per joint) as its action scale;
        ``None``: unchanged."""
        if scale is None:
            return self
        arr = np.broadcast_to(np.asarray(scale, dtype=np.float64), (self.num_joints,)).copy()
        if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
            raise ValueError(f"action scale must be positive and finite, got {scale}")
        return replace(self, action_scale=arr)

    def with_default_pose(self, pose: np.ndarray | tuple[float, ...]) -> RobotSpec:
        """This robot with ``pose`` (rad, ``joint_names`` order) as the default pose the actions are added to."""
        arr = np.asarray(pose, dtype=np.float64).reshape(-1).copy()
        if arr.shape != (self.num_joints,) or not np.all(np.isfinite(arr)):
            raise ValueError(f"default pose must be {self.num_joints} finite angles, got {np.size(pose)} values")
        return replace(self, default_joint_pos=arr)

    def identity(self) -> dict:
        """What a checkpoint or ONNX records to name this robot: name and model hash."""
        return {"name": self.name, "model_hash": self.model_hash}

    def summary(self) -> dict:
        """Sizes, mass, and every joint's gains and limits as plain values (``bcgd robot info``; JSON)."""
        m = self.load_model(scene=False)
        return {
            "name": self.name,
            "mjcf": str(self.mjcf_path),
            "model_hash": self.model_hash,
            "nq": m.nq,
            "nv": m.nv,
            "nu": m.nu,
            "nbody": m.nbody - 1,
            "total_mass": self.total_mass,
            "joints": [
                {
                    "name": n,
                    "default": float(self.default_joint_pos[i]),
                    "range": self.joint_range[i].tolist(),
                    "kp": float(self.kp[i]),
                    "kd": float(self.kd[i]),
                    "effort_limit": float(self.effort_limit[i]),
                    "velocity_limit": float(self.velocity_limit[i]),
                    "armature": float(self.armature[i]),
                    "action_scale": float(self.action_scale[i]),
                }
                for i, n in enumerate(self.joint_names)
            ],
            "foot_contact_points": [
                {"body": c.body, "pos": list(c.pos), "radius": c.radius} for c in self.foot_contact_points
            ],
            "key_bodies": [{"name": k.name, "body": k.body, "offset": list(k.offset)} for k in self.key_bodies],
        }


def spec_from_mjcf(
    name: str,
    mjcf_path: Path,
    scene_path: Path,
    foot_bodies: tuple[str, ...],
    key_bodies: tuple[KeyPoint, ...],
    action_scale_fraction: float,
) -> RobotSpec:
    """Build a RobotSpec from a robot MJCF with one position actuator per hinge.

    Foot contact spheres are the geoms of class ``foot_contact`` (named ``*_foot_contact_*``);
    action scale = ``action_scale_fraction * effort_limit / kp`` (the deployed trackers' recipe).
    """
    m = mujoco.MjModel.from_xml_path(str(mjcf_path))
    hinge_ids = [j for j in range(m.njnt) if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE]
    joint_names = tuple(m.joint(j).name for j in hinge_ids)
    act_joint = [m.joint(int(m.actuator_trnid[a, 0])).name for a in range(m.nu)]
    if act_joint != list(joint_names):
        raise ValueError(f"{mjcf_path}: actuators must drive the hinges in MJCF order, got {act_joint}")
    key = m.key("home")
    dof = m.jnt_dofadr[hinge_ids]
    kp = m.actuator_gainprm[:, 0].copy()
    kd = -m.actuator_biasprm[:, 2].copy()
    effort = m.actuator_forcerange[:, 1].copy()
    vel_id = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_NUMERIC, "velocity_limit")
    adr, n = m.numeric_adr[vel_id], m.numeric_size[vel_id]
    contacts = []
    for g in range(m.ngeom):
        gname = m.geom(g).name
        if "foot_contact" in gname:
            contacts.append(
                ContactPoint(
                    m.body(int(m.geom_bodyid[g])).name, tuple(m.geom_pos[g].tolist()), float(m.geom_size[g, 0])
                )
            )
    return RobotSpec(
        name=name,
        mjcf_path=Path(mjcf_path),
        scene_path=Path(scene_path),
        model_hash=file_sha256(mjcf_path, "an MJCF file"),
        joint_names=joint_names,
        body_names=tuple(m.body(b).name for b in range(1, m.nbody)),
        default_root_pos=key.qpos[:3].copy(),
        default_joint_pos=key.qpos[7:].copy(),
        joint_range=m.jnt_range[hinge_ids].copy(),
        kp=kp,
        kd=kd,
        effort_limit=effort,
        velocity_limit=m.numeric_data[adr : adr + n].copy(),
        armature=m.dof_armature[dof].copy(),
        action_scale=action_scale_fraction * effort / kp,
        foot_bodies=foot_bodies,
        foot_contact_points=tuple(contacts),
        key_bodies=key_bodies,
        total_mass=float(m.body_mass.sum()),
    )
