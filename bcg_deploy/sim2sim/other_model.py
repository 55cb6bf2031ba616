"""``bcgd sim2sim --mjcf FILE``: the policy replayed in another G1 model (e.g. mjlab's G1 with meshes).

The model keeps its own bodies, inertias, joint limits and collision geometry. Joints and bodies are
matched by name to the policy's metadata (``joint_names``, ``body_names`` and the anchor body); its own
actuators are replaced by one torque motor per policy joint, in the policy's joint order (the runner's
PD uses the ONNX gains, effort limits and armature, as with the packaged model), and a ground plane
``floor`` at z = 0 is added when the model has none. A joint or body the policy needs and the model
lacks is a one-line error; so is a model whose free joint is not first or whose hinges are not in the
policy's order (the runner reads ``qpos[7:]`` as the joint vector).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import mujoco
import numpy as np

from bcg_deploy.errors import BcgdError


def load_mjcf(
    path: str | Path,
    joint_names: tuple[str, ...],
    body_names: tuple[str, ...],
    edit: Callable[[mujoco.MjSpec], str | None] | None = None,
) -> mujoco.MjModel:
    """The model at ``path`` with motors on ``joint_names`` and a floor; see the module docstring. ``edit(spec)``:
    the settings a deploy stack's own code adds to this model (e.g. mjlab's collision config), applied first."""
    path = Path(path)
    if not path.is_file():
        raise BcgdError(f"--mjcf {path}: no such file")
    try:
        spec = mujoco.MjSpec.from_file(str(path))
    except Exception as exc:  # MuJoCo's own error type for unreadable XML
        raise BcgdError(f"--mjcf {path}: not a loadable MJCF ({mujoco_message(exc)})") from None
    joints = {j.name for j in spec.joints}
    missing = [n for n in joint_names if n not in joints]
    if missing:
        raise BcgdError(f"--mjcf {path}: no joint {missing[0]!r} (the policy drives {len(joint_names)} joints by name)")
    bodies = {b.name for b in spec.bodies}
    missing = [n for n in body_names if n not in bodies]
    if missing:
        raise BcgdError(f"--mjcf {path}: no body {missing[0]!r} (the policy's body_names / anchor)")
    if edit is not None:
        edit(spec)
    for act in list(spec.actuators):
        spec.delete(act)
    for name in joint_names:
        spec.add_actuator(name=f"{name}_motor", target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
    if "floor" not in {g.name for g in spec.geoms}:
        spec.worldbody.add_geom(name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0.0, 0.0, 0.05])
    try:
        m = spec.compile()
    except Exception as exc:
        raise BcgdError(f"--mjcf {path}: does not compile ({mujoco_message(exc)})") from None
    _check_layout(m, joint_names, path)
    return m


_TINYXML = re.compile(r"Error=(?P<kind>\w+).*?Line number=(?P<line>\d+):?\s*(?P<what>.*)", re.S)


def mujoco_message(exc: BaseException, limit: int = 300) -> str:
    """MuJoCo's error message on one line. Its XML parser's report (``XML parse error 14:`` then
    ``Error=XML_ERROR_MISMATCHED_ELEMENT ErrorID=14 (0xe) Line number=3: XMLElement name=body``) becomes
    ``XML error at line 3: XML_ERROR_MISMATCHED_ELEMENT (XMLElement name=body)``; any other message keeps all
    its lines, joined."""
    text = str(exc).strip()
    m = _TINYXML.search(text)
    if m is not None:
        what = " ".join(m["what"].split())
        return f"XML error at line {m['line']}: {m['kind']}" + (f" ({what})" if what else "")
    return " ".join(text.split())[:limit] or type(exc).__name__


def _check_layout(m: mujoco.MjModel, joint_names: tuple[str, ...], path: Path) -> None:
    if m.njnt < 1 or m.jnt_type[0] != mujoco.mjtJoint.mjJNT_FREE or m.nq != 7 + len(joint_names):
        raise BcgdError(f"--mjcf {path}: expected one free joint first and {len(joint_names)} hinges (nq {m.nq})")
    adr = [int(m.jnt_qposadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, n)]) for n in joint_names]
    if adr != list(range(7, 7 + len(joint_names))):
        raise BcgdError(f"--mjcf {path}: its hinges are not in the policy's joint order")


def body_ids(m: mujoco.MjModel, body_names: tuple[str, ...]) -> np.ndarray:
    """MuJoCo body ids of ``body_names`` (the reference's body order)."""
    return np.array([mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, n) for n in body_names], dtype=int)
