"""Author our G1 MJCF (with ``mujoco.MjSpec``) and the same model as URDF from the physical facts file.

Run once when the facts change; the output (``bcg_deploy/robots/assets/g1.xml``, ``g1.urdf``) is committed
and shipped inside the package. The URDF comes from ``bcg_deploy.robots.urdf.author_urdf`` (its
conventions are in that module). Usage::

    python tools/author_g1_mjcf.py ../shared/reference/g1_29dof.json

Conventions (from the facts file's README): kp = J (2 pi 10 Hz)^2, kd = 2 * 2.0 * J (2 pi 10 Hz),
force limits = effort limits.

Contact. The sole is six 1 cm spheres per foot (``SOLE_POINTS``), the contact set of both simulators.
The facts approximate the G1 sole by seven 1 cm capsules along the foot; a capsule touches a plane
only at its end spheres, so a sole of spheres at capsule ends behaves like the capsules on flat ground.
Six points on the boundary of those capsule ends (heel corners, the widest point of each side, toe
corners) keep the sole's support polygon (inside it, so a policy cannot lean on area the capsule sole
lacks) at 12 contacts per robot: the contact solve costs O(contacts^2), and all 28 capsule ends made
a training step 5x slower than 8 contacts (12: 1.5x). The capsules stay as visual geoms.
Every other collision primitive of the facts collides with the floor and with the robot's other
bodies (self-collision; MuJoCo skips parent-child pairs), as the robot's own body does; the
differentiable simulator models the foot spheres only.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path

import mujoco

from bcg_deploy.robots.urdf import author_urdf

OUT_DIR = Path(__file__).resolve().parents[1] / "bcg_deploy" / "robots" / "assets"
NATURAL_FREQ_HZ = 10.0
DAMPING_RATIO = 2.0
SOLE_RADIUS = 0.01
SOLE_POINTS = (  # ankle_roll_link frame (m): ends and side midpoints of the facts' foot capsules
    (-0.044, 0.018, -0.025),
    (-0.044, -0.018, -0.025),
    (0.075, 0.026, -0.025),
    (0.075, -0.026, -0.025),
    (0.123, 0.018, -0.025),
    (0.123, -0.018, -0.025),
)
_GEOM = {"sphere": mujoco.mjtGeom.mjGEOM_SPHERE, "capsule": mujoco.mjtGeom.mjGEOM_CAPSULE}


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


def _defaults(spec: mujoco.MjSpec) -> dict[str, mujoco.MjsDefault]:
    g1 = spec.add_default("g1", spec.default)
    g1.geom.condim = 3
    g1.geom.friction = [1.0, 0.005, 0.0001]
    classes = {"g1": g1}
    for name, group, contype, rgba in (
        ("collision", 3, 1, [0.8, 0.3, 0.3, 0.4]),
        ("foot_contact", 3, 1, [0.9, 0.1, 0.1, 1.0]),
        ("visual", 2, 0, [0.7, 0.7, 0.75, 1.0]),
    ):
        d = spec.add_default(name, g1)
        d.geom.group, d.geom.contype, d.geom.conaffinity, d.geom.rgba = group, contype, contype, rgba
        classes[name] = d
    classes["visual"].geom.density = 0.0
    return classes


def _add_body(spec: mujoco.MjSpec, parent, facts: dict, body: dict, cls: dict) -> None:  # noqa: ANN001
    b = parent.add_body(name=body["name"], pos=body["pos"], quat=body["quat_wxyz"])
    b.explicitinertial = True
    b.mass, b.ipos, b.iquat, b.inertia = (
        body["mass"],
        body["com_pos"],
        body["inertia_quat_wxyz"],
        body["principal_inertia"],
    )
    act = {a["joint"]: a for a in facts["actuators"]}
    for j in (j for j in facts["joints"] if j["body"] == body["name"]):
        if j["type"] == "free":
            b.add_freejoint(name=j["name"])
            continue
        effort = act[j["name"]]["effort_limit"]
        b.add_joint(
            name=j["name"], type=mujoco.mjtJoint.mjJNT_HINGE, pos=j["pos"], axis=j["axis"], range=j["range"],
            armature=act[j["name"]]["armature"], actfrcrange=[-effort, effort],
        )  # fmt: skip
    for g in (g for g in facts["collision_geoms"] if g["body"] == body["name"]):
        size = g["size"][:1] if g["type"] == "sphere" else g["size"][:2]
        kind = cls["visual"] if "_foot" in g["name"] else cls["collision"]
        b.add_geom(
            kind, name=g["name"], type=_GEOM[g["type"]], size=[*size, 0, 0][:3], pos=g["pos"], quat=g["quat_wxyz"]
        )
    if body["name"].endswith("ankle_roll_link"):
        side = body["name"].split("_")[0]
        for k, p in enumerate(SOLE_POINTS):
            b.add_geom(
                cls["foot_contact"],
                name=f"{side}_foot_contact_{k}",
                type=_GEOM["sphere"],
                size=[SOLE_RADIUS, 0, 0],
                pos=p,
            )
    if body["name"] == "torso_link":
        head = next(g for g in facts["collision_geoms"] if g["name"] == "head_collision")
        b.add_site(name="head", pos=head["pos"], size=[0.01, 0, 0])
    for child in facts["bodies"]:
        if child["parent"] == body["name"] and math.dist(child["pos"], (0, 0, 0)) > 1e-3:
            # A thin visual link from this body's origin to the child's.
            b.add_geom(cls["visual"], type=_GEOM["capsule"], size=[0.018, 0, 0], fromto=[0, 0, 0, *child["pos"]])
    for child in facts["bodies"]:
        if child["parent"] == body["name"]:
            _add_body(spec, b, facts, child, cls)


def author_spec(facts: dict) -> mujoco.MjSpec:
    """The robot's ``MjSpec`` (no floor; ``SCENE`` adds one)."""
    spec = mujoco.MjSpec()
    spec.modelname = facts["model"]
    spec.compiler.degree = False
    spec.compiler.autolimits = True
    spec.option.timestep = 0.005
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    spec.option.cone = mujoco.mjtCone.mjCONE_PYRAMIDAL
    cls = _defaults(spec)
    root = next(b for b in facts["bodies"] if b["parent"] == "world")
    _add_body(spec, spec.worldbody, facts, root, cls)
    spec.body(root["name"]).childclass = "g1"
    hinges = facts["joints"][1:]
    act = {a["joint"]: a for a in facts["actuators"]}
    for j in hinges:
        a = act[j["name"]]
        kp, kd = _gains(a["armature"])
        u = spec.add_actuator(name=j["name"].removesuffix("_joint"), target=j["name"])
        u.trntype = mujoco.mjtTrn.mjTRN_JOINT
        u.set_to_position(kp=kp, kv=kd)
        u.forcerange, u.forcelimited = [-a["effort_limit"], a["effort_limit"]], mujoco.mjtLimited.mjLIMITED_TRUE
        u.inheritrange = 0
    spec.add_numeric(name="velocity_limit", data=[act[j["name"]]["velocity_limit"] for j in hinges])
    home = _home_joint_pos(facts)
    spec.add_key(name="home", qpos=list(facts["poses"]["home"]["root_pos"]) + [1, 0, 0, 0] + home, ctrl=home)
    for body1, body2 in _overlapping_bodies(spec):
        spec.add_exclude(bodyname1=body1, bodyname2=body2)
    return spec


def _overlapping_bodies(spec: mujoco.MjSpec) -> list[tuple[str, str]]:
    """Body pairs whose collision primitives overlap in the home pose (pelvis and hip, elbow and wrist):
    the primitives are coarse hulls of parts that one joint assembly holds together, so their overlap is
    no collision of the robot; excluding them keeps self-collision for links that really meet."""
    model = spec.compile()
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, 0)
    mujoco.mj_forward(model, data)
    pairs = set()
    for c in data.contact[: data.ncon]:
        if c.dist < 0:
            b1, b2 = sorted((model.body(model.geom_bodyid[c.geom1]).name, model.body(model.geom_bodyid[c.geom2]).name))
            pairs.add((b1, b2))
    return sorted(pairs)


@contextlib.contextmanager
def _full_precision() -> Iterator[None]:
    """MuJoCo's MJCF writer prints 6 significant digits unless told otherwise; its exported
    ``_mjPRIVATE__set_xml_precision`` (what MuJoCo's own tests use for exact round trips) sets 17, so the
    file holds the facts' numbers exactly. Without that symbol the tool stops rather than round them."""
    lib = ctypes.CDLL(mujoco.__file__.rsplit("/", 1)[0] + f"/libmujoco.so.{mujoco.__version__}")
    try:
        setter = lib._mjPRIVATE__set_xml_precision
    except AttributeError:
        raise SystemExit(
            f"MuJoCo {mujoco.__version__} has no _mjPRIVATE__set_xml_precision: cannot write exact MJCF"
        ) from None
    setter.argtypes = [ctypes.c_int]
    setter(17)
    try:
        yield
    finally:
        setter(6)


def author_robot(facts: dict) -> str:
    """The robot's MJCF text (``author_spec`` written by MuJoCo at full precision), with a header."""
    header = "<!-- Unitree G1 29-DoF, authored by bcg-deploy from the robot's physical facts\n"
    header += "     (tools/author_g1_mjcf.py). Do not edit by hand: regenerate. -->\n"
    with _full_precision():
        xml = author_spec(facts).to_xml()
    # 17 digits round-trip every double; the shortest text that parses to the same double is easier to read.
    return header + re.sub(r"-?\d+\.\d+(?:e-?\d+)?", lambda m: repr(float(m.group())), xml)


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
