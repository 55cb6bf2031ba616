"""What sim2sim injects between the policy and MuJoCo: latency, sensor noise, domain randomisation, pushes.

Every injection is off by default and draws only from the ``numpy.random.Generator`` it is given, so a
seed reproduces a run exactly. Times are quantised to physics steps (nearest, ties up).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import mujoco
import numpy as np

from bcg_deploy.errors import BcgdError
from bcg_deploy.rotations import quat_numpy as quat

# ----------------------------------------------------------------------------------------------- latency


def parse_ms_range(text: str | float | None, what: str) -> tuple[float, float]:
    """``"20"`` -> (20, 20); ``"10:30"`` -> (10, 30) milliseconds; None/empty -> (0, 0)."""
    if text is None or text == "":
        return (0.0, 0.0)
    if isinstance(text, (int, float)):
        lo = hi = float(text)
    else:
        parts = str(text).split(":")
        try:
            vals = [float(p) for p in parts]
        except ValueError:
            raise BcgdError(f"{what} {text!r}: expected milliseconds MS or a uniform range LO:HI") from None
        if len(vals) == 1:
            lo = hi = vals[0]
        elif len(vals) == 2:
            lo, hi = vals
        else:
            raise BcgdError(f"{what} {text!r}: expected milliseconds MS or a uniform range LO:HI")
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo < 0 or hi < lo:
        raise BcgdError(f"{what} {text!r}: expected 0 <= LO <= HI milliseconds")
    return (lo, hi)


def ms_to_steps(ms: float, dt: float) -> int:
    """Milliseconds -> whole physics steps of ``dt`` seconds (nearest, ties rounded up)."""
    return int(math.floor(ms * 1e-3 / dt + 0.5 + 1e-9))


@dataclass(frozen=True)
class LatencySampler:
    """A delay drawn uniformly in [lo, hi] ms for every control step, quantised to physics steps."""

    lo_ms: float = 0.0
    hi_ms: float = 0.0

    @property
    def enabled(self) -> bool:
        return self.hi_ms > 0.0

    def max_steps(self, dt: float) -> int:
        return ms_to_steps(self.hi_ms, dt)

    def sample_steps(self, rng: np.random.Generator | None, dt: float) -> int:
        if self.hi_ms == self.lo_ms:
            return ms_to_steps(self.lo_ms, dt)
        return ms_to_steps(float(rng.uniform(self.lo_ms, self.hi_ms)), dt)


class ActionDelayLine:
    """Joint targets in flight from the policy to the actuators.

    A target issued at physics step ``i`` with a delay of ``L`` steps drives the PD from step ``i + L``
    on. With jitter a later target may arrive first; an older target never replaces a newer one.
    """

    def __init__(self, initial_target: np.ndarray):
        self.current = np.array(initial_target, dtype=np.float64)
        self._current_seq = -1
        self._pending: list[tuple[int, int, np.ndarray]] = []
        self.next_activation = math.inf

    def push(self, issue_step: int, delay_steps: int, target: np.ndarray, seq: int) -> None:
        act = issue_step + delay_steps
        self._pending.append((act, seq, np.array(target, dtype=np.float64)))
        self.next_activation = min(self.next_activation, act)

    def update(self, step: int) -> np.ndarray:
        """Activate every target due by physics step ``step``; return the target in force."""
        keep = []
        for act, seq, tgt in self._pending:
            if act <= step:
                if seq > self._current_seq:
                    self.current, self._current_seq = tgt, seq
            else:
                keep.append((act, seq, tgt))
        self._pending = keep
        self.next_activation = min((a for a, _, _ in keep), default=math.inf)
        return self.current


class StateHistory:
    """Ring buffer of (qpos, qvel) per physics step, for observation latency."""

    def __init__(self, nq: int, nv: int, max_delay_steps: int):
        self.size = max_delay_steps + 1
        self.qpos = np.zeros((self.size, nq))
        self.qvel = np.zeros((self.size, nv))

    def record(self, step: int, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """Store the state at the start of physics step ``step``."""
        self.qpos[step % self.size] = qpos
        self.qvel[step % self.size] = qvel

    def get(self, step: int, delay_steps: int) -> tuple[np.ndarray, np.ndarray]:
        """The state recorded at ``max(step - delay_steps, 0)`` (``delay_steps`` < buffer size)."""
        j = max(step - delay_steps, 0)
        return self.qpos[j % self.size], self.qvel[j % self.size]


# ----------------------------------------------------------------------------------------------- noise

RAW_INPUTS = ("base_pos", "base_quat", "base_lin_vel", "base_ang_vel", "joint_pos", "joint_vel")

# Used when a policy's metadata carries no ``bcgd.input_noise``: METHOD.md section 6 training noise
# mapped onto the raw inputs as the training observation module maps it (reference root position
# 0.25 m on base x, y; root height 0.01 m on z; root rotation 0.05 rad; 0.5 m/s; 0.2 rad/s; body
# rotation 0.01 rad on the joint angles; joint rate 0.5 rad/s).
METHOD_INPUT_NOISE = {
    "base_pos": [0.25, 0.25, 0.01],
    "base_quat": 0.05,
    "base_lin_vel": 0.5,
    "base_ang_vel": 0.2,
    "joint_pos": 0.01,
    "joint_vel": 0.5,
}


@dataclass(frozen=True)
class SensorNoise:
    """Uniform sensor noise on the raw policy inputs, ``scale`` x the level ``n`` per input name (a scalar
    or one value per component), as in training (``raw_input_noise`` of the observation module):
    U(-n, n) added to every component, except ``base_quat``, which is rotated on the body side by a
    rotation vector with components U(-n, n) (rad): q_meas = q * exp(dtheta)."""

    levels: dict
    scale: float = 0.0

    @property
    def enabled(self) -> bool:
        return self.scale > 0.0

    def apply(self, inputs: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        """Add noise in place to the arrays of ``inputs`` (name -> [1, n] array)."""
        for name in RAW_INPUTS:
            n = self.levels.get(name)
            if n is None:
                continue
            x = inputs[name]
            if name == "base_quat":
                amp = self.scale * np.broadcast_to(np.asarray(n, dtype=np.float64), (x.shape[0], 3))
                x[:] = quat.mul(x.astype(np.float64), quat.exp(rng.uniform(-1.0, 1.0, size=amp.shape) * amp))
                continue
            amp = self.scale * np.broadcast_to(np.asarray(n, dtype=np.float64), x.shape)
            x += rng.uniform(-1.0, 1.0, size=x.shape) * amp


def noise_levels(
    metadata_noise: dict | None, trained_scale: float | None = None, source: str | None = None
) -> tuple[dict, str]:
    """Per-input noise levels and where they came from (``source``, default ``"metadata bcgd.input_noise"``, or
    ``"METHOD.md defaults"``); ``trained_scale`` (metadata ``bcgd.training.obs_noise_scale``), when not 1, is
    named in the note."""
    if metadata_noise:
        unknown = sorted(set(metadata_noise) - set(RAW_INPUTS))
        levels = {k: v for k, v in metadata_noise.items() if k in RAW_INPUTS}
        src = (source or "metadata bcgd.input_noise") + (f" (ignored: {', '.join(unknown)})" if unknown else "")
        if trained_scale is not None and trained_scale != 1:
            src += f"; the policy trained with {trained_scale:g} x these levels"
        return levels, src
    return dict(METHOD_INPUT_NOISE), "METHOD.md section 6 defaults (metadata has no bcgd.input_noise)"


# ----------------------------------------------------------------------------------------------- randomisation


@dataclass(frozen=True)
class DomainRandomization:
    """Training domain-randomisation ranges (METHOD.md section 6 defaults).

    friction: floor-foot Coulomb coefficient, U(lo, hi) (every geom's sliding friction is set to it, so
    each contact pair uses it). base_mass_add_kg: added to the pelvis. link_mass_scale: multiplies every
    other body's mass (inertia scaled with it). com_offset_m: added to every body's CoM per axis (body
    frame). kp_scale / kd_scale / armature_scale / joint_friction_scale: per-joint factors.
    joint_offset_rad: per-joint offset of the default pose, added to the PD target (as in training).
    torso_com_offset_m: per-axis CoM half-widths (x, y, z) of ``torso_body``, which draws from the larger of
    these and ``com_offset_m`` on each axis (as in training); zeros: the torso draws like every body.
    """

    friction: tuple[float, float] = (0.3, 1.2)
    base_mass_add_kg: tuple[float, float] = (-3.0, 3.0)
    link_mass_scale: tuple[float, float] = (0.8, 1.2)
    com_offset_m: tuple[float, float] = (-0.03, 0.03)
    kp_scale: tuple[float, float] = (0.8, 1.2)
    kd_scale: tuple[float, float] = (0.8, 1.2)
    armature_scale: tuple[float, float] = (0.75, 1.25)
    joint_friction_scale: tuple[float, float] = (0.5, 1.5)
    joint_offset_rad: tuple[float, float] = (-0.01, 0.01)
    torso_com_offset_m: tuple[float, float, float] = (0.0, 0.0, 0.0)
    torso_body: str = "torso_link"


# Names the training config may use for the same ranges.
_DR_ALIASES = {
    "friction": ("friction", "static_friction", "friction_range", "mu"),
    "base_mass_add_kg": ("base_mass_add", "base_mass_add_kg", "base_mass", "base_mass_delta"),
    "link_mass_scale": ("link_mass_scale", "link_mass", "mass_scale", "link_masses"),
    "com_offset_m": ("link_com_offset", "com_offset_m", "com_offset", "link_com", "com"),
    "kp_scale": ("kp_scale", "kp", "stiffness_scale"),
    "kd_scale": ("kd_scale", "kd", "damping_scale"),
    "armature_scale": ("armature_scale", "armature"),
    "joint_friction_scale": ("joint_friction_scale", "joint_friction"),
    "joint_offset_rad": ("default_joint_offset", "joint_offset_rad", "joint_offset", "default_joint_pos_offset"),
}


def _as_range(v, key: str) -> tuple[float, float]:
    """[lo, hi], {lo, hi} / {min, max} / {range}, or a scalar half-width h -> (-h, h)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return (-abs(float(v)), abs(float(v)))
    if isinstance(v, dict):
        v = v.get("range", [v.get("lo", v.get("min")), v.get("hi", v.get("max"))])
    try:
        lo, hi = (float(x) for x in v)
    except (TypeError, ValueError):
        raise BcgdError(f"metadata bcgd.domain_randomization.{key} = {v!r}: expected a (lo, hi) range") from None
    return (lo, hi)


def domain_randomization_from_metadata(meta: dict | None) -> tuple[DomainRandomization, str]:
    """DR ranges from metadata ``bcgd.domain_randomization``; METHOD.md defaults for what is absent.

    Returns the ranges and a one-line note of their source, for the report. A metadata range given in
    centimetres (``com_offset_cm``) is converted.
    """
    defaults = DomainRandomization()
    if not meta:
        return defaults, "METHOD.md section 6 defaults (metadata has no bcgd.domain_randomization)"
    if not isinstance(meta, dict):
        raise BcgdError(f"metadata bcgd.domain_randomization = {meta!r}: expected a JSON object")
    found, missing = {}, []
    if "torso_com_offset_m" in meta:
        try:
            found["torso_com_offset_m"] = tuple(float(x) for x in meta["torso_com_offset_m"])[:3]
        except (TypeError, ValueError):
            raise BcgdError(f"metadata bcgd.domain_randomization.torso_com_offset_m = {meta['torso_com_offset_m']!r}: "
                            "expected three half-widths (m)") from None  # fmt: skip
        found["torso_body"] = str(meta.get("torso_body", "torso_link"))
    for fld, aliases in _DR_ALIASES.items():
        for a in aliases:
            if a in meta:
                found[fld] = _as_range(meta[a], a)
                break
        else:
            if "com_offset_cm" in meta and fld == "com_offset_m":
                lo, hi = _as_range(meta["com_offset_cm"], "com_offset_cm")
                found[fld] = (lo / 100.0, hi / 100.0)
            else:
                missing.append(fld)
    note = "metadata bcgd.domain_randomization"
    if meta.get("enabled") is False:
        note += " (ranges of a training run that had randomisation switched off)"
    if missing:
        note += f" (METHOD.md defaults for {', '.join(missing)})"
    return DomainRandomization(**{**asdict(defaults), **found}), note


@dataclass
class DrSample:
    """One run's draw: scalars for the report plus the per-joint factors the PD loop uses."""

    friction: float = 1.0
    base_mass_add_kg: float = 0.0
    kp_scale: np.ndarray = field(default_factory=lambda: np.ones(0))
    kd_scale: np.ndarray = field(default_factory=lambda: np.ones(0))
    joint_offset: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def summary(self) -> dict:
        return {
            "friction": self.friction,
            "base_mass_add_kg": self.base_mass_add_kg,
            "kp_scale_mean": float(np.mean(self.kp_scale)) if self.kp_scale.size else 1.0,
            "kd_scale_mean": float(np.mean(self.kd_scale)) if self.kd_scale.size else 1.0,
            "joint_offset_abs_mean_rad": float(np.mean(np.abs(self.joint_offset))) if self.joint_offset.size else 0.0,
        }


def apply_domain_randomization(
    model: mujoco.MjModel, dr: DomainRandomization, rng: np.random.Generator, dof_adr: np.ndarray
) -> DrSample:
    """Randomise ``model`` in place (friction, masses, CoM, armature, joint friction) and draw the
    per-joint PD gain factors and calibration offsets. ``dof_adr``: the hinge dofs in joint order."""
    nj = len(dof_adr)
    u = rng.uniform
    mu = float(u(*dr.friction))
    model.geom_friction[:, 0] = mu
    nb = model.nbody
    base = 1  # the pelvis (free-joint body)
    d_mass = float(u(*dr.base_mass_add_kg))
    scale = np.ones(nb)
    scale[base + 1 :] = u(*dr.link_mass_scale, size=nb - base - 1)
    new_mass = model.body_mass * scale
    new_mass[base] = max(model.body_mass[base] + d_mass, 1e-3)
    inertia_scale = new_mass / np.maximum(model.body_mass, 1e-12)
    model.body_inertia[:] = model.body_inertia * inertia_scale[:, None]
    model.body_mass[:] = new_mass
    ipos_before = model.body_ipos.copy()
    model.body_ipos[base:] += u(*dr.com_offset_m, size=(nb - base, 3))
    model.dof_armature[dof_adr] *= u(*dr.armature_scale, size=nj)
    model.dof_frictionloss[dof_adr] *= u(*dr.joint_friction_scale, size=nj)
    sample = DrSample(
        friction=mu,
        base_mass_add_kg=d_mass,
        kp_scale=u(*dr.kp_scale, size=nj),
        kd_scale=u(*dr.kd_scale, size=nj),
        joint_offset=u(*dr.joint_offset_rad, size=nj),
    )
    torso = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, dr.torso_body)
    if any(dr.torso_com_offset_m) and torso > 0:  # drawn last: the draws above stay those of older reports
        half = np.maximum(np.abs(dr.torso_com_offset_m), max(abs(dr.com_offset_m[0]), abs(dr.com_offset_m[1])))
        model.body_ipos[torso] += u(-half, half) - (model.body_ipos[torso] - ipos_before[torso])
    return sample


# ----------------------------------------------------------------------------------------------- pushes


@dataclass(frozen=True)
class PushConfig:
    """Random pushes: every U(interval_s) seconds a velocity change is added to the base, uniform in
    +/- ``lin_vel`` (m/s, world x, y, z) and +/- ``ang_vel`` (rad/s, roll, pitch, yaw rates, base frame)."""

    interval_s: tuple[float, float] = (1.0, 3.0)
    lin_vel: tuple[float, float, float] = (0.5, 0.5, 0.2)
    ang_vel: tuple[float, float, float] = (0.52, 0.52, 0.78)


def push_from_metadata(meta: dict | None) -> tuple[PushConfig, str]:
    """Push schedule from metadata ``bcgd.push`` (keys ``interval_s``, ``lin_vel``, ``ang_vel``, or
    ``velocity_range`` {x, y, z, roll, pitch, yaw} as [lo, hi]); METHOD.md defaults otherwise."""
    d = PushConfig()
    if not meta:
        return d, "METHOD.md section 6 defaults (metadata has no bcgd.push)"
    meta = {k.removeprefix("push_"): v for k, v in meta.items()}
    try:
        interval = tuple(float(x) for x in meta.get("interval_s", d.interval_s))
        if "velocity_range" in meta:
            vr = meta["velocity_range"]
            half = {k: max(abs(float(v[0])), abs(float(v[1]))) for k, v in vr.items()}
            lin = tuple(half.get(k, 0.0) for k in ("x", "y", "z"))
            ang = tuple(half.get(k, 0.0) for k in ("roll", "pitch", "yaw"))
        else:
            lin = _vec3(meta.get("lin_vel", d.lin_vel))
            ang = _vec3(meta.get("ang_vel", d.ang_vel))
    except (TypeError, ValueError, AttributeError):
        raise BcgdError(f"metadata bcgd.push = {meta!r}: expected interval_s, lin_vel, ang_vel") from None
    return PushConfig(interval, lin, ang), "metadata bcgd.push"


def _vec3(v) -> tuple[float, float, float]:
    if isinstance(v, (int, float)):
        return (float(v),) * 3
    if isinstance(v, dict):
        return tuple(float(v[k]) for k in ("x", "y", "z"))  # type: ignore[return-value]
    a, b, c = (float(x) for x in v)
    return (a, b, c)


def push_schedule(
    cfg: PushConfig, duration_s: float, dt: float, rng: np.random.Generator
) -> list[tuple[int, np.ndarray]]:
    """Physics-step indices and [6] velocity kicks (lin world, ang base) of the pushes within ``duration_s``."""
    out, t = [], 0.0
    lin, ang = np.asarray(cfg.lin_vel), np.asarray(cfg.ang_vel)
    while True:
        t += float(rng.uniform(*cfg.interval_s))
        if t >= duration_s:
            return out
        kick = np.concatenate([rng.uniform(-lin, lin), rng.uniform(-ang, ang)])
        out.append((ms_to_steps(t * 1e3, dt), kick))


# ----------------------------------------------------------------------------------------------- initial state


@dataclass(frozen=True)
class InitNoise:
    """Initial-state perturbation of each run, like training's reset noise: U(+/- pos) m added to the root
    position (world x, y, z), a rotation Rz(yaw) Ry(pitch) Rx(roll) with angles U(+/- rot) rad applied to
    the root orientation in the world frame, U(+/- joint) rad added to the joints (clipped to their range).
    The velocities stay the reference's (the angular velocity re-expressed in the perturbed base frame).
    Defaults: the training config's ``domain_rand.reset_pos / reset_rot / reset_joint`` defaults."""

    pos: tuple[float, float, float] = (0.05, 0.05, 0.01)
    rot: tuple[float, float, float] = (0.1, 0.1, 0.2)
    joint: float = 0.1

    def draw(self, rng: np.random.Generator, num_joints: int) -> InitDraw:
        """One run's perturbation: root offset, then roll / pitch / yaw, then joint offsets (this order)."""
        pos = rng.uniform(-1.0, 1.0, 3) * np.asarray(self.pos)
        rpy = rng.uniform(-1.0, 1.0, 3) * np.asarray(self.rot)
        joints = rng.uniform(-self.joint, self.joint, num_joints)
        return InitDraw(pos, rpy, joints)

    def perturb(
        self, qpos: np.ndarray, qvel: np.ndarray, joint_range: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """Perturbed copies of a MuJoCo initial state (qpos [7 + J], qvel [6 + J])."""
        return self.draw(rng, qpos.size - 7).apply(qpos, qvel, joint_range)


@dataclass(frozen=True)
class InitDraw:
    """A drawn initial-state perturbation: ``pos`` (3,) m added to the root position (world frame),
    ``rpy`` (3,) rad roll / pitch / yaw of the world-frame rotation Rz Ry Rx applied to the root
    orientation, ``joints`` (J,) rad added to the joints before clipping to their range."""

    pos: np.ndarray
    rpy: np.ndarray
    joints: np.ndarray

    def apply(self, qpos: np.ndarray, qvel: np.ndarray, joint_range: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Perturbed copies of qpos [7 + J], qvel [6 + J]; the world angular velocity is kept."""
        q, v = qpos.copy(), qvel.copy()
        q[:3] += self.pos
        omega_w = quat.rotate(q[3:7], v[3:6])
        q[3:7] = quat.normalize(quat.mul(quat.from_euler_zyx(*self.rpy), q[3:7]))
        v[3:6] = quat.rotate(quat.conj(q[3:7]), omega_w)
        q[7:] = np.clip(q[7:] + self.joints, joint_range[:, 0], joint_range[:, 1])
        return q, v

    def summary(self) -> dict:
        """For the report: which start a run had (a run that falls can be told apart by its start)."""
        return {
            "root_offset_m": [float(x) for x in self.pos],
            "root_roll_pitch_yaw_rad": [float(x) for x in self.rpy],
            "joint_offset_max_abs_rad": float(np.max(np.abs(self.joints))) if self.joints.size else 0.0,
        }


def init_noise_from_metadata(meta: dict | None) -> tuple[InitNoise, str]:
    """Reset-noise amplitudes from metadata ``bcgd.domain_randomization`` (``reset_pos``, ``reset_rot``,
    ``reset_joint``), the training defaults for what is absent; and a one-line note of their source."""
    d = InitNoise()
    meta = meta if isinstance(meta, dict) else {}
    try:
        pos = _vec3(meta.get("reset_pos", d.pos))
        rot = _vec3(meta.get("reset_rot", d.rot))
        joint = float(meta.get("reset_joint", d.joint))
    except (TypeError, ValueError, KeyError):
        raise BcgdError(
            "metadata bcgd.domain_randomization reset_pos/reset_rot/reset_joint: expected 3, 3 and 1 numbers"
        ) from None
    present = [k for k in ("reset_pos", "reset_rot", "reset_joint") if k in meta]
    if len(present) == 3:
        note = "metadata bcgd.domain_randomization reset_pos/reset_rot/reset_joint"
    else:
        note = "training's reset-noise defaults" + (f" (metadata has {', '.join(present)})" if present else "")
    if meta.get("enabled") is False:
        note += "; the policy was trained with domain randomisation and reset noise off"
    scale = meta.get("reset_scale", 1.0)
    if isinstance(scale, (int, float)) and scale != 1.0:
        note += f"; training drew its resets from {scale:g} x this box"
    return InitNoise(pos, rot, joint), note
