"""Author our G1 MJCF (and the same model as URDF) from the physical facts file.

Run once when the facts change; the output (``bcg_deploy/robots/assets/g1.xml``, ``g1.urdf``) is committed
and shipped inside the package. The URDF comes from ``bcg_deploy.robots.urdf.author_urdf`` (its
conventions are in that module). Usage::

    python tools/author_g1_mjcf.py ../shared/reference/g1_29dof.json

Conventions (from the facts file's README): kp = J (2 pi 10 Hz)^2, kd = 2 * 2.0 * J (2 pi 10 Hz),
force limits = effort limits. Collision: the four 5 mm foot spheres of METHOD.md section 2 (the
contact set of both simulators) plus the facts' primitives on all other bodies; the facts' seven
foot capsules are kept as visual geoms only.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

from bcg_deploy.robots.urdf import author_urdf

OUT_DIR = Path(__file__).resolve().parents[1] / "bcg_deploy" / "robots" / "assets"
NATURAL_FREQ_HZ = 10.0
DAMPING_RATIO = 2.0
FOOT_SPHERE_RADIUS = 0.005
FOOT_SPHERE_POS = ((-0.05, 0.025, -0.03), (-0.05, -0.025, -0.03), (0.12, 0.03, -0.03), (0.12, -0.03, -0.03))


def _f(values) -> str:
    return " ".join(repr(float(v)) for v in values)


def _gains(armature: float) -> tuple[float, float]:
    omega = 2.0 * math.pi * NATURAL_FREQ_HZ
    return armature * omega**2, 2.0 * DAMPING_RATIO * armature * omega


def _home_joint_pos(facts: dict) -> list[float]:
    pose = facts["poses"]["home"]["joint_pos"]
    out = []
    for joint in facts["joints"][1:]:
        value = 0.0
        for pattern, v in pose.items():
            if re.fullmatch(pattern, joint["name"]):
                value = float(v)
        out.append(value)
    return out


def _body_xml(facts: dict, body: dict, depth: int) -> list[str]:
    pad = "  " * depth
    joints = [j for j in facts["joints"] if j["body"] == body["name"]]
    lines = [f'{pad}<body name="{body["name"]}" pos="{_f(body["pos"])}" quat="{_f(body["quat_wxyz"])}">']
    lines.append(
        f'{pad}  <inertial pos="{_f(body["com_pos"])}" quat="{_f(body["inertia_quat_wxyz"])}" '
        f'mass="{body["mass"]!r}" diaginertia="{_f(body["principal_inertia"])}"/>'
    )
    act = {a["joint"]: a for a in facts["actuators"]}
    for j in joints:
        if j["type"] == "free":
            lines.append(f'{pad}  <freejoint name="{j["name"]}"/>')
        else:
            a = act[j["name"]]
            effort = a["effort_limit"]
            lines.append(
                f'{pad}  <joint name="{j["name"]}" pos="{_f(j["pos"])}" axis="{_f(j["axis"])}" '
                f'range="{_f(j["range"])}" armature="{a["armature"]!r}" actuatorfrcrange="{-effort!r} {effort!r}"/>'
            )
    for g in facts["collision_geoms"]:
        if g["body"] != body["name"]:
            continue
        size = g["size"][:1] if g["type"] == "sphere" else g["size"][:2]
        cls = "visual" if "_foot" in g["name"] else "collision"
        lines.append(
            f'{pad}  <geom name="{g["name"]}" class="{cls}" type="{g["type"]}" size="{_f(size)}" '
            f'pos="{_f(g["pos"])}" quat="{_f(g["quat_wxyz"])}"/>'
        )
    if body["name"].endswith("ankle_roll_link"):
        side = body["name"].split("_")[0]
        for k, p in enumerate(FOOT_SPHERE_POS):
            lines.append(
                f'{pad}  <geom name="{side}_foot_contact_{k}" class="foot_contact" type="sphere" '
                f'size="{FOOT_SPHERE_RADIUS!r}" pos="{_f(p)}"/>'
            )
    if body["name"] == "torso_link":
        head = next(g for g in facts["collision_geoms"] if g["name"] == "head_collision")
        lines.append(f'{pad}  <site name="head" pos="{_f(head["pos"])}" size="0.01"/>')
    for child in facts["bodies"]:
        if child["parent"] == body["name"] and math.dist(child["pos"], (0, 0, 0)) > 1e-3:
            # A thin visual link from this body's origin to the child's.
            lines.append(f'{pad}  <geom class="visual" type="capsule" size="0.018" fromto="0 0 0 {_f(child["pos"])}"/>')
    for child in facts["bodies"]:
        if child["parent"] == body["name"]:
            lines.extend(_body_xml(facts, child, depth + 1))
    lines.append(f"{pad}</body>")
    return lines


def author_robot(facts: dict) -> str:
    hinges = facts["joints"][1:]
    act = {a["joint"]: a for a in facts["actuators"]}
    root = next(b for b in facts["bodies"] if b["parent"] == "world")
    home = _home_joint_pos(facts)
    lines = [
        "<!-- Unitree G1 29-DoF, authored by bcg-deploy from the robot's physical facts",
        "     (tools/author_g1_mjcf.py). Do not edit by hand: regenerate. -->",
        f'<mujoco model="{facts["model"]}">',
        '  <compiler angle="radian" autolimits="true"/>',
        '  <option timestep="0.005" integrator="implicitfast" cone="pyramidal"/>',
        "  <default>",
        '    <default class="g1">',
        '      <geom condim="3" friction="1.0 0.005 0.0001"/>',
        '      <default class="collision">',
        '        <geom group="3" contype="1" conaffinity="0" rgba="0.8 0.3 0.3 0.4"/>',
        "      </default>",
        '      <default class="foot_contact">',
        '        <geom group="3" contype="1" conaffinity="0" rgba="0.9 0.1 0.1 1"/>',
        "      </default>",
        '      <default class="visual">',
        '        <geom group="2" contype="0" conaffinity="0" density="0" rgba="0.7 0.7 0.75 1"/>',
        "      </default>",
        "    </default>",
        "  </default>",
        "  <worldbody>",
        '    <frame childclass="g1">',
    ]
    lines.extend(_body_xml(facts, root, 3))
    lines += ["    </frame>", "  </worldbody>", "  <actuator>"]
    for j in hinges:
        a = act[j["name"]]
        kp, kd = _gains(a["armature"])
        name = j["name"].removesuffix("_joint")
        lines.append(
            f'    <position name="{name}" joint="{j["name"]}" kp="{kp!r}" kv="{kd!r}" '
            f'forcerange="{-a["effort_limit"]!r} {a["effort_limit"]!r}" inheritrange="0"/>'
        )
    lines += ["  </actuator>", "  <custom>"]
    lines.append(f'    <numeric name="velocity_limit" data="{_f(act[j["name"]]["velocity_limit"] for j in hinges)}"/>')
    lines += ["  </custom>", "  <keyframe>"]
    qpos = list(facts["poses"]["home"]["root_pos"]) + [1, 0, 0, 0] + home
    lines.append(f'    <key name="home" qpos="{_f(qpos)}" ctrl="{_f(home)}"/>')
    lines += ["  </keyframe>", "</mujoco>", ""]
    return "\n".join(lines)


SCENE = """<!-- The G1 on a floor, with lights. Both simulators load the robot from g1.xml. -->
<mujoco model="g1_scene">
  <include file="g1.xml"/>
  <statistic center="0 0 0.8" extent="1.8"/>
  <visual>
    <headlight diffuse="0.6 0.6 0.6" ambient="0.3 0.3 0.3" specular="0 0 0"/>
    <global azimuth="120" elevation="-20" offwidth="1280" offheight="720"/>
  </visual>
  <asset>
    <texture type="skybox" builtin="gradient" rgb1="0.3 0.5 0.7" rgb2="0 0 0" width="512" height="3072"/>
    <texture type="2d" name="groundplane" builtin="checker" mark="edge" rgb1="0.2 0.3 0.4"
      rgb2="0.1 0.2 0.3" markrgb="0.8 0.8 0.8" width="300" height="300"/>
    <material name="groundplane" texture="groundplane" texuniform="true" texrepeat="5 5" reflectance="0.2"/>
  </asset>
  <worldbody>
    <light pos="0 0 3.5" dir="0 0 -1" directional="true"/>
    <light pos="0 -2 3" dir="0 0.5 -1" diffuse="0.4 0.4 0.4"/>
    <geom name="floor" size="0 0 0.05" type="plane" material="groundplane" contype="0" conaffinity="1"
      condim="3" friction="1.0 0.005 0.0001"/>
  </worldbody>
</mujoco>
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("facts", type=Path)
    args = parser.parse_args()
    facts = json.loads(args.facts.read_text())
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "g1.xml").write_text(author_robot(facts))
    (OUT_DIR / "scene.xml").write_text(SCENE)
    (OUT_DIR / "g1.urdf").write_text(author_urdf(facts))
    print(f"wrote {OUT_DIR / 'g1.xml'}, {OUT_DIR / 'scene.xml'} and {OUT_DIR / 'g1.urdf'}")


if __name__ == "__main__":
    main()
