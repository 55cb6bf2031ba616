"""Run an exported policy (or a reference replay) in MuJoCo and measure how well it tracks its clip.

Simulation (stated in every report): the packaged G1 scene (``RobotSpec.scene_path``), physics at
``physics_dt`` (default 0.002 s = 500 Hz, the G1's low-level rate), MuJoCo's semi-implicit Euler
integrator, Newton solver, pyramidal friction cones (the MJCF's), 100 solver iterations. The policy
runs every ``control_dt`` (metadata ``bcgd.control_dt``), which must be a whole number of physics steps.

PD: the MJCF's position actuators are turned into plain torque motors (gain 1, no bias, control range
+/- the metadata effort limit), and at EVERY physics step we compute
``tau = clip(kp (q_target - q) - kd qd, -effort, effort)`` with kp, kd, effort from the policy's
metadata and write it to ``ctrl``. The PD is therefore explicit like the robot's joint controller,
applied exactly once, and the armature is the metadata's (``bcgd.armature``) when present.

A run starts in reference frame 0 (root pose and velocity, joints), as training's reference state
initialisation. Control step k (time k * control_dt): the policy reads the (delayed, noisy) state and
``time_step = k``; its target reaches the PD after the action latency (until the first one arrives the
PD holds the pose of reference frame 0); after the step the state is
compared with reference frame k + 1. A run ends at the clip's last frame or when the root (pelvis)
falls below ``fall_height`` (metrics then cover the frames up to the fall).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import mujoco
import numpy as np

from bcg_deploy.errors import BcgdError
from bcg_deploy.robots import RobotSpec, load_robot
from bcg_deploy.sim2sim import metrics
from bcg_deploy.sim2sim.injection import (
    ActionDelayLine,
    DomainRandomization,
    DrSample,
    InitDraw,
    InitNoise,
    LatencySampler,
    PushConfig,
    SensorNoise,
    StateHistory,
    apply_domain_randomization,
    domain_randomization_from_metadata,
    init_noise_from_metadata,
    ms_to_steps,
    noise_levels,
    push_from_metadata,
    push_schedule,
)
from bcg_deploy.sim2sim.policy import OnnxPolicy, make_inputs
from bcg_deploy.sim2sim.reference import Reference, base_track, initial_state, reference_from_motion

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
    reference: Reference
    control_dt: float
    n_sub: int
    kp: np.ndarray
    kd: np.ndarray
    effort_limit: np.ndarray
    model: mujoco.MjModel
    policy: OnnxPolicy | None = None
    dr: DomainRandomization | None = None
    push: PushConfig | None = None
    noise: SensorNoise | None = None
    init_noise: InitNoise | None = None
    notes: list[str] = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    body_ids: np.ndarray | None = None
    """MuJoCo body ids of the reference's bodies (default: bodies 1.. in order)."""


Controller = Callable[[int, dict], np.ndarray]
"""(control step k, raw inputs name -> float32 [1, n]) -> joint position targets [J] (rad)."""


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


def _load_motion_reference(cfg: Sim2SimConfig, spec: RobotSpec) -> Reference:
    """``--motion``: a LAFAN1 G1 CSV window, a task name, or the name of a file in the clip library."""
    from bcg_deploy import motions

    name = str(cfg.motion)
    if name.lower().endswith(".csv") or Path(name).is_file():
        path = Path(name)
        if not path.is_file():
            raise BcgdError(f"motion file {path}: no such file")
        motion = motions.load_lafan1_csv(path, cfg.motion_start_s, cfg.motion_duration_s, spec)
    else:  # a task, or a file registered with `bcgd motions import` (its window: --start, --duration)
        from bcg_deploy.motions.library import load_query

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
        from bcg_deploy.stacks.replay import load_policy

        policy = load_policy(onnx_path, spec, cfg.stack, cfg.force)  # verified against its stack first
        meta = policy.meta
        notes.extend(getattr(policy, "notes", []))
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


def setup_from_reference(reference: Reference, cfg: Sim2SimConfig) -> Sim2SimSetup:
    """A replay setup for any :class:`Reference` (no policy): the robot's own PD gains and effort limits,
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
        from bcg_deploy.sim2sim.other_model import body_ids, load_mjcf

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
        "reference": {"source": s.reference.source, "frames": s.reference.num_frames, "fps": s.reference.fps},
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
        "mjcf": None if cfg.mjcf is None else {"path": str(cfg.mjcf), "sha256": _sha256(cfg.mjcf)},
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


def _sha256(path: str | Path) -> str:
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _csv(v) -> str:
    return ", ".join(f"{x:g}" for x in v)


def _versions() -> dict:
    import onnxruntime

    import bcg_deploy

    return {"bcg_deploy": bcg_deploy.__version__, "onnxruntime": onnxruntime.__version__, "numpy": np.__version__}


def run_streams(seed: int, run_index: int) -> dict[str, np.random.Generator]:
    """Independent generators per injection, so enabling one never changes another's draws."""
    ss = np.random.SeedSequence(entropy=seed, spawn_key=(run_index,))
    names = ("latency", "obs_latency", "noise", "randomize", "push", "init")  # append only: keeps older draws
    return {n: np.random.default_rng(c) for n, c in zip(names, ss.spawn(len(names)), strict=True)}


def simulate_run(
    setup: Sim2SimSetup,
    cfg: Sim2SimConfig,
    run_index: int = 0,
    controller: Controller | None = None,
    on_control_step: Callable[[int, mujoco.MjModel, mujoco.MjData], None] | None = None,
    on_physics_step: Callable[[int, np.ndarray, mujoco.MjData], None] | None = None,
    start: InitDraw | None = None,
) -> RunResult:
    """One run over the clip. ``controller`` defaults to the policy (or the replay of the reference);
    ``on_control_step(k, m, d)`` is called after every control step (video, viewer) and
    ``on_physics_step(i, target, d)`` after every physics step (tests). ``start``: this initial-state
    perturbation instead of the run's seeded draw (diagnostics: a chosen start; the other streams unchanged)."""
    ref, n_sub, dt = setup.reference, setup.n_sub, cfg.physics_dt
    rng = run_streams(cfg.seed, run_index)
    m = setup.model
    j = setup.spec.num_joints
    dr = DrSample(kp_scale=np.ones(j), kd_scale=np.ones(j), joint_offset=np.zeros(j))
    if setup.dr is not None:
        m = _copy_model(setup.model)
        dr = apply_domain_randomization(m, setup.dr, rng["randomize"], joint_dofs(m))
    d = mujoco.MjData(m)
    qpos0, qvel0 = initial_state(ref, m.nq, m.nv)
    if start is None and setup.init_noise is not None:
        start = setup.init_noise.draw(rng["init"], m.nq - 7)
    if start is not None:
        qpos0, qvel0 = start.apply(qpos0, qvel0, setup.spec.joint_range)
    d.qpos[:], d.qvel[:] = qpos0, qvel0
    mujoco.mj_forward(m, d)

    if controller is None:
        controller = _replay_controller(ref) if (cfg.replay or setup.policy is None) else _policy_controller(setup)
    reads_inputs = getattr(controller, "reads_inputs", True)
    noise = setup.noise if setup.noise is not None and setup.noise.enabled else None
    num_k = ref.num_frames - 1
    num_steps = num_k * n_sub
    lat, olat = LatencySampler(*cfg.latency_ms), LatencySampler(*cfg.obs_latency_ms)
    history = StateHistory(m.nq, m.nv, olat.max_steps(dt)) if olat.enabled else None
    pushes = push_schedule(setup.push, num_k * setup.control_dt, dt, rng["push"]) if setup.push else []
    push_at = {i: kick for i, kick in pushes}
    pin_qpos, pin_qvel = base_track(ref, num_steps, dt) if cfg.pin_base else (None, None)
    inputs = make_inputs(j)

    kp, kd = setup.kp * dr.kp_scale, setup.kd * dr.kd_scale
    lim, nlim = setup.effort_limit.copy(), -setup.effort_limit
    offset = dr.joint_offset
    delay = ActionDelayLine(ref.joint_pos[0])
    kp_tgt = kp * (delay.current + offset)
    qj, vj, ctrl = d.qpos[7:], d.qvel[6:], d.ctrl
    a, b = np.zeros(j), np.zeros(j)

    bids = setup.body_ids if setup.body_ids is not None else np.arange(1, m.nbody)
    feet = foot_geoms(m)
    tr = _Trace.empty(num_k, n_sub, bids.size, j, feet.size)
    geom_z = d.geom_xpos[:, 2]
    t0 = time.perf_counter()
    for k in range(num_k):
        i0 = k * n_sub
        # --- sense and act
        if history is not None:
            history.record(i0, d.qpos, d.qvel)
            sq, sv = history.get(i0, olat.sample_steps(rng["obs_latency"], dt))
        else:
            sq, sv = d.qpos, d.qvel
        if reads_inputs:
            _fill_inputs(inputs, sq, sv)
            if noise is not None:
                noise.apply(inputs, rng["noise"])
        target = controller(k, inputs)
        if not np.all(np.isfinite(target)):
            raise BcgdError(f"the policy returned a non-finite joint target at control step {k}")
        delay.push(i0, lat.sample_steps(rng["latency"], dt), target, k)
        # --- physics
        for s in range(n_sub):
            i = i0 + s
            if i >= delay.next_activation:
                kp_tgt = kp * (delay.update(i) + offset)
            if push_at and i in push_at:
                d.qvel[:6] += push_at[i]
            if pin_qpos is not None:
                d.qpos[:7], d.qvel[:6] = pin_qpos[i], pin_qvel[i]
            if history is not None and s:
                history.record(i, d.qpos, d.qvel)
            np.multiply(kp, qj, out=a)
            np.multiply(kd, vj, out=b)
            np.subtract(kp_tgt, a, out=a)
            np.subtract(a, b, out=a)
            np.minimum(a, lim, out=a)
            np.maximum(a, nlim, out=ctrl)
            mujoco.mj_step(m, d)
            tr.torque[i] = ctrl
            tr.sphere_z[i] = geom_z[feet]  # the state this step's contacts were found in
            if on_physics_step is not None:
                on_physics_step(i, delay.current, d)
        # --- record against reference frame k + 1
        if pin_qpos is not None:  # the pinned base sits exactly on reference frame k + 1
            d.qpos[:7], d.qvel[:6] = pin_qpos[i0 + n_sub], pin_qvel[i0 + n_sub]
        mujoco.mj_kinematics(m, d)
        tr.record(k, d.xpos[bids], qj, d.qpos[:3])
        if on_control_step is not None:
            on_control_step(k, m, d)
        if d.qpos[2] < cfg.fall_height and tr.fall_k is None:
            tr.fall_k = k
            if cfg.stop_on_fall:
                break
    tr.wall_s = time.perf_counter() - t0
    return _result(setup, cfg, run_index, m, tr, dr, start, len(pushes))


@dataclass
class _Trace:
    """What one run measured: per control step k (against reference frame k + 1) and per physics step."""

    body_pos: np.ndarray  # (K, B, 3) world positions of the tracked bodies (m)
    joint_pos: np.ndarray  # (K, J) rad
    root_pos: np.ndarray  # (K, 3) world root (pelvis) position (m)
    torque: np.ndarray  # (K * n_sub, J) applied joint torques (N m), per physics step
    sphere_z: np.ndarray  # (K * n_sub, F) foot contact sphere centre heights (m), per physics step
    steps: int = 0  # control steps done
    fall_k: int | None = None  # control step at which the root fell below the fall height
    wall_s: float = 0.0

    @classmethod
    def empty(cls, num_k: int, n_sub: int, num_bodies: int, num_joints: int, num_feet: int) -> _Trace:
        return cls(np.zeros((num_k, num_bodies, 3)), np.zeros((num_k, num_joints)), np.zeros((num_k, 3)),
                   np.zeros((num_k * n_sub, num_joints)), np.zeros((num_k * n_sub, num_feet)))  # fmt: skip

    def record(self, k: int, body_pos: np.ndarray, joint_pos: np.ndarray, root_pos: np.ndarray) -> None:
        self.body_pos[k], self.joint_pos[k], self.root_pos[k] = body_pos, joint_pos, root_pos
        self.steps = k + 1


def _result(
    setup: Sim2SimSetup, cfg: Sim2SimConfig, run_index: int, m: mujoco.MjModel, tr: _Trace, dr: DrSample,
    start: InitDraw | None, n_push: int,
) -> RunResult:  # fmt: skip
    ref, k_done, fall_k = setup.reference, tr.steps, tr.fall_k
    sl = slice(1, k_done + 1)
    bp, jp, rp = tr.body_pos[:k_done], tr.joint_pos[:k_done], tr.root_pos[:k_done]
    radius = m.geom_size[foot_geoms(m), 0]
    pen_sum, pen_n = metrics.sphere_floor_penetration(tr.sphere_z[: k_done * setup.n_sub], radius)
    return RunResult(
        index=run_index,
        seed=[int(cfg.seed), int(run_index)],
        fell=fall_k is not None,
        fall_time_s=None if fall_k is None else round((fall_k + 1) * setup.control_dt, 9),
        steps=k_done,
        duration_s=round(k_done * setup.control_dt, 9),
        e_track_cm=metrics.e_track_cm(bp, ref.body_pos_w[sl]),
        joint_rmse_rad=metrics.joint_rmse(jp, ref.joint_pos[sl]),
        root_pos_err_cm=metrics.root_position_error_cm(rp, ref.root_pos[sl]),
        foot_penetration_mm=metrics.mean_penetration_mm(pen_sum, pen_n),
        torque_saturation=metrics.torque_saturation_fraction(tr.torque[: k_done * setup.n_sub], setup.effort_limit),
        randomization=dr.summary() if setup.dr is not None else None,
        initial_perturbation=start.summary() if start is not None else None,
        pushes=n_push,
        wall_s=tr.wall_s,
        series={
            "t": np.arange(1, k_done + 1) * setup.control_dt,
            "body_err_cm": 100 * metrics.body_position_error_series(bp, ref.body_pos_w[sl]),
            "joint_err_rad": metrics.joint_error_series(jp, ref.joint_pos[sl]),
            "root_err_cm": 100 * metrics.root_position_error_series(rp, ref.root_pos[sl]),
            "root_height_m": rp[:, 2].copy(),
        },
    )


def foot_penetration(m: mujoco.MjModel, g1: list, g2: list, dist: list) -> tuple[float, int]:
    """Sum of ``-dist`` (m) and count over MuJoCo contacts (``d.contact`` geom1, geom2, dist, copied)
    between a foot contact sphere and the floor. The run itself uses the equivalent, cheaper
    :func:`metrics.sphere_floor_penetration` on the sphere heights (tested equal to this)."""
    if not dist:
        return 0.0, 0
    g1, g2, dist = np.concatenate(g1), np.concatenate(g2), np.concatenate(dist)
    foot = np.zeros(m.ngeom, dtype=bool)
    foot[foot_geoms(m)] = True
    floor = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "floor")
    sel = (foot[g1] & (g2 == floor)) | (foot[g2] & (g1 == floor))
    pen = metrics.contact_penetration(dist[sel])
    return float(pen.sum()), int(pen.size)


def foot_geoms(m: mujoco.MjModel) -> np.ndarray:
    return np.array([g for g in range(m.ngeom) if "_foot_contact_" in (m.geom(g).name or "")], dtype=int)


def _copy_model(m: mujoco.MjModel) -> mujoco.MjModel:
    import copy

    return copy.deepcopy(m)


def _fill_inputs(inputs: dict, qpos: np.ndarray, qvel: np.ndarray) -> None:
    """Raw policy inputs from a MuJoCo state."""
    inputs["base_pos"][0] = qpos[:3]
    inputs["base_quat"][0] = qpos[3:7]
    inputs["base_lin_vel"][0] = qvel[:3]
    inputs["base_ang_vel"][0] = qvel[3:6]
    inputs["joint_pos"][0] = qpos[7:]
    inputs["joint_vel"][0] = qvel[6:]


def _policy_controller(setup: Sim2SimSetup) -> Controller:
    """bcgd's raw-state ONNX: the policy itself; an obs-signature policy: its deploy stack's runtime
    (``bcg_deploy.stacks``), which builds the observation and the targets as the stack does."""
    policy = setup.policy
    if isinstance(policy, OnnxPolicy) and policy.profile is None:

        def act(k: int, inputs: dict) -> np.ndarray:
            return policy.act(inputs, k)

        return act
    return policy.controller(setup)


def _replay_controller(ref: Reference) -> Controller:
    """Targets = the reference joint positions of the frame the control step ends on."""

    def act(k: int, inputs: dict) -> np.ndarray:
        return ref.joint_pos[min(k + 1, ref.num_frames - 1)]

    act.reads_inputs = False  # type: ignore[attr-defined]
    return act


def run_sim2sim(
    onnx_path: str | Path | None,
    cfg: Sim2SimConfig,
    video_path: str | Path | None = None,
    viewer: bool = False,
    on_control_step: Callable[[int, int, mujoco.MjModel, mujoco.MjData], None] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    video_size: tuple[int, int] = (640, 480),
    setup: Sim2SimSetup | None = None,
):
    """Evaluate a policy (or a replay) over ``cfg.runs`` seeded runs; returns a :class:`Report`.

    ``video_path``: MP4 or GIF of run 0 (``video_size`` width, height in pixels) from a camera tracking
    the pelvis, the reference drawn as a translucent ghost. ``viewer``: show run 0 in MuJoCo's
    interactive viewer. ``on_control_step(run, k, m, d)`` is called after every control step of run 0
    (which then runs in this process). The runs go to ``cfg.jobs`` worker processes
    (``sim2sim.parallel``); ``progress(steps done, total steps, text)`` follows them. ``setup``: the
    result of ``prepare(onnx_path, cfg)`` when the caller already has it.
    """
    from bcg_deploy.sim2sim.parallel import run_all
    from bcg_deploy.sim2sim.report import Report

    if viewer and video_path is not None:
        raise BcgdError("--viewer and --video cannot be used together; pick one")
    setup = setup if setup is not None else prepare(onnx_path, cfg)
    hooks = [on_control_step] if on_control_step is not None else []
    recorder, label = None, ""
    if video_path is not None:
        from bcg_deploy.sim2sim.video import VideoRecorder

        recorder = VideoRecorder(
            video_path, fps=1.0 / setup.control_dt, width=video_size[0], height=video_size[1], ghost=setup.reference
        )
        hooks.append(recorder)
        label = f"rendering run 0 to {Path(video_path).name}"
    elif viewer:
        from bcg_deploy.sim2sim.video import ViewerHook

        recorder = ViewerHook(setup.control_dt)
        hooks.append(recorder)
    hook = (lambda r, k, m, d: [h(r, k, m, d) for h in hooks]) if hooks else None  # noqa: E731
    t0 = time.perf_counter()
    try:
        results = run_all(setup, onnx_path, cfg, hook, progress, label)
    finally:
        written = recorder.close() if recorder is not None else None
    report = Report.build(setup.settings, results)
    report.extras["wall_s"] = sum(x.wall_s for x in results)
    report.extras["sim_s"] = sum(x.duration_s for x in results)
    report.extras["elapsed_s"] = time.perf_counter() - t0
    if video_path is not None:
        report.extras["video"] = {"path": written, "frames": recorder.frames, "backend": recorder.backend}
    return report


__all__ = [
    "Sim2SimConfig",
    "Sim2SimSetup",
    "RunResult",
    "prepare",
    "setup_from_reference",
    "simulate_run",
    "run_sim2sim",
    "build_model",
]
