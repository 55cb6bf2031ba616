"""Our robot's URDF, authored from the same physical facts as its MJCF (``tools/author_g1_mjcf.py`` writes both).

Some deploy stacks build their kinematics from a URDF (holosoma's whole-body-tracking inference builds a
pinocchio model from the ``robot_urdf`` text of the ONNX and reads the reference body's orientation from
it), so a policy exported for them carries the URDF of the robot it was trained on. It is written with
``xml.etree.ElementTree`` from the facts file (``../shared/reference/g1_29dof.json``: bodies, joints,
actuators) and must describe exactly the model of our MJCF (``tests/robots/test_urdf.py`` compiles both
with MuJoCo and compares bodies, joints, inertias, forward kinematics and mass matrices).

Conventions (URDF, in SI units: m, kg, kg m^2, rad, N m, rad/s):
- one link per facts body, named as the MJCF body; one ``revolute`` joint per hinge, named as the MJCF joint,
  in the facts' (= the MJCF's) hinge order. The root link (pelvis) has no parent joint: the consumer adds
  its free flyer. A URDF joint sits at its child link's origin; every facts hinge has ``pos = 0``, so each
  link frame is the MJCF body frame (authoring refuses a hinge with an offset).
- joint ``origin``: the child body's ``pos`` and its quaternion as fixed-axis roll-pitch-yaw
  (R = Rz(yaw) Ry(pitch) Rx(roll), the URDF definition); ``axis``: the hinge axis in the joint frame;
  ``limit``: the range and the actuator's effort and velocity limits.
- ``inertial``: origin at the centre of mass with rpy 0 and the full inertia tensor in the link frame,
  R diag(principal) R^T with R from the facts' principal-axes quaternion (no Euler angles of inertia frames,
  some of which are near gimbal lock).
- no visual or collision geometry (the consumers that read this text use it for kinematics; holosoma strips
  both before building its model: ``policies/wbt.py:59-75``); armature and PD gains have no URDF element
  and travel in the exported file's own keys.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bcg_deploy.errors import BcgdError


def quat_to_matrix(q: Sequence[float]) -> np.ndarray:
    """Rotation matrix [3, 3] of the quaternion ``q`` (w x y z, normalised here)."""
    w, x, y, z = np.asarray(q, dtype=np.float64) / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def matrix_to_rpy(r: np.ndarray) -> tuple[float, float, float]:
    """URDF roll, pitch, yaw (rad) of the rotation ``r``: r = Rz(yaw) Ry(pitch) Rx(roll)."""
    pitch = math.atan2(-r[2, 0], math.hypot(r[0, 0], r[1, 0]))
    return math.atan2(r[2, 1], r[2, 2]), pitch, math.atan2(r[1, 0], r[0, 0])


def rpy_to_matrix(rpy: Sequence[float]) -> np.ndarray:
    """Rz(yaw) Ry(pitch) Rx(roll), the rotation a URDF ``origin rpy`` denotes."""
    cr, sr = math.cos(rpy[0]), math.sin(rpy[0])
    cp, sp = math.cos(rpy[1]), math.sin(rpy[1])
    cy, sy = math.cos(rpy[2]), math.sin(rpy[2])
    rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    return rz @ ry @ rx


def _num(values: Sequence[float]) -> str:
    return " ".join(repr(float(v)) for v in values)


def _inertial(link: ET.Element, body: dict) -> None:
    r = quat_to_matrix(body["inertia_quat_wxyz"])
    tensor = r @ np.diag(np.asarray(body["principal_inertia"], dtype=np.float64)) @ r.T
    tensor = 0.5 * (tensor + tensor.T)
    inertial = ET.SubElement(link, "inertial")
    ET.SubElement(inertial, "origin", xyz=_num(body["com_pos"]), rpy="0.0 0.0 0.0")
    ET.SubElement(inertial, "mass", value=repr(float(body["mass"])))
    ET.SubElement(inertial, "inertia", ixx=repr(float(tensor[0, 0])), ixy=repr(float(tensor[0, 1])),
                  ixz=repr(float(tensor[0, 2])), iyy=repr(float(tensor[1, 1])), iyz=repr(float(tensor[1, 2])),
                  izz=repr(float(tensor[2, 2])))  # fmt: skip


def author_urdf(facts: dict) -> str:
    """The URDF text of the robot described by ``facts`` (the reference facts file, parsed; see the module
    docstring for the conventions). Deterministic: the same facts give the same bytes."""
    bodies = {b["name"]: b for b in facts["bodies"]}
    actuators = {a["joint"]: a for a in facts["actuators"]}
    robot = ET.Element("robot", name=str(facts["model"]))
    robot.append(ET.Comment(" authored by bcg-deploy from the robot's physical facts (tools/author_g1_mjcf.py) "))
    for body in facts["bodies"]:
        _inertial(ET.SubElement(robot, "link", name=body["name"]), body)
    for joint in facts["joints"]:
        if joint["type"] == "free":
            continue
        if joint["type"] != "hinge":
            raise BcgdError(f"facts joint {joint['name']}: type {joint['type']!r}, expected hinge or free")
        if any(float(v) != 0.0 for v in joint["pos"]):
            raise BcgdError(f"facts joint {joint['name']}: a hinge offset from its body origin has no URDF form")
        child = bodies[joint["body"]]
        act = actuators[joint["name"]]
        el = ET.SubElement(robot, "joint", name=joint["name"], type="revolute")
        ET.SubElement(el, "parent", link=child["parent"])
        ET.SubElement(el, "child", link=child["name"])
        ET.SubElement(el, "origin", xyz=_num(child["pos"]), rpy=_num(matrix_to_rpy(quat_to_matrix(child["quat_wxyz"]))))
        ET.SubElement(el, "axis", xyz=_num(joint["axis"]))
        lo, hi = joint["range"]
        ET.SubElement(el, "limit", lower=repr(float(lo)), upper=repr(float(hi)),
                      effort=repr(float(act["effort_limit"])), velocity=repr(float(act["velocity_limit"])))  # fmt: skip
    ET.indent(robot, space="  ")
    return '<?xml version="1.0"?>\n' + ET.tostring(robot, encoding="unicode") + "\n"


def read_urdf(path: Path) -> str:
    """The URDF text of a packaged robot (one-line ``BcgdError`` when the file is missing)."""
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise BcgdError(f"robot URDF {path}: {exc.strerror or exc}") from None
