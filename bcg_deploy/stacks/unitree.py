"""Unitree's C++ deploy for the G1 Mimic state: unitree_rl_mjlab (motion NPZ) and unitree_rl_lab (motion CSV).

Both share the ``isaaclab`` C++ layer (``deploy/include/isaaclab/``): ``params/deploy.yaml`` and
``exported/policy.onnx`` in a policy folder, observation terms registered by name and concatenated in
document order, actions ``raw * scale + offset`` then an optional clip, the policy on its own thread every
``step_dt``. They differ in the motion file and in how it is indexed (module constants below, with the lines).

Read at unitree_rl_mjlab 5b7e396 (paths under ``deploy/``) and unitree_rl_lab 4711dee
(``deploy/robots/g1_29dof/``; its ``isaaclab`` layer as of 5dc06a4). The mjlab stack's anchor term reads a
destroyed temporary (``State_Mimic.cpp:72``, ``auto rot = rot_.toRotationMatrix().transpose();``: undefined
behaviour, garbage when built with optimisation); unitree_rl_lab 4711dee materialises the matrix
(``State_Mimic.cpp`` ``Eigen::Matrix3f rot = ...``). sim2sim models the FIXED term for both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from bcg_deploy.robots import RobotSpec
from bcg_deploy.stacks.base import (
    Behaviour,
    Findings,
    OnnxFacts,
    StackInfo,
    check_static,
    read_onnx,
)

MJLAB = "unitree_rl_mjlab"
LAB = "unitree_rl_lab"
_MJ = "unitreerobotics/unitree_rl_mjlab@5b7e396 deploy/"
_LB = "unitreerobotics/unitree_rl_lab@4711dee deploy/robots/g1_29dof/"
ORT_MAX_OPSET = 22
"""Both ship onnxruntime 1.22.0 (``deploy/thirdparty/onnxruntime-linux-x64-1.22.0``), whose newest opset is 22."""
NPZ_DT = 1.0 / 50.0
"""unitree_rl_mjlab's motion loader hard-codes 50 Hz (``robots/g1/include/State_Mimic.h:39``)."""
WAIST = (12, 13, 14)
"""SDK motor indices of waist yaw (z), roll (x), pitch (y) in the anchor maths (``State_Mimic.cpp:18-21``)."""

# Registered observation terms (name -> size for n joints and a actions); unknown names throw at start
# ("Observation term 'x' is not registered.", include/isaaclab/manager/observation_manager.h:212-214).
_COMMON_TERMS = {
    "base_ang_vel": lambda n, a: 3,
    "projected_gravity": lambda n, a: 3,
    "joint_pos": lambda n, a: n,
    "joint_pos_rel": lambda n, a: n,
    "joint_vel_rel": lambda n, a: n,
    "last_action": lambda n, a: a,
    "velocity_commands": lambda n, a: 3,
    "gait_phase": lambda n, a: 2,
}  # include/isaaclab/envs/mdp/observations/observations.h:84-208
TERMS = {
    MJLAB: _COMMON_TERMS | {"motion_command": lambda n, a: 2 * n, "motion_anchor_ori_b": lambda n, a: 6},
    LAB: _COMMON_TERMS
    | {
        "motion_joint_pos": lambda n, a: n,
        "motion_joint_vel": lambda n, a: n,
        "motion_command": lambda n, a: 2 * n,
        "motion_anchor_ori_b": lambda n, a: 6,
    },
}
ACTIONS = ("JointPositionAction", "JointVelocityAction")  # joint_actions.h:357-358

_SHARED = (
    Behaviour(
        "terms by registered name",
        "observation terms built by registered name, in deploy.yaml order; per term clip then scale "
        "(scale_first: scale then clip), history oldest first",
        _MJ + "include/isaaclab/manager/observation_manager.h:142-231, manager_term_cfg.h:27-62",
    ),
    Behaviour(
        "obs bound at the model's size",
        "the ONNX input is bound to the group 'obs' with the MODEL's static size: a shorter observation is read "
        "past its end (no error; unitree_rl_mjlab #23)",
        _MJ + "include/isaaclab/algorithms/algorithms.h:257-292",
        "checked by verify (refused before a run)",
    ),
    Behaviour(
        "raw * scale + offset, clip",
        "target = raw * scale + offset, then the per-joint clip if any; sent to motor joint_ids_map[i]",
        _MJ + "include/isaaclab/envs/mdp/actions/joint_actions.h:282-302, robots/g1/src/State_Mimic.cpp:182-187",
    ),
    Behaviour(
        "raw last action",
        "last_action = the raw policy output (zero after reset)",
        _MJ + "include/isaaclab/envs/mdp/observations/observations.h:176-180, manager/action_manager.h:151-157",
    ),
    Behaviour(
        "anchor = IMU x waist",
        "robot anchor = IMU (pelvis) quaternion x Rz(waist yaw) Rx(waist roll) Ry(waist pitch) of motors 12-14",
        _MJ + "robots/g1/src/State_Mimic.cpp:10-25",
    ),
    Behaviour(
        "init_quat vs reference pelvis yaw",
        "at entry init_quat = yaw(robot anchor) yaw(reference PELVIS)^T (the reference anchor is the torso)",
        _MJ + "robots/g1/src/State_Mimic.cpp:162-165",
    ),
    Behaviour(
        "anchor term (fixed UB)",
        "anchor term: rot = ((init_quat ref_anchor)^-1 real_anchor)^T, 6D r00 r01 r10 r11 r20 r21; the mjlab "
        "stack reads a destroyed temporary there (undefined behaviour), fixed in unitree_rl_lab 4711dee",
        _MJ + "robots/g1/src/State_Mimic.cpp:63-77",
        "yes, the FIXED term (unitree_rl_lab 4711dee State_Mimic.cpp)",
    ),
    Behaviour(
        "targets before the first step",
        "the policy thread steps immediately at entry; until its first step the motors get the action "
        "manager's zero-initialised targets (unitree_rl_mjlab) or hold the measured pose (unitree_rl_lab)",
        _MJ + "robots/g1/src/State_Mimic.cpp:150-187; " + _LB + "src/State_Mimic.cpp enter(), run()",
        "no: sim2sim's first target is the first policy step's (the window is the policy's compute time)",
    ),
    Behaviour(
        "FSM transitions",
        "FSM transitions: time-out to another state, bad orientation to Passive (disabled: returns false)",
        _MJ + "robots/g1/src/State_Mimic.cpp:124-135, include/isaaclab/envs/mdp/terminations.h:10-16",
        "no: a run ends at the clip's end or a fall (pelvis below fall_height)",
    ),
)

INFO = {
    MJLAB: StackInfo(
        name=MJLAB,
        repo="unitreerobotics/unitree_rl_mjlab@5b7e396",
        loads=(
            "params/deploy.yaml (robots/g1/src/State_Mimic.cpp:117-120)",
            "exported/policy.onnx (+ policy.onnx.data) (State_Mimic.cpp:121)",
            "the motion NPZ named by config/config.yaml FSM.<state>.motion_file (State_Mimic.cpp:91-97): "
            "body_pos_w, body_quat_w (w x y z), joint_pos, joint_vel, float32, body 0 = pelvis (State_Mimic.h:48-93)",
        ),
        observation="deploy.yaml observations (the released dance1_subject2: motion_command 58, "
        "motion_anchor_ori_b 6, base_ang_vel 3, joint_pos_rel 29, joint_vel_rel 29, last_action 29 = 154; "
        "params/deploy.yaml:17-53); motion_command in the NPZ's column order, not remapped (State_Mimic.cpp:46-61)",
        actions="JointPositionAction scale, offset (= default_joint_pos), clip null (deploy.yaml:9-16)",
        gains="deploy.yaml stiffness / damping, SDK motor order, sent once at entry (State_Mimic.cpp:140-147)",
        control="step_dt 0.02 s policy thread (include/isaaclab/envs/manager_based_rl_env.h:29, "
        "State_Mimic.cpp:153-178)",
        motion="frame = floor(clamp(k * step_dt + time_start, 0, N dt) / dt) in float32, dt = 1/50, no interpolation "
        "(State_Mimic.h:95-101, State_Mimic.cpp:171): at some steps frame k-1",
        behaviours=(
            Behaviour(
                "float32 frame index",
                "reference frame = floor(float32(k) * 0.02f / (1 / 50.f)): frame k - 1 at some steps",
                _MJ + "robots/g1/include/State_Mimic.h:95-101, robots/g1/src/State_Mimic.cpp:171",
            ),
            *_SHARED,
        ),
        model="mjlab/asset_zoo/robots/unitree_g1/xmls/g1.xml with g1_constants.py: armature = reflected rotor "
        "inertia (lines 43-98), effort 25/88/139/5 N m, 50 for ankles and waist roll/pitch (lines 99-204), "
        "FULL_COLLISION: self collisions, condim 1, feet condim 3 priority 1 friction 0.6 (lines 234-241)",
    ),
    LAB: StackInfo(
        name=LAB,
        repo="unitreerobotics/unitree_rl_lab@4711dee (isaaclab layer 5dc06a4)",
        loads=(
            "params/deploy.yaml, exported/policy.onnx (src/State_Mimic.cpp constructor)",
            "the motion CSV named by config/config.yaml FSM.<state>.motion_file and its fps (same place): rows "
            "root x y z, quaternion x y z w, joints in SDK order (include/State_Mimic.h MotionLoader_)",
        ),
        observation="deploy.yaml observations; motion terms remapped through joint_ids_map (src/State_Mimic.cpp "
        "motion_joint_pos / motion_command)",
        actions="JointPositionAction: scale and offset REQUIRED (yaml-cpp throws without them), clip optional "
        "(include/isaaclab/envs/mdp/actions/joint_actions.h@5dc06a4)",
        gains="deploy.yaml stiffness / damping, SDK order, at entry (src/State_Mimic.cpp enter())",
        control="step_dt policy thread (src/State_Mimic.cpp enter())",
        motion="index_0 = round(clamp(t / (N dt), 0, 1) (N - 1)), blend = round((t - index_0 dt) / dt 1e5) / 1e5, "
        "joints lerp, root quaternion slerp, joint velocities (q[i+1] - q[i]) / dt, last repeated "
        "(include/State_Mimic.h MotionLoader_::update, _comupte_raw_derivative)",
        behaviours=(
            Behaviour(
                "CSV interpolation",
                "CSV motion at the config's fps, interpolated at t = k step_dt (index rounding and blend as coded), "
                "velocities by forward differences",
                _LB + "include/State_Mimic.h MotionLoader_",
            ),
            Behaviour(
                "init_quat before reset",
                "init_quat uses the loader's reference yaw BEFORE motion->reset(time_start)",
                _LB + "src/State_Mimic.cpp enter() (policy thread)",
            ),
            *_SHARED,
        ),
        model="unitree_rl_lab trains in Isaac Lab (no MJCF in its repository); its G1 motors are the same "
        "(armature and effort as mjlab's)",
    ),
}


@dataclass
class Term:
    """One observation term of deploy.yaml."""

    name: str
    size: int
    history: int = 1
    scale: np.ndarray | None = None
    clip: tuple[float, float] | None = None
    scale_first: bool = False
    params: dict = field(default_factory=dict)


@dataclass
class UnitreeFiles:
    """A Unitree policy folder as the deploy reads it (policy order = the ONNX's; ``ids`` maps it to motors)."""

    stack: str
    folder: Path
    onnx: OnnxFacts | None
    step_dt: float = 0.02
    ids: np.ndarray | None = None  # joint_ids_map: policy index -> SDK motor index
    kp: np.ndarray | None = None  # SDK order
    kd: np.ndarray | None = None
    default: np.ndarray | None = None  # policy order
    scale: np.ndarray | None = None
    offset: np.ndarray | None = None
    clip: np.ndarray | None = None  # [A, 2]
    action_dim: int = 0
    terms: list[Term] = field(default_factory=list)
    gym_history: bool = False
    motion_path: Path | None = None
    fps: float | None = None
    time_start: float = 0.0
    # the motion as the loader holds it (float32, file column order)
    root_pos: np.ndarray | None = None
    root_quat: np.ndarray | None = None  # w x y z
    joint_pos: np.ndarray | None = None
    joint_vel: np.ndarray | None = None

    @property
    def obs_size(self) -> int:
        return sum(t.size * t.history for t in self.terms)


def _floats(v, what: str, f: Findings, n: int | None = None) -> np.ndarray | None:
    try:
        arr = np.asarray([float(x) for x in v], np.float64)
    except (TypeError, ValueError):
        f.bad(f"{what}: expected a list of numbers, got {str(v)[:60]}")
        return None
    if n is not None and arr.size != n:
        f.bad(f"{what}: {arr.size} values, expected {n}")
        return None
    return arr


def find_fsm_entry(folder: Path) -> tuple[Path, dict] | None:
    """The ``config/config.yaml`` FSM state whose ``policy_dir`` is ``folder`` (paths relative to the robot's
    project dir, ``include/param.h:60-92``), with that project dir; else the FSM fragment a bcgd export writes in
    ``params/unitree_rl_lab_fsm.yaml`` (its paths as if the folder sat at its ``policy_dir``); None when neither
    names the folder."""
    folder = folder.resolve()
    for proj in folder.parents:
        cfg = proj / "config" / "config.yaml"
        if not cfg.is_file():
            continue
        for state in _fsm_states(cfg):
            if (proj / str(state["policy_dir"])).resolve() == folder:
                return proj, state
    for frag in sorted((folder / "params").glob("*fsm*.yaml")):
        for state in _fsm_states(frag):
            pdir = str(state["policy_dir"]).rstrip("/")
            motion = str(state.get("motion_file", ""))
            if motion.startswith(pdir + "/"):
                state = {**state, "motion_file": motion[len(pdir) + 1 :]}
            return folder, state
    return None


def _fsm_states(path: Path) -> list[dict]:
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError:
        return []
    states = (doc.get("FSM") or {}).values() if isinstance(doc, dict) else []
    return [s for s in states if isinstance(s, dict) and "policy_dir" in s]


def policy_folder(path: Path) -> Path:
    """The policy folder of ``path`` (the folder itself, or ``<folder>/exported/policy.onnx``)."""
    path = Path(path)
    if path.is_file() and path.parent.name == "exported":
        return path.parent.parent
    return path


def read_folder(path: Path, stack: str, spec: RobotSpec, f: Findings, motion: Path | None = None) -> UnitreeFiles:
    """Read a Unitree policy folder the way its ``State_Mimic`` does; every disagreement is a finding."""
    folder = policy_folder(path)
    cfg_path, onnx_path = folder / "params" / "deploy.yaml", folder / "exported" / "policy.onnx"
    out = UnitreeFiles(stack, folder, None)
    if not cfg_path.is_file():
        f.bad(f"{folder}: no params/deploy.yaml (YAML::LoadFile fails, State_Mimic.cpp:117-120)")
        return out
    try:
        doc = yaml.safe_load(cfg_path.read_text()) or {}
    except yaml.YAMLError as exc:
        f.bad(f"{cfg_path}: not YAML ({str(exc).splitlines()[0][:100]})")
        return out
    out.onnx = read_onnx(onnx_path, f)
    _read_deploy_yaml(doc, cfg_path, out, spec, f)
    _check_onnx(out, f)
    _read_motion(out, spec, f, motion)
    return out


def _read_deploy_yaml(doc: dict, path: Path, out: UnitreeFiles, spec: RobotSpec, f: Findings) -> None:
    n_motors = spec.num_joints
    step = doc.get("step_dt")
    if not isinstance(step, (int, float)) or not step > 0:
        f.bad(f"{path.name}: step_dt = {step!r}; expected seconds > 0 (manager_based_rl_env.h:29)")
    else:
        out.step_dt = float(step)
    ids = _floats(doc.get("joint_ids_map", []), f"{path.name} joint_ids_map", f)
    if ids is not None:
        if sorted(ids.tolist()) != list(range(n_motors)):
            f.bad(
                f"{path.name} joint_ids_map: {ids.size} entries, expected a permutation of the G1's {n_motors} "
                "motor indices 0..28 (policy joint i drives motor joint_ids_map[i])"
            )
        else:
            out.ids = ids.astype(int)
    n = out.ids.size if out.ids is not None else n_motors
    out.kp = _floats(doc.get("stiffness", []), f"{path.name} stiffness (motor order)", f, n_motors)
    out.kd = _floats(doc.get("damping", []), f"{path.name} damping (motor order)", f, n_motors)
    for what, v in (("stiffness", out.kp), ("damping", out.kd)):
        if v is not None and np.any(v < 0):
            f.bad(f"{path.name} {what}: negative gain at motor {int(np.argmin(v))}")
    out.default = _floats(doc.get("default_joint_pos", []), f"{path.name} default_joint_pos", f, n)
    _read_actions(doc.get("actions") or {}, path, out, n, f)
    _read_observations(doc.get("observations") or {}, path, out, n, f)
    _check_joint_order(path, out, spec, f)
    if out.terms and out.scale is not None and out.kp is not None:
        identity = out.ids is not None and bool(np.all(out.ids == np.arange(out.ids.size)))
        f.fact(
            f"{path.name}: {len(out.terms)} terms = {out.obs_size} values ({', '.join(t.name for t in out.terms)}), "
            f"step_dt {out.step_dt:g} s, joint_ids_map {'identity' if identity else 'permuted'}, action scale "
            f"{out.scale.min():g}-{out.scale.max():g}, offset = default_joint_pos, kp {out.kp.min():g}-{out.kp.max():g}"
        )


def _read_actions(actions: dict, path: Path, out: UnitreeFiles, n: int, f: Findings) -> None:
    if not actions:
        f.bad(f"{path.name}: no actions (the deploy has nothing to send)")
        return
    for name in actions:
        if name not in ACTIONS:
            f.bad(f"{path.name}: action term '{name}' is not registered (action_manager.h:214-217)")
    act = actions.get("JointPositionAction")
    if not isinstance(act, dict):
        f.bad(f"{path.name}: no JointPositionAction (the Mimic state sends processed actions as joint targets)")
        return
    out.action_dim = len(act["joint_ids"]) if act.get("joint_ids") else n
    if act.get("scale") is None:
        what = "yaml-cpp throws at start" if out.stack == LAB else "the deploy sends raw actions + offset, unscaled"
        f.bad(f"{path.name}: JointPositionAction has no scale ({what}; joint_actions.h:271-273)")
    else:
        out.scale = _floats(act["scale"], f"{path.name} JointPositionAction scale", f, out.action_dim)
    if act.get("offset") is None:
        what = "yaml-cpp throws at start" if out.stack == LAB else "targets are scaled actions about 0 rad"
        f.bad(f"{path.name}: JointPositionAction has no offset ({what})")
    else:
        out.offset = _floats(act["offset"], f"{path.name} JointPositionAction offset", f, out.action_dim)
        if out.offset is not None and out.default is not None and not np.allclose(out.offset, out.default):
            i = int(np.argmax(np.abs(out.offset - out.default)))
            f.bad(
                f"{path.name}: action offset {out.offset[i]:g} differs from default_joint_pos {out.default[i]:g} "
                f"at policy joint {i} (joint_pos_rel is relative to default_joint_pos, actions to offset)"
            )
    if act.get("clip") is not None:
        try:
            out.clip = np.asarray(act["clip"], np.float64).reshape(out.action_dim, 2)
        except (TypeError, ValueError):
            f.bad(f"{path.name}: JointPositionAction clip must be {out.action_dim} [lo, hi] pairs")


def _read_observations(obs: dict, path: Path, out: UnitreeFiles, n: int, f: Findings) -> None:
    if not obs:
        f.bad(f"{path.name}: no observations")
        return
    first = next(iter(obs.values()))
    if not (isinstance(first, dict) and "params" in first):
        f.bad(f"{path.name}: observation groups: only the single 'obs' group (first term with params) is modelled")
        return
    registered = TERMS[out.stack]
    scale_first = False
    for name, cfg in obs.items():
        if name == "scale_first":
            scale_first = bool(cfg)
            continue
        if name == "use_gym_history":
            out.gym_history = bool(cfg)
            continue
        if name not in registered:
            f.bad(f"{path.name}: observation term '{name}' is not registered in {out.stack} (the deploy throws)")
            continue
        cfg = cfg if isinstance(cfg, dict) else {}
        params = cfg.get("params") or {}
        joint_ids = (params.get("asset_cfg") or {}).get("joint_ids") if isinstance(params, dict) else None
        size = len(joint_ids) if joint_ids and name in ("joint_pos", "joint_pos_rel", "joint_vel_rel") else None
        size = size or registered[name](n, out.action_dim or n)
        term = Term(name, size, int(cfg.get("history_length", 1) or 1), None, None, scale_first, params)
        if term.history < 1:
            f.bad(f"{path.name}: {name} history_length {term.history}; expected >= 1")
        if cfg.get("scale") is not None:
            term.scale = _floats(cfg["scale"], f"{path.name} {name} scale", f, size)
        if cfg.get("clip") is not None:
            c = _floats(cfg["clip"], f"{path.name} {name} clip", f, 2)
            term.clip = None if c is None else (float(c[0]), float(c[1]))
        out.terms.append(term)


def _check_joint_order(path: Path, out: UnitreeFiles, spec: RobotSpec, f: Findings) -> None:
    """deploy.yaml names no joints: the order shows in the per-joint values. Each policy joint's default must
    lie in the range of the motor it drives (motor i = the G1 joint ``spec.joint_names[i]``); unitree_rl_mjlab
    also needs the identity map (its motion_command and anchor read the motion file in file order, joint_pos_rel
    in policy order: State_Mimic.cpp:18-21, 46-61). One line for the order, however many joints it moves."""
    if out.ids is None or out.default is None:
        return
    rng = spec.joint_range[out.ids]
    bad = np.nonzero((out.default < rng[:, 0] - 1e-6) | (out.default > rng[:, 1] + 1e-6))[0]
    moved = out.stack == MJLAB and bool(np.any(out.ids != np.arange(out.ids.size)))
    if not (moved or bad.size):
        return
    why = []
    if moved:
        why.append("joint_ids_map is not the identity, which unitree_rl_mjlab's motion_command and anchor need "
                   "(State_Mimic.cpp:18-21, 46-61)")  # fmt: skip
    if bad.size:
        i = int(bad[0])
        why.append(
            f"policy joint {i} drives motor {out.ids[i]} ({spec.joint_names[out.ids[i]]}) with default "
            f"{out.default[i]:g} rad outside its range [{rng[i, 0]:g}, {rng[i, 1]:g}]"
            + (f" ({bad.size} joints so)" if bad.size > 1 else "")
        )
    f.bad(f"{path.name}: wrong joint order: {'; '.join(why)}")


def _check_onnx(out: UnitreeFiles, f: Findings) -> None:
    o = out.onnx
    if o is None:
        return
    check_static(o, f, out.stack)
    for name in o.inputs:
        if name != "obs":
            f.bad(f"{o.path.name}: input '{name}' is not an observation group (algorithms.h:279-283; group 'obs')")
    size = o.size("obs") if "obs" in o.inputs else None
    if size is not None and out.terms and size != out.obs_size:
        f.bad(
            f"{o.path.name}: input obs takes {size} values, deploy.yaml's observations make {out.obs_size} "
            f"({' + '.join(f'{t.name} {t.size * t.history}' for t in out.terms)}); the deploy binds the model's "
            "size and reads past or short of its buffer without an error (unitree_rl_mjlab #23)"
        )
    first = o.output_order[0] if o.output_order else None
    shape = o.outputs.get(first, [])
    if first is not None and o.static(first) and (len(shape) != 2 or shape[1] != out.action_dim):
        f.bad(f"{o.path.name}: output 0 '{first}' has shape {shape}; the deploy reads [1, {out.action_dim}]")
    if o.opset > ORT_MAX_OPSET:
        f.bad(f"{o.path.name}: opset {o.opset}; the deploy's onnxruntime 1.22.0 supports up to {ORT_MAX_OPSET}")
    f.fact(f"ONNX {o.path.name}: obs {o.inputs.get('obs')} -> {first} {shape}, opset {o.opset}")


def _read_motion(out: UnitreeFiles, spec: RobotSpec, f: Findings, motion: Path | None) -> None:
    entry = find_fsm_entry(out.folder)
    suffix = ".npz" if out.stack == MJLAB else ".csv"
    if motion is None and entry is not None and str(entry[1].get("motion_file", "")).endswith(suffix):
        proj, state = entry  # a config naming this stack's kind of motion file (an export may carry both kinds)
        motion = proj / str(state["motion_file"])
        if state.get("fps") is not None:
            out.fps = float(state["fps"])
        out.time_start = float(state.get("time_start", 0.0) or 0.0)
    if motion is None:
        found = sorted((out.folder / "params").glob(f"*{suffix}"))
        motion = found[0] if len(found) == 1 else None
    if motion is None:
        f.bad(f"{out.folder}: no motion file (a config/config.yaml FSM entry's motion_file, or one params/*{suffix})")
        return
    out.motion_path = Path(motion)
    if not out.motion_path.is_file():
        f.bad(f"motion file {out.motion_path}: no such file")
        return
    n = out.ids.size if out.ids is not None else spec.num_joints
    if out.stack == MJLAB:
        _read_npz(out, n, f)
    else:
        _read_csv(out, n, f)


def _read_npz(out: UnitreeFiles, n: int, f: Findings) -> None:
    p = out.motion_path
    try:
        z = np.load(p)
    except (OSError, ValueError) as exc:
        f.bad(f"{p.name}: not an NPZ ({str(exc)[:80]})")
        return
    with z:
        keys = ("body_pos_w", "body_quat_w", "joint_pos", "joint_vel")
        missing = [k for k in keys if k not in z.files]
        if missing:
            f.bad(f"{p.name}: lacks {', '.join(missing)} (cnpy's npz_data[...] is empty: State_Mimic.h:50-55)")
            return
        a = {k: z[k] for k in keys}
        fps = float(np.asarray(z["fps"]).ravel()[0]) if "fps" in z.files else None
    for k, v in a.items():
        if v.dtype != np.float32:
            f.bad(f"{p.name}: {k} is {v.dtype}; the loader reads the bytes as float32 (State_Mimic.h:69-88)")
    t = a["joint_pos"].shape[0]
    shapes = {"body_pos_w": (t, None, 3), "body_quat_w": (t, None, 4), "joint_pos": (t, n), "joint_vel": (t, n)}
    for k, want in shapes.items():
        got = a[k].shape
        if len(got) != len(want) or any(w is not None and g != w for g, w in zip(got, want, strict=True)):
            f.bad(
                f"{p.name}: {k} has shape {list(got)}, expected "
                f"[{t}, {', '.join(str(w or 'bodies') for w in want[1:])}]"
            )
            return
    if t < 2:
        f.bad(f"{p.name}: {t} frames; expected at least 2")
        return
    if fps is not None and abs(fps - 1.0 / NPZ_DT) > 1e-3:
        f.bad(f"{p.name}: fps {fps:g}; the loader plays every file at 50 Hz (State_Mimic.h:39)")
    quat_w = a["body_quat_w"][:, 0].astype(np.float64)
    if np.any(np.abs(np.linalg.norm(quat_w, axis=1) - 1.0) > 1e-3):
        f.bad(f"{p.name}: body_quat_w[:, 0] is not unit (w x y z expected)")
    out.root_pos = a["body_pos_w"][:, 0].astype(np.float32)
    out.root_quat = a["body_quat_w"][:, 0].astype(np.float32)
    out.joint_pos = a["joint_pos"].astype(np.float32)
    out.joint_vel = a["joint_vel"].astype(np.float32)
    out.fps = 1.0 / NPZ_DT
    f.fact(f"motion {p.name}: {t} frames at 50 Hz ({t * NPZ_DT:.2f} s), {a['body_pos_w'].shape[1]} bodies")


def _read_csv(out: UnitreeFiles, n: int, f: Findings) -> None:
    p = out.motion_path
    rows = []
    for i, line in enumerate(p.read_text().splitlines()):
        if not line.strip():
            continue
        try:
            rows.append([float(x) for x in line.split(",")])
        except ValueError:
            f.bad(f"{p.name} row {i + 1}: a value is not a number (std::stof fails; the row comes out short)")
            return
    widths = {len(r) for r in rows}
    if not rows or widths != {7 + n}:
        f.bad(f"{p.name}: rows of {sorted(widths)} values; expected 7 + {n} (root xyz, quaternion xyzw, joints)")
        return
    data = np.asarray(rows, np.float32)
    if len(data) < 2:
        f.bad(f"{p.name}: {len(data)} frames; expected at least 2")
        return
    if out.fps is None or not out.fps > 0:
        f.bad(f"{p.name}: no fps (config/config.yaml FSM.<state>.fps; MotionLoader_(motion_file, fps))")
        return
    q = data[:, [6, 3, 4, 5]]  # Quaternionf(data[6], data[3], data[4], data[5]): w x y z
    if np.any(np.abs(np.linalg.norm(q.astype(np.float64), axis=1) - 1.0) > 1e-3):
        f.bad(f"{p.name}: columns 4-7 are not a unit quaternion x y z w")
    dt = np.float32(1.0) / np.float32(out.fps)
    out.root_pos, out.root_quat, out.joint_pos = data[:, :3], q, data[:, 7:]
    vel = (data[1:, 7:] - data[:-1, 7:]) / dt
    out.joint_vel = np.concatenate([vel, vel[-1:]], axis=0)
    f.fact(f"motion {p.name}: {len(data)} frames at {out.fps:g} fps ({len(data) / out.fps:.2f} s)")


FOOT_CAPSULE = re.compile(r"^(left|right)_foot[1-7]_collision$")


def mjlab_full_collision(spec) -> str | None:  # noqa: ANN001 - mujoco.MjSpec
    """mjlab's G1 ``FULL_COLLISION`` (unitree_rl_mjlab 5b7e396 ``mjlab/asset_zoo/robots/unitree_g1/
    g1_constants.py:234-241``, applied by ``mjlab/utils/spec_config.py:206-237``): every ``*_collision`` geom
    collides (contype 1, conaffinity 1) with condim 1, the 14 sole capsules with condim 3, priority 1 and
    friction 0.6; other geoms do not collide. The XML alone has condim 6, priority 1, friction 1 on every
    collision geom. A model without mjlab's sole capsules is left as it is (returns None)."""
    geoms = [g for g in spec.geoms if g.name and g.name.endswith("_collision")]
    if not any(FOOT_CAPSULE.match(g.name) for g in geoms):
        return None
    names = {g.name for g in geoms}
    for g in spec.geoms:
        if g.name in names:
            foot = bool(FOOT_CAPSULE.match(g.name))
            g.contype, g.conaffinity = 1, 1
            g.condim, g.priority = (3, 1) if foot else (1, 0)
            if foot:
                g.friction[0] = 0.6
        else:
            g.contype, g.conaffinity = 0, 0
    return "mjlab FULL_COLLISION (g1_constants.py:234-241): condim 1, soles condim 3, friction 0.6"
