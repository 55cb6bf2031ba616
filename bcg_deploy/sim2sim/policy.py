"""The exported policy as sim2sim sees it: an onnxruntime session plus its validated metadata.

sim2sim reads nothing but the ONNX file (graph + ``metadata_props``) and the packaged robot model;
it never imports the training or export code. Every way the file can be unusable (unreadable, no
metadata, wrong inputs, wrong joint count or order, other robot model) is a one-line ``BcgdError``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bcg_deploy.errors import BcgdError
from bcg_deploy.integrity import check_integrity
from bcg_deploy.motions.motion import Motion
from bcg_deploy.robots import RobotSpec

INPUT_NAMES = ("base_pos", "base_quat", "base_lin_vel", "base_ang_vel", "joint_pos", "joint_vel", "time_step")
TARGET_OUTPUT = "joint_pos_target"
REF_KEYS = ("joint_pos", "joint_vel", "body_pos_w", "body_quat_w", "body_lin_vel_w", "body_ang_vel_w")
# Output names the reference frame may carry (an output cannot share the name of an input).
_REF_PREFIXES = ("", "ref_", "reference_", "motion_")
# Logical field -> accepted keys: BeyondMimic profile (comma-separated) first, holosoma profile (JSON).
FIELD_KEYS = {
    "joint_names": ("joint_names", "dof_names"),
    "kp": ("joint_stiffness", "kp"),
    "kd": ("joint_damping", "kd"),
    "default_joint_pos": ("default_joint_pos",),
    "body_names": ("body_names",),
}
REQUIRED_KEYS = ("bcgd.control_dt", "bcgd.effort_limit", "bcgd.robot", "bcgd.motion")


@dataclass(frozen=True)
class PolicyMetadata:
    """What sim2sim needs from ``metadata_props``, parsed and checked (arrays in joint order, float64)."""

    joint_names: tuple[str, ...]
    body_names: tuple[str, ...]
    kp: np.ndarray  # N m / rad
    kd: np.ndarray  # N m s / rad
    default_joint_pos: np.ndarray  # rad
    action_scale: np.ndarray | None
    effort_limit: np.ndarray  # N m
    armature: np.ndarray | None  # kg m^2
    control_dt: float  # s
    physics_dt: float | None  # s, of the training simulator
    robot: dict
    motion: dict
    num_frames: int
    input_noise: dict | None
    domain_randomization: dict | None
    push: dict | None
    obs_noise_scale: float | None  # multiple of input_noise in training (bcgd.training); None: not recorded
    exporter_version: str | None
    raw: dict = field(repr=False, default_factory=dict)
    input_noise_source: str = "metadata bcgd.input_noise"
    """Where ``input_noise`` comes from (a foreign policy's: its stack's training noise)."""


def _field_key(meta: dict, field: str) -> str | None:
    return next((k for k in FIELD_KEYS[field] if k in meta), None)


def _list(meta: dict, key: str, path: Path) -> list:
    """A list-valued key: JSON (``[...]``, holosoma profile) or comma-separated (BeyondMimic profile)."""
    text = meta[key].strip()
    if text.startswith("["):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise BcgdError(f"{path}: metadata {key!r} is not valid JSON") from None
        if not isinstance(value, list):
            raise BcgdError(f"{path}: metadata {key!r} is not a list")
        return value
    if text.startswith('"'):  # a JSON string holding a comma-separated list
        text = json.loads(text)
    return [s.strip() for s in text.split(",")]


def _floats(meta: dict, key: str, path: Path) -> np.ndarray:
    try:
        return np.array([float(x) for x in _list(meta, key, path)], dtype=np.float64)
    except (TypeError, ValueError):
        raise BcgdError(f"{path}: metadata {key!r} is not a list of numbers") from None


def _json(meta: dict, key: str, path: Path):
    if key not in meta:
        return None
    try:
        return json.loads(meta[key])
    except json.JSONDecodeError:
        raise BcgdError(f"{path}: metadata {key!r} is not valid JSON") from None


def _training_noise_scale(meta: dict, path: Path) -> float | None:
    """``bcgd.training.obs_noise_scale``: None when the export predates it, else a finite number >= 0."""
    training = _json(meta, "bcgd.training", path)
    scale = training.get("obs_noise_scale") if isinstance(training, dict) else None
    if scale is None:
        return None
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (math.isfinite(scale) and scale >= 0):
        raise BcgdError(f"{path}: metadata bcgd.training obs_noise_scale = {scale!r}: expected a number >= 0")
    return float(scale)


def parse_metadata(meta: dict[str, str], path: Path, spec: RobotSpec, force: bool = False) -> PolicyMetadata:
    """Parse and validate ``metadata_props`` against the packaged robot ``spec``.

    The robot model hash must match ``spec.model_hash`` unless ``force``; joint names must be the
    robot's, in its order.
    """
    if not any(k.startswith("bcgd.") for k in meta):
        raise BcgdError(f"{path}: no bcgd metadata in the ONNX file; expected a policy written by `bcgd export`")
    keys = {f: _field_key(meta, f) for f in FIELD_KEYS}
    missing = [FIELD_KEYS[f][0] for f, k in keys.items() if k is None] + [k for k in REQUIRED_KEYS if k not in meta]
    if missing:
        raise BcgdError(f"{path}: metadata is missing {', '.join(missing)}; expected a policy written by `bcgd export`")
    joints = tuple(str(s) for s in _list(meta, keys["joint_names"], path))
    if len(joints) != spec.num_joints:
        raise BcgdError(
            f"{path}: metadata {keys['joint_names']} has {len(joints)} joints, robot {spec.name} has {spec.num_joints}"
        )
    if joints != spec.joint_names:
        bad = next(i for i, (a, b) in enumerate(zip(joints, spec.joint_names, strict=True)) if a != b)
        raise BcgdError(
            f"{path}: joint {bad} is {joints[bad]!r}, robot {spec.name} has {spec.joint_names[bad]!r} "
            "(joint order must be the robot's)"
        )
    bodies = tuple(str(s) for s in _list(meta, keys["body_names"], path))
    if bodies != spec.body_names:
        raise BcgdError(f"{path}: metadata body_names ({len(bodies)}) differ from robot {spec.name}'s bodies")
    robot = _json(meta, "bcgd.robot", path)
    if not isinstance(robot, dict) or "model_hash" not in robot:
        raise BcgdError(f"{path}: metadata bcgd.robot must be a JSON object with name and model_hash")
    if robot.get("name") != spec.name and not force:
        raise BcgdError(f"{path}: policy is for robot {robot.get('name')!r}, not {spec.name!r}; pass --force to run")
    if robot["model_hash"] != spec.model_hash and not force:
        raise BcgdError(
            f"{path}: policy was trained on robot model {str(robot['model_hash'])[:12]}, the packaged "
            f"{spec.name} model is {spec.model_hash[:12]}; pass --force to run anyway"
        )
    vectors = {keys[f]: _floats(meta, keys[f], path) for f in ("kp", "kd", "default_joint_pos")}
    action_scale = _floats(meta, "action_scale", path) if "action_scale" in meta else None
    effort = np.asarray(_json(meta, "bcgd.effort_limit", path), dtype=np.float64)
    armature = _json(meta, "bcgd.armature", path)
    armature = None if armature is None else np.asarray(armature, dtype=np.float64)
    for key, v in [*vectors.items(), ("bcgd.effort_limit", effort), ("bcgd.armature", armature)]:
        if v is not None and v.shape != (spec.num_joints,):
            raise BcgdError(f"{path}: metadata {key!r} has {v.size} values, expected {spec.num_joints}")
    if action_scale is not None and action_scale.size not in (1, spec.num_joints):
        raise BcgdError(f"{path}: metadata 'action_scale' has {action_scale.size} values, expected {spec.num_joints}")
    if np.any(effort <= 0):
        raise BcgdError(f"{path}: metadata 'bcgd.effort_limit' must be positive")
    quat_order = _json(meta, "bcgd.quat_order", path)
    if quat_order is not None and str(quat_order).lower() != "wxyz":
        raise BcgdError(f"{path}: metadata bcgd.quat_order is {quat_order!r}; sim2sim expects 'wxyz'")
    control_dt = _json(meta, "bcgd.control_dt", path)
    if not isinstance(control_dt, (int, float)) or not control_dt > 0:
        raise BcgdError(f"{path}: metadata bcgd.control_dt = {control_dt!r}: expected seconds > 0")
    motion = _json(meta, "bcgd.motion", path)
    if not isinstance(motion, dict) or int(motion.get("num_frames", 0)) < 2:
        raise BcgdError(f"{path}: metadata bcgd.motion must give num_frames >= 2")
    physics_dt = _json(meta, "bcgd.physics_dt", path)
    exporter = _json(meta, "bcgd.exporter_version", path)
    return PolicyMetadata(
        joint_names=joints,
        body_names=bodies,
        kp=vectors[keys["kp"]],
        kd=vectors[keys["kd"]],
        default_joint_pos=vectors[keys["default_joint_pos"]],
        action_scale=action_scale,
        effort_limit=effort,
        armature=armature,
        control_dt=float(control_dt),
        physics_dt=None if physics_dt is None else float(physics_dt),
        robot=robot,
        motion=motion,
        num_frames=int(motion["num_frames"]),
        input_noise=_json(meta, "bcgd.input_noise", path),
        domain_randomization=_json(meta, "bcgd.domain_randomization", path),
        push=_json(meta, "bcgd.push", path),
        obs_noise_scale=_training_noise_scale(meta, path),
        exporter_version=None if exporter is None else str(exporter),
        raw=dict(meta),
    )


def make_inputs(num_joints: int) -> dict[str, np.ndarray]:
    """Zeroed float32 [1, n] arrays for every policy input (the feeds of :meth:`OnnxPolicy.act`)."""
    dims = {"base_pos": 3, "base_quat": 4, "base_lin_vel": 3, "base_ang_vel": 3}
    dims |= {"joint_pos": num_joints, "joint_vel": num_joints, "time_step": 1}
    return {k: np.zeros((1, n), np.float32) for k, n in dims.items()}


def _session(path: Path):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types for every kind of bad file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        first = first.replace("[", "(").replace("]", ")")
        raise BcgdError(f"cannot read policy {path}: not a loadable ONNX model ({first[:160]})") from None


class OnnxPolicy:
    """An exported bcgd policy: ``act`` maps raw robot state to joint position targets.

    Inputs (float32, batch 1): base_pos [3] world, base_quat [4] w x y z, base_lin_vel [3] world,
    base_ang_vel [3] base frame, joint_pos [J], joint_vel [J] (robot joint order), time_step [1]
    (control step index into the clip). Output used: ``joint_pos_target`` [J] (rad).
    """

    def __init__(self, path: str | Path, spec: RobotSpec, force: bool = False):
        path = Path(path)
        if not path.is_file():
            raise BcgdError(f"cannot read policy {path}: no such file")
        if not os.access(path, os.R_OK):
            raise BcgdError(f"cannot read policy {path}: permission denied")
        self.path = path
        data = path.read_bytes()
        self.sha256 = hashlib.sha256(data).hexdigest()
        self.session = _session(path)
        raw_meta = self.session.get_modelmeta().custom_metadata_map
        if not any(k.startswith("bcgd.") for k in raw_meta):
            raise BcgdError(
                f"{path}: an ONNX model with no bcgd metadata, not written by bcgd export ({self._io_text()}); "
                "sim2sim needs the joint order, gains, action scale and reference clip that bcgd export records"
            )
        # a file changed since its export is refused; None: the hash matched, else why it was not checked
        self.integrity_note = check_integrity(data, f"policy {path}")
        self.profile = None  # a deployable ObsProfile: the obs contract (sim2sim builds the observation)
        ins = {i.name for i in self.session.get_inputs()}
        if "obs" in ins:
            self._check_obs_io(spec, raw_meta)
        else:
            self._check_io(spec)
        self.meta = parse_metadata(raw_meta, path, spec, force)
        if self.profile is not None and self.meta.action_scale is None:
            raise BcgdError(
                f"{self.path}: metadata has no action_scale (the stack's target = default + scale x action)"
            )
        self.num_joints = spec.num_joints
        self._bound_inputs: dict | None = None

    def _io_text(self) -> str:
        def io(values) -> str:  # noqa: ANN001 - onnxruntime NodeArg list
            return ", ".join(f"{v.name} [{', '.join(str(d) for d in v.shape)}]" for v in values) or "none"

        return f"inputs {io(self.session.get_inputs())}; outputs {io(self.session.get_outputs())}"

    def _check_obs_io(self, spec: RobotSpec, meta: dict) -> None:
        """An ``obs`` signature: only a deployable profile's (the observation is built here, by term name)."""
        from bcg_deploy.sim2sim.obs_contract import profile_for_names  # loads torch: only an obs signature needs it

        ins = {i.name: i for i in self.session.get_inputs()}
        declared = _json(meta, "bcgd.profile", self.path)
        if declared in (None, "paper"):
            raise BcgdError(
                f"{self.path}: inputs ({', '.join(ins)}) carry the paper profile's 849-value observation, which no "
                "deploy stack builds; sim2sim runs the raw-state signature (bcgd export's default) or a deployable "
                "profile (bcgd export --profile beyondmimic|beyondmimic_wose|unitree)"
            )
        if "observation_names" not in meta:
            raise BcgdError(f"{self.path}: metadata has no observation_names (the terms to build)")
        names = tuple(s.strip() for s in meta["observation_names"].split(","))
        self.profile = profile_for_names(names, declared, str(self.path))
        if set(ins) - {"obs", "time_step"}:
            raise BcgdError(f"{self.path}: inputs ({', '.join(ins)}): expected obs [, time_step]")
        shape = ins["obs"].shape
        if list(shape) != [1, self.profile.obs_dim]:
            got = "(" + ", ".join(str(x) for x in shape) + ")"
            raise BcgdError(f"{self.path}: input obs has shape {got}, expected (1, {self.profile.obs_dim})")
        self.batch_dynamic = False
        outs = [o.name for o in self.session.get_outputs()]
        if "actions" not in outs:
            raise BcgdError(f"{self.path}: no output 'actions' (outputs: {', '.join(outs)})")
        self.ref_outputs = {k: k for k in REF_KEYS if k in outs}
        self._obs_feeds = {"obs": np.zeros((1, self.profile.obs_dim), np.float32)}
        if "time_step" in ins:
            self._obs_feeds["time_step"] = np.zeros((1, 1), np.float32)

    def run_obs(self, obs: np.ndarray, time_step: int) -> np.ndarray:
        """``actions`` (float64 [J]) of an obs-signature policy for the observation ``obs`` [1, N]."""
        self._obs_feeds["obs"][:] = obs
        if "time_step" in self._obs_feeds:
            self._obs_feeds["time_step"][0, 0] = time_step
        return self.session.run(["actions"], self._obs_feeds)[0][0].astype(np.float64)

    def _check_io(self, spec: RobotSpec) -> None:
        ins = {i.name: i for i in self.session.get_inputs()}
        if set(ins) != set(INPUT_NAMES):
            raise BcgdError(
                f"{self.path}: inputs ({', '.join(ins)}) do not match the expected ({', '.join(INPUT_NAMES)})"
            )
        dims = {"base_pos": 3, "base_quat": 4, "base_lin_vel": 3, "base_ang_vel": 3, "time_step": 1}
        dims |= {"joint_pos": spec.num_joints, "joint_vel": spec.num_joints}
        for name, n in dims.items():
            shape = ins[name].shape
            if len(shape) != 2 or (isinstance(shape[1], int) and shape[1] != n):
                got = "(" + ", ".join(str(x) for x in shape) + ")"
                raise BcgdError(f"{self.path}: input {name} has shape {got}, expected (batch, {n})")
        self.batch_dynamic = not isinstance(ins["time_step"].shape[0], int)
        outs = [o.name for o in self.session.get_outputs()]
        if TARGET_OUTPUT not in outs:
            raise BcgdError(f"{self.path}: no output {TARGET_OUTPUT!r} (outputs: {', '.join(outs)})")
        self.ref_outputs = {}
        for key in REF_KEYS:
            for p in _REF_PREFIXES:
                if p + key in outs and p + key not in ins:
                    self.ref_outputs[key] = p + key
                    break
            else:
                raise BcgdError(f"{self.path}: no reference output for {key} (outputs: {', '.join(outs)})")

    def act(self, inputs: dict[str, np.ndarray], time_step: int) -> np.ndarray:
        """Joint position targets (rad, float64 [J]) for raw ``inputs`` (see :func:`make_inputs`).

        The arrays of ``inputs`` are bound to the session once (onnxruntime IOBinding, no copies);
        write new values into them in place between calls.
        """
        if inputs is not self._bound_inputs:
            self._bind(inputs)
        inputs["time_step"][0, 0] = time_step
        self.session.run_with_iobinding(self._binding)
        return self._target.astype(np.float64)[0]

    def _bind(self, inputs: dict[str, np.ndarray]) -> None:
        import onnxruntime as ort

        for name in INPUT_NAMES:
            a = inputs[name]
            if a.dtype != np.float32 or a.shape != (1, a.shape[1]) or not a.flags.c_contiguous:
                raise ValueError(f"policy input {name} must be a C-contiguous float32 [1, n] array")
        binding = self.session.io_binding()
        for name in INPUT_NAMES:
            binding.bind_cpu_input(name, inputs[name])
        self._target = np.zeros((1, self.num_joints), np.float32)
        binding.bind_ortvalue_output(TARGET_OUTPUT, ort.OrtValue.ortvalue_from_numpy(self._target))
        self._binding, self._bound_inputs = binding, inputs

    def reference(self) -> Motion:
        """The reference clip baked into the graph: its outputs at time_step 0 .. num_frames - 1 (an obs
        signature without them, unitree's: the motion NPZ the stack reads, ``params/<motion>.npz``)."""
        t = self.meta.num_frames
        if self.profile is not None and len(self.ref_outputs) < len(REF_KEYS):
            return self._npz_reference()
        names = [self.ref_outputs[k] for k in REF_KEYS]
        one = make_inputs(self.num_joints) if self.profile is None else dict(self._obs_feeds)
        if self.profile is not None:
            rows = []
            for i in range(t):
                one["time_step"] = np.full((1, 1), i, np.float32)
                rows.append(self.session.run(names, one))
            outs = [np.concatenate([r[n] for r in rows]) for n in range(len(names))]
        elif self.batch_dynamic:
            feeds = {k: np.repeat(v, t, axis=0) for k, v in one.items()}
            feeds["base_quat"][:, 0] = 1.0
            feeds["time_step"][:, 0] = np.arange(t, dtype=np.float32)
            outs = self.session.run(names, feeds)
        else:
            feeds = one
            feeds["base_quat"][0, 0] = 1.0
            rows = []
            for i in range(t):
                feeds["time_step"][0, 0] = i
                rows.append(self.session.run(names, feeds))
            outs = [np.concatenate([r[n] for r in rows]) for n in range(len(names))]
        arrays = {k: np.asarray(o, dtype=np.float64) for k, o in zip(REF_KEYS, outs, strict=True)}
        nb, nj = len(self.meta.body_names), self.num_joints
        want = {"joint_pos": (t, nj), "joint_vel": (t, nj), "body_pos_w": (t, nb, 3), "body_quat_w": (t, nb, 4)}
        want |= {"body_lin_vel_w": (t, nb, 3), "body_ang_vel_w": (t, nb, 3)}
        for key, shape in want.items():
            if arrays[key].size != int(np.prod(shape)):
                got = "x".join(str(x) for x in arrays[key].shape)
                raise BcgdError(
                    f"{self.path}: output {self.ref_outputs[key]} over {t} time steps has shape {got}, "
                    f"expected {'x'.join(map(str, shape))}"
                )
            arrays[key] = arrays[key].reshape(shape)
        name = self.meta.motion.get("name") or self.path.stem
        return Motion.from_bodies(
            1.0 / self.meta.control_dt, **arrays, name=name, source={"kind": "policy", "file": self.path.name}
        )

    def _npz_reference(self) -> Motion:
        """unitree_rl_mjlab layout: ``<dir>/exported/policy.onnx`` beside ``<dir>/params/<motion>.npz``."""
        root = self.path.parent.parent if self.path.parent.name == "exported" else self.path.parent
        path = root / "params" / f"{self.meta.motion.get('name') or 'motion'}.npz"
        if not path.is_file():
            raise BcgdError(
                f"{self.path}: no reference outputs and no motion file {path} (bcgd export --profile unitree)"
            )
        with np.load(path) as z:
            missing = [k for k in REF_KEYS if k not in z.files]
            if missing:
                raise BcgdError(f"{path}: motion file lacks {', '.join(missing)}")
            arrays = {k: np.asarray(z[k], np.float64) for k in REF_KEYS}
        name = self.meta.motion.get("name") or path.stem
        return Motion.from_bodies(
            1.0 / self.meta.control_dt, **arrays, name=name, source={"kind": "motion_file", "file": path.name}
        )
