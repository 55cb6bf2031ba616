"""Unitree G1 29-DoF constants (mjlab-style robot module)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bcg_deploy.robots.spec import KeyPoint, RobotSpec, spec_from_mjcf

ASSETS = Path(__file__).resolve().parent / "assets"
G1_MJCF = ASSETS / "g1.xml"
G1_SCENE = ASSETS / "scene.xml"
G1_URDF = ASSETS / "g1.urdf"  # the same model as g1.xml, authored from the same facts (robots/urdf.py)
FOOT_BODIES = ("left_ankle_roll_link", "right_ankle_roll_link")
# METHOD.md section 5: both ankle_roll_links, head (a point on the torso), both wrist_yaw_links.
KEY_BODIES = (
    KeyPoint("left_ankle_roll_link", "left_ankle_roll_link"),
    KeyPoint("right_ankle_roll_link", "right_ankle_roll_link"),
    KeyPoint("head", "torso_link", (0.0, 0.0, 0.43)),
    KeyPoint("left_wrist_yaw_link", "left_wrist_yaw_link"),
    KeyPoint("right_wrist_yaw_link", "right_wrist_yaw_link"),
)
ACTION_SCALE_FRACTION = 0.25


def g1_spec() -> RobotSpec:
    spec = spec_from_mjcf("g1", G1_MJCF, G1_SCENE, FOOT_BODIES, KEY_BODIES, ACTION_SCALE_FRACTION)
    return replace(spec, urdf_path=G1_URDF)
