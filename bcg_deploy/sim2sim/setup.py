"""What every run of one sim2sim evaluation shares: its settings (``Sim2SimConfig``), the MuJoCo model with
torque-motor PD, the reference clip, the policy and the injections resolved from its metadata
(``Sim2SimSetup``, from ``prepare``), and the report's record of them (``Sim2SimSetup.settings``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import mujoco
import numpy as np
import onnxruntime

import bcg_deploy
from bcg_deploy import motions
from bcg_deploy.errors import BcgdError
from bcg_deploy.fileio import file_sha256
from bcg_deploy.motions.library import load_query
from bcg_deploy.motions.motion import Motion
from bcg_deploy.robots import RobotSpec, load_robot
from bcg_deploy.sim2sim.injection import (
    DomainRandomization,
    InitNoise,
    PushConfig,
    SensorNoise,
    domain_randomization_from_metadata,
    init_noise_from_metadata,
    ms_to_steps,
    noise_levels,
    push_from_metadata,
)
from bcg_deploy.sim2sim.other_model import body_ids, load_mjcf
from bcg_deploy.sim2sim.policy import OnnxPolicy
from bcg_deploy.sim2sim.reference import reference_from_motion, reference_text

if TYPE_CHECKING:
    from bcg_deploy.stacks.replay import StackPolicy

DEFAULT_PHYSICS_DT = 0.002
MAX_LATENCY_MS = 1000.0
"""Largest action or observation latency accepted (ms): a second is far beyond any robot's loop."""


@dataclass
class Sim2SimConfig:
    """Settings of a sim2sim evaluation. Every injection is off by default; ``seed`` reproduces a report."""

    runs: int = 5
    """Seeded runs over the whole clip."""
    seed: int = 0
    physics_dt: float = DEFAULT_PHYSICS_DT
    """MuJoCo timestep (s); the control dt must be a whole multiple of it."""
    latency_ms: tuple[float, float] = (0.0, 0.0)
    """Action latency, uniform in [lo, hi] ms per control step, quantised to physics steps."""
    obs_latency_ms: tuple[float, float] = (0.0, 0.0)
    """Observation latency, uniform in [lo, hi] ms per control step, quantised to physics steps."""
    noise_scale: float = 0.0
    """Sensor noise on the raw inputs: SCALE x the training levels (metadata ``bcgd.input_noise``)."""
    init_noise: bool = True
    """Perturb each run's initial state like training's reset noise (seeded; policy runs only), so that
    runs differ even without other injections. False: every run starts exactly on reference frame 0."""
    randomize: bool = False
    """Training domain randomisation (metadata ``bcgd.domain_randomization``; METHOD.md defaults)."""
    push: bool = False
    """Training push schedule (metadata ``bcgd.push``; METHOD.md defaults)."""
    replay: bool = False
    """Drive the PD with the reference joint positions instead of the policy."""
    pin_base: bool = False
    """Set the free joint to the reference root pose and velocity before every physics step."""
    motion: str | None = None
    """Replay reference: a task/library motion name or a LAFAN1 CSV path (instead of the ONNX's clip)."""
    motion_start_s: float = 0.0
    motion_duration_s: float | None = None
    max_duration_s: float | None = None
    """Evaluate only the first seconds of the clip."""
    fall_height: float = 0.3
    stop_on_fall: bool = True
    force: bool = False
    """Run even if the policy was trained on another robot model (hash mismatch)."""
    stack: str | None = None
    """The deploy stack whose runtime replays an obs-signature policy (``bcg_deploy.stacks``); None: detected."""
    robot: str = "g1"
    mjcf: str | None = None
    """Replay in another G1 model (MJCF file): joints and bodies matched by name, PD gains, effort limits,
    armature and default pose from the ONNX, the model's own collision geometry (``other_model``)."""
    jobs: int = 0
    """Cores for the runs (this process + jobs - 1 workers; 1 = this process only; 0 = one per available core
    when the runs could simulate 100 s or more, ``parallel.AUTO_PARALLEL_S``). The report does not depend on
    it: each run draws only from its own seeded streams."""


@dataclass
class RunResult:
    """One run: scalar metrics (JSON) and time series (for the plot)."""

    index: int
    seed: list[int]
    fell: bool
    fall_time_s: float | None
    steps: int
    duration_s: float
    e_track_cm: float
    joint_rmse_rad: float
    root_pos_err_cm: float
    foot_penetration_mm: float
    torque_saturation: float
    randomization: dict | None = None
    initial_perturbation: dict | None = None  # InitDraw.summary(): the run's perturbed start
    pushes: int = 0
    wall_s: float = 0.0
    series: dict = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("series")
        d.pop("wall_s")
        return d


@dataclass
class Sim2SimSetup:
    """Everything shared by the runs of one evaluation."""

    spec: RobotSpec
    reference: Motion
    control_dt: float
    n_sub: int
    kp: np.ndarray
    kd: np.ndarray
    effort_limit: np.ndarray
    model: mujoco.MjModel
    policy: OnnxPolicy | StackPolicy | None = None
    dr: DomainRandomization | None = None
    push: PushConfig | None = None
    noise: SensorNoise | None = None
    init_noise: InitNoise | None = None
    notes: list[str] = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    body_ids: np.ndarray | None = None
    """MuJoCo body ids of the reference's bodies (default: bodies 1.. in order)."""


def build_model(
    spec: RobotSpec,
    physics_dt: float,
    effort_limit: np.ndarray,
    armature: np.ndarray | None,
    model: mujoco.MjModel | None = None,
):
    """The scene model (or ``model``, e.g. from ``--mjcf``) with torque motors (ctrl = N m, clamped to +/-
    effort) and our MuJoCo settings."""
    m = spec.load_model(scene=True) if model is None else model
    m.opt.timestep = physics_dt
    m.opt.integrator = mujoco.mjtIntegrator.mjINT_EULER
    m.actuator_gaintype[:] = mujoco.mjtGain.mjGAIN_FIXED
    m.actuator_biastype[:] = mujoco.mjtBias.mjBIAS_NONE
    m.actuator_gainprm[:] = 0.0
    m.actuator_gainprm[:, 0] = 1.0
    m.actuator_biasprm[:] = 0.0
    m.actuator_ctrllimited[:] = 1
    m.actuator_ctrlrange[:] = np.stack([-effort_limit, effort_limit], axis=1)
    m.actuator_forcelimited[:] = 1
    m.actuator_forcerange[:] = m.actuator_ctrlrange
    floor = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "floor")
    if floor < 0 or m.geom_type[floor] != mujoco.mjtGeom.mjGEOM_PLANE or np.any(m.geom_pos[floor] != 0.0):
        raise BcgdError(f"{spec.scene_path}: sim2sim needs a plane geom 'floor' at z = 0 (foot penetration)")
    if np.any(m.geom_quat[floor] != [1.0, 0.0, 0.0, 0.0]):
        raise BcgdError(f"{spec.scene_path}: the floor plane must be horizontal")
    hinge = joint_dofs(m)
    jnt = [int(m.actuator_trnid[a, 0]) for a in range(m.nu)]
    m.jnt_actfrcrange[jnt] = m.actuator_ctrlrange
    if armature is not None:
        m.dof_armature[hinge] = armature
    return m


def joint_dofs(m: mujoco.MjModel) -> np.ndarray:
    """Dof addresses of the hinges, in actuator (= RobotSpec joint) order."""
    return np.array([m.jnt_dofadr[int(m.actuator_trnid[a, 0])] for a in range(m.nu)])


def mujoco_settings(m: mujoco.MjModel) -> dict:
    return {
        "version": mujoco.__version__,
        "timestep": float(m.opt.timestep),
        "integrator": mujoco.mjtIntegrator(m.opt.integrator).name,
        "solver": mujoco.mjtSolver(m.opt.solver).name,
        "cone": mujoco.mjtCone(m.opt.cone).name,
        "iterations": int(m.opt.iterations),
        "tolerance": float(m.opt.tolerance),
        "impratio": float(m.opt.impratio),
        "pd": "explicit PD every physics step, torque motors (ctrl = clamped tau); no position actuators",
    }


def _load_motion_reference(cfg: Sim2SimConfig, spec: RobotSpec) -> Motion:
    """``--motion``: a LAFAN1 G1 CSV window, a task name, or the name of a file in the clip library."""
    name = str(cfg.motion)
    if name.lower().endswith(".csv") or Path(name).is_file():
        path = Path(name)
        if not path.is_file():
            raise BcgdError(f"motion file {path}: no such file")
        motion = motions.load_lafan1_csv(path, cfg.motion_start_s, cfg.motion_duration_s, spec)
    else:  # a task, or a file registered with `bcgd motions import` (its window: --start, --duration)
        q = motions.MotionQuery(name=name, start_s=cfg.motion_start_s, duration_s=cfg.motion_duration_s)
        motion = load_query(q, spec)
    ref = reference_from_motion(motion)
    if ref.body_pos_w.shape[1] != len(spec.body_names) or ref.joint_pos.shape[1] != spec.num_joints:
        raise BcgdError(f"motion {name}: arrays do not match robot {spec.name}'s bodies and joints")
    return ref


def prepare(onnx_path: str | Path | None, cfg: Sim2SimConfig) -> Sim2SimSetup:
    """Load and check the policy (and/or reference), build the model, resolve the injections."""
    _check_cfg(cfg)
    spec = load_robot(cfg.robot)
    notes: list[str] = []
    policy = None
    if onnx_path is not None:
        # in here: bcg_deploy.stacks reads sim2sim's reference and policy modules, so a module-level import would
        # make importing either package start the other half-way
        from bcg_deploy.stacks.replay import load_policy

        policy = load_policy(onnx_path, spec, cfg.stack, cfg.force)  # verified against its stack first
        meta = policy.meta
        notes.extend(getattr(policy, "notes", []))
        if policy.integrity_note:
            notes.append(f"policy: {policy.integrity_note}")
        if meta.robot.get("model_hash") not in (None, spec.model_hash):
            notes.append("robot model hash differs from the policy's (--force)")
        kp, kd, effort, control_dt, armature = meta.kp, meta.kd, meta.effort_limit, meta.control_dt, meta.armature
    elif cfg.replay and cfg.motion is not None:
        kp, kd, effort, armature = spec.kp, spec.kd, spec.effort_limit, None
        control_dt = None
        notes.append(f"no policy: PD gains and effort limits of the packaged {spec.name} (RobotSpec)")
    else:
        raise BcgdError("no policy given: pass POLICY.onnx, or --replay --motion NAME|CSV")
    if cfg.motion is not None:
        ref = _load_motion_reference(cfg, spec)
        if control_dt is None:
            control_dt = 1.0 / ref.fps
        elif abs(ref.fps * control_dt - 1.0) > 1e-6:
            raise BcgdError(
                f"motion {cfg.motion} is at {ref.fps:g} fps, the policy's control rate is {1 / control_dt:g} Hz"
            )
    else:
        _substeps(control_dt, cfg.physics_dt)
        ref = policy.reference()
    return _finish_setup(spec, ref, control_dt, kp, kd, effort, armature, cfg, policy, notes, onnx_path)


def setup_from_reference(reference: Motion, cfg: Sim2SimConfig) -> Sim2SimSetup:
    """A replay setup for any clip (a :class:`Motion`; no policy): the robot's own PD gains and effort limits,
    control dt = 1 / reference.fps. For library use and for tests on constructed trajectories."""
    _check_cfg(cfg)
    spec = load_robot(cfg.robot)
    notes = [f"no policy: PD gains and effort limits of the packaged {spec.name} (RobotSpec)"]
    control_dt = 1.0 / reference.fps
    return _finish_setup(spec, reference, control_dt, spec.kp, spec.kd, spec.effort_limit, None, cfg, None, notes)


def _check_cfg(cfg: Sim2SimConfig) -> None:
    if cfg.runs < 1:
        raise BcgdError(f"--runs {cfg.runs}: expected at least 1")
    if not cfg.physics_dt > 0:
        raise BcgdError(f"--physics-dt {cfg.physics_dt}: expected seconds > 0")
    if cfg.motion is not None and not cfg.replay:
        raise BcgdError("--motion is only used with --replay (a policy tracks the clip baked into its ONNX)")
    if cfg.pin_base and not cfg.replay:
        raise BcgdError("--pin-base is only used with --replay")
    if not (math.isfinite(cfg.noise_scale) and cfg.noise_scale >= 0):
        raise BcgdError(f"--noise {cfg.noise_scale}: expected a finite scale >= 0")
    for what, (lo, hi) in (("--latency", cfg.latency_ms), ("--obs-latency", cfg.obs_latency_ms)):
        if not (0 <= lo <= hi <= MAX_LATENCY_MS):
            raise BcgdError(f"{what} {lo:g}:{hi:g}: expected 0 <= LO <= HI <= {MAX_LATENCY_MS:g} ms")
    if cfg.max_duration_s is not None and not (math.isfinite(cfg.max_duration_s) and cfg.max_duration_s > 0):
        raise BcgdError(f"--max-seconds {cfg.max_duration_s}: expected seconds > 0")
    if not (math.isfinite(cfg.motion_start_s) and cfg.motion_start_s >= 0):
        raise BcgdError(f"--start {cfg.motion_start_s}: expected seconds >= 0")
    if cfg.motion_duration_s is not None and not (math.isfinite(cfg.motion_duration_s) and cfg.motion_duration_s > 0):
        raise BcgdError(f"--duration {cfg.motion_duration_s}: expected seconds > 0")
    if cfg.jobs < 0:
        raise BcgdError(f"--jobs {cfg.jobs}: expected 0 (one per core) or more")


def _substeps(control_dt: float, physics_dt: float) -> int:
    ratio = control_dt / physics_dt
    n_sub = int(round(ratio))
    if n_sub < 1 or abs(ratio - n_sub) > 1e-6:
        raise BcgdError(
            f"--physics-dt {physics_dt:g}: the control dt {control_dt:g} s must be a whole number of physics steps"
        )
    return n_sub


def _finish_setup(spec, ref, control_dt, kp, kd, effort, armature, cfg, policy, notes, onnx_path=None):
    meta = policy.meta if policy is not None else None
    if cfg.max_duration_s is not None:
        ref = ref.truncated(int(round(cfg.max_duration_s * ref.fps)) + 1)
    n_sub = _substeps(control_dt, cfg.physics_dt)
    other, ids = None, None
    if cfg.mjcf is not None:
        joints = meta.joint_names if meta else spec.joint_names
        bodies = meta.body_names if meta else spec.body_names
        anchor = [policy.profile.anchor_body] if policy is not None and policy.profile is not None else []
        other = load_mjcf(cfg.mjcf, joints, tuple(bodies) + tuple(anchor), getattr(policy, "model_edit", None))
        notes.extend(getattr(policy, "model_notes", []))
        ids = body_ids(other, bodies)
        notes.append(
            f"model {cfg.mjcf}: its own bodies, inertias and collision geometry; the policy's gains and armature"
        )
    model = build_model(spec, cfg.physics_dt, np.asarray(effort, np.float64), armature, other)
    setup = Sim2SimSetup(spec, ref, control_dt, n_sub, kp, kd, effort, model, policy, notes=notes, body_ids=ids)
    if other is not None and foot_geoms(model).size == 0:
        notes.append("foot penetration needs bcgd's foot contact spheres (*_foot_contact_*): n/a in this model")
    if cfg.randomize:
        setup.dr, note = domain_randomization_from_metadata(meta.domain_randomization if meta else None)
        notes.append(f"randomisation ranges: {note}")
        notes.append("training's action latency (0-1 control steps) is not part of --randomize: use --latency")
        if not np.any(model.dof_frictionloss[joint_dofs(model)]):
            notes.append("joint friction randomisation has no effect: the model's joint friction is 0")
    if cfg.push:
        push_meta = meta.push if meta else None
        if not push_meta and meta and isinstance(meta.domain_randomization, dict):
            push_meta = {k: v for k, v in meta.domain_randomization.items() if k.startswith("push_")} or None
        setup.push, note = push_from_metadata(push_meta)
        notes.append(f"push schedule: {note}")
    if cfg.noise_scale > 0:
        if policy is None or cfg.replay:
            notes.append("--noise has no effect on a replay (no policy reads the sensors)")
        levels, note = noise_levels(meta.input_noise if meta else None, meta.obs_noise_scale if meta else None,
                                    meta.input_noise_source if meta else None)  # fmt: skip
        setup.noise = SensorNoise(levels, cfg.noise_scale)
        notes.append(f"noise levels: {note}")
    if cfg.init_noise and policy is not None and not cfg.replay:
        setup.init_noise, note = init_noise_from_metadata(meta.domain_randomization if meta else None)
        n = setup.init_noise
        notes.append(
            f"initial state perturbed per run (--no-init-noise: off): root +/-{_csv(n.pos)} m, "
            f"+/-{_csv(n.rot)} rad roll/pitch/yaw, joints +/-{n.joint:g} rad ({note})"
        )
    if (policy is None or cfg.replay) and cfg.obs_latency_ms[1] > 0:
        notes.append("--obs-latency has no effect on a replay (no policy reads the sensors)")
    random = cfg.randomize or cfg.push or cfg.latency_ms[0] != cfg.latency_ms[1]
    random = random or cfg.obs_latency_ms[0] != cfg.obs_latency_ms[1] or (setup.noise is not None and not cfg.replay)
    random = random or setup.init_noise is not None
    if cfg.runs > 1 and not random:
        notes.append(
            "nothing random enabled (initial-state noise, --noise, --randomize, --push, a latency range): "
            "the runs are identical"
        )
    setup.settings = _settings(onnx_path, cfg, setup)
    return setup


def _settings(onnx_path, cfg: Sim2SimConfig, s: Sim2SimSetup) -> dict:
    out = {
        "policy": None,
        "robot": s.spec.identity(),
        "mode": ("replay" if cfg.replay else "policy") + (" + pinned base" if cfg.pin_base else ""),
        "reference": {"source": reference_text(s.reference), "frames": s.reference.num_frames, "fps": s.reference.fps},
        "runs": cfg.runs,
        "seed": cfg.seed,
        "physics_dt": cfg.physics_dt,
        "control_dt": s.control_dt,
        "substeps": s.n_sub,
        "fall_height": cfg.fall_height,
        "stop_on_fall": cfg.stop_on_fall,
        "latency_ms": list(cfg.latency_ms),
        "latency_steps": [ms_to_steps(x, cfg.physics_dt) for x in cfg.latency_ms],
        "obs_latency_ms": list(cfg.obs_latency_ms),
        "obs_latency_steps": [ms_to_steps(x, cfg.physics_dt) for x in cfg.obs_latency_ms],
        "noise_scale": cfg.noise_scale,
        "noise_levels": s.noise.levels if s.noise else None,
        "init_noise": asdict(s.init_noise) if s.init_noise else None,
        "randomize": asdict(s.dr) if s.dr else None,
        "push": asdict(s.push) if s.push else None,
        "mujoco": mujoco_settings(s.model),
        "mjcf": None if cfg.mjcf is None else {"path": str(cfg.mjcf), "sha256": file_sha256(cfg.mjcf, "an MJCF file")},
        "versions": _versions(),
        "notes": s.notes,
    }
    if s.policy is not None:
        m = s.policy.meta
        out["stack"] = s.policy.settings() if hasattr(s.policy, "settings") else {"name": "bcgd"}
        out["policy"] = {
            "path": str(onnx_path),
            "sha256": s.policy.sha256,
            "exporter_version": m.exporter_version,
            "motion": m.motion,
            "robot": m.robot,
            "training_physics_dt": m.physics_dt,
        }
    return out


def _csv(v) -> str:
    return ", ".join(f"{x:g}" for x in v)


def _versions() -> dict:
    return {"bcg_deploy": bcg_deploy.__version__, "onnxruntime": onnxruntime.__version__, "numpy": np.__version__}


def foot_geoms(m: mujoco.MjModel) -> np.ndarray:
    return np.array([g for g in range(m.ngeom) if "_foot_contact_" in (m.geom(g).name or "")], dtype=int)
