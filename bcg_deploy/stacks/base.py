"""What every deploy-stack module shares: the facts a stack states, the findings of reading its files, the ONNX
facts a stack binds, and the reference clip at the control rate built from what a stack's motion file holds.

Conventions: world frame z up, metres, radians, quaternions w x y z inside (a file's x y z w is converted
where it is read). "Model order" is the G1's joint order, ``RobotSpec.joint_names`` (the MJCF hinge order,
equal to the G1 SDK motor order); a stack's policy may use another order ("policy order"), mapped by name
or by the stack's own index map.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import mujoco
import numpy as np

from bcg_deploy.errors import BcgdError
from bcg_deploy.motions.motion import Motion
from bcg_deploy.robots import RobotSpec
from bcg_deploy.rotations import quat_numpy as quat
from bcg_deploy.sim2sim.reference import reference_from_states


@dataclass(frozen=True)
class Behaviour:
    """One thing a stack's runtime does (``name``: a few words; ``text``), where its code does it, and whether
    sim2sim models it."""

    name: str
    text: str
    source: str
    modelled: str = "yes"
    """"yes", or "no: <why>"."""


@dataclass(frozen=True)
class StackInfo:
    """A deploy stack as its own code defines it (each field cites file:line at the commit read)."""

    name: str
    repo: str
    """owner/name@commit of the code read."""
    loads: tuple[str, ...]
    observation: str
    actions: str
    gains: str
    control: str
    motion: str
    behaviours: tuple[Behaviour, ...]
    model: str
    """The stack's own G1 model (path in its repository) and what its code adds to it."""

    def table(self) -> list[dict]:
        """The behaviours as rows (for the report)."""
        return [
            {"name": b.name, "behaviour": b.text, "source": b.source, "modelled": b.modelled} for b in self.behaviours
        ]


@dataclass
class Findings:
    """What reading a stack's files found: mismatches (the stack would fail or run a wrong contract; one line
    each) and notes (facts a user should know that do not stop the stack)."""

    mismatches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)

    def bad(self, message: str) -> None:
        self.mismatches.append(message)

    def note(self, message: str) -> None:
        self.notes.append(message)

    def fact(self, message: str) -> None:
        self.summary.append(message)


@dataclass
class OnnxFacts:
    """What a stack binds from an ONNX file: input/output names and static shapes, opset, metadata."""

    path: Path
    inputs: dict[str, list]
    outputs: dict[str, list]
    output_order: list[str]
    opset: int
    metadata: dict[str, str]
    sha256: str
    proto: object = field(repr=False, default=None)

    def static(self, name: str) -> bool:
        shape = self.inputs.get(name, self.outputs.get(name))
        return shape is not None and all(isinstance(d, int) and d > 0 for d in shape)

    def size(self, name: str) -> int | None:
        """Number of values of a static tensor (None when a dimension is symbolic)."""
        return int(np.prod(self.inputs.get(name, self.outputs.get(name)))) if self.static(name) else None


def read_onnx(path: Path, f: Findings) -> OnnxFacts | None:
    """The ONNX facts of ``path``; None (and a mismatch) when the file cannot be read as ONNX."""
    import onnx

    if not path.is_file():
        f.bad(f"{path}: no such file")
        return None
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises its own DecodeError and OSError subclasses
        why = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        f.bad(f"{path}: not a loadable ONNX model ({why})")
        return None
    for t in proto.graph.initializer:
        for e in t.external_data:
            if e.key == "location" and not (path.parent / e.value).is_file():
                f.bad(f"{path}: its weights are in {e.value}, which is not beside it (onnxruntime cannot load it)")
                return None
    init = {t.name for t in proto.graph.initializer}

    def shape(v) -> list:
        return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in v.type.tensor_type.shape.dim]

    inputs = {v.name: shape(v) for v in proto.graph.input if v.name not in init}
    outputs = {v.name: shape(v) for v in proto.graph.output}
    opset = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)
    meta = {p.key: p.value for p in proto.metadata_props}
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return OnnxFacts(path, inputs, outputs, [v.name for v in proto.graph.output], opset, meta, digest, proto)


def check_static(o: OnnxFacts, f: Findings, stack: str) -> None:
    """Every input and output must have static positive dimensions (the C++ stacks size their buffers from
    the model's shapes: a symbolic dimension reads as -1)."""
    for name, shape in [*o.inputs.items(), *o.outputs.items()]:
        if not o.static(name):
            f.bad(f"{o.path.name}: {name} has shape {shape}; {stack} needs static dimensions (batch 1)")


def session(path: Path):
    """An onnxruntime session on one thread (each sim2sim worker process owns one core)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own exception types
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0].replace("[", "(").replace("]", ")")
        raise BcgdError(f"cannot load policy {path}: {first[:160]}") from None


def table_rows(o: OnnxFacts, output: str) -> int | None:
    """Rows of the constant table an output is gathered from (the clip's frame count of a reference output
    ``table[clamp(time_step)]``); None when the graph does not have that form."""
    from onnx import numpy_helper

    g = o.proto.graph
    producer = {out: n for n in g.node for out in n.output}
    inits = {t.name: list(t.dims) for t in g.initializer}
    name = output
    for _ in range(8):
        node = producer.get(name)
        if node is None:
            return None
        if node.op_type == "Gather":
            data = node.input[0]
            if data in inits:
                return int(inits[data][0])
            src = producer.get(data)
            if src is not None and src.op_type == "Constant":
                value = next((a for a in src.attribute if a.name == "value"), None)
                return None if value is None else int(numpy_helper.to_array(value.t).shape[0])
            return None
        if node.op_type in ("Identity", "Cast", "Reshape", "Squeeze", "Unsqueeze"):
            name = node.input[0]
            continue
        return None
    return None


def joint_permutation(names: list[str], spec: RobotSpec, what: str, f: Findings) -> np.ndarray | None:
    """``perm`` with ``model_vec = policy_vec[perm]`` for a policy whose joints are ``names``; None (and a
    mismatch) unless ``names`` are exactly the robot's joints, each once."""
    want = set(spec.joint_names)
    missing = [n for n in spec.joint_names if n not in names]
    extra = [n for n in names if n not in want]
    if missing or extra or len(names) != len(set(names)):
        bad = (missing and f"lacks {missing[0]}") or (extra and f"has {extra[0]}, not a G1 joint") or "repeats a joint"
        f.bad(f"{what}: {len(names)} joints, {bad}; expected the G1's {spec.num_joints} joints")
        return None
    return np.array([names.index(n) for n in spec.joint_names], dtype=int)


@dataclass
class RootMotion:
    """A reference clip as a stack supplies it, at the control rate: pelvis pose and joints (model order)."""

    fps: float
    root_pos: np.ndarray  # [T, 3] m, world
    root_quat: np.ndarray  # [T, 4] w x y z
    joint_pos: np.ndarray  # [T, J] rad, model order
    joint_vel: np.ndarray  # [T, J] rad/s, model order
    source: dict
    """Where the clip comes from, as ``Motion.source``: ``{"kind": "policy" | "motion_file", "file": name}``."""

    @property
    def num_frames(self) -> int:
        return int(self.joint_pos.shape[0])


def reference_of(motion: RootMotion, spec: RobotSpec) -> Motion:
    """The reference ``Motion`` (bodies ``spec.body_names``, root = the pelvis body) of a root motion, by forward
    kinematics on the packaged G1 (every G1 model read here, ours, mjlab's, holosoma's, has the same link
    offsets). Root velocity: central differences of the positions (world) and of the orientations
    (``quat.angular_velocity_world``); joint velocities as the stack supplies them."""
    m = spec.load_model()
    dt = 1.0 / motion.fps
    t = motion.num_frames
    q = quat.normalize(quat.make_continuous(np.asarray(motion.root_quat, np.float64)))
    lin = np.gradient(motion.root_pos, dt, axis=0) if t > 1 else np.zeros((t, 3))
    ang_w = quat.angular_velocity_world(q, dt) if t > 1 else np.zeros((t, 3))
    ang_b = quat.rotate(quat.conj(q), ang_w)
    qpos = np.concatenate([motion.root_pos, q, motion.joint_pos], axis=1)
    qvel = np.concatenate([lin, ang_b, motion.joint_vel], axis=1)
    full = reference_from_states(m, qpos, qvel, motion.fps)
    ids = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, n) - 1 for n in spec.body_names]
    return Motion.from_bodies(
        motion.fps,
        np.asarray(motion.joint_pos, np.float64),
        np.asarray(motion.joint_vel, np.float64),
        full.body_pos_w[:, ids],
        full.body_quat_w[:, ids],
        full.body_lin_vel_w[:, ids],
        full.body_ang_vel_w[:, ids],
        name=Path(str(motion.source.get("file", ""))).stem,
        source=motion.source,
    )


def yaw_matrix(r: np.ndarray) -> np.ndarray:
    """The yaw rotation of ``r`` (3x3): heading of its x axis, atan2(r10, r00); the same angle as the stacks'
    ``yawQuaternion`` (atan2(2(wz + xy), 1 - 2(y^2 + z^2)) of the quaternion)."""
    y = np.arctan2(r[1, 0], r[0, 0])
    c, s = np.cos(y), np.sin(y)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]], dtype=r.dtype)


def quat_matrix(q: np.ndarray) -> np.ndarray:
    """Rotation matrix of a (not necessarily unit) quaternion w x y z, normalised first."""
    out = np.zeros(9)
    mujoco.mju_quat2Mat(out, np.asarray(q, np.float64) / np.linalg.norm(q))
    return out.reshape(3, 3)


def rot6(r: np.ndarray) -> np.ndarray:
    """First two columns of ``r``, row-major: r00 r01 r10 r11 r20 r21 (every stack's 6D orientation term)."""
    return np.asarray(r)[:, :2].reshape(6)
