"""Domain randomisation (METHOD.md section 6): per-env physical parameters, pushes and reset noise.

``sample_params`` draws one ``EnvParams`` row per env (nominal values when randomisation is off);
``assign_rows(params, new, idx, RESET_FIELDS)`` redraws the per-episode ones for reset envs. Which
physical parameters reach the simulator depends on what it accepts (see ``env.simulator.apply_params_to_sim``);
the action-side terms (default joint offset, action latency), pushes and reset noise are applied by
the env itself. All randomness comes from the global torch RNG (saved in run.pt), so a resumed run
is reproducible."""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields

import torch

from bcg_deploy.training.config import DomainRandCfg
from bcg_deploy.training.rng import Draw


@dataclass
class EnvParams:
    """Per-env randomised parameters; E rows."""

    friction: torch.Tensor  # [E] Coulomb coefficient
    base_mass_add: torch.Tensor  # [E] kg added to the pelvis
    link_mass_scale: torch.Tensor  # [E, NB]
    link_com_offset: torch.Tensor  # [E, NB, 3] m, body frame
    kp_scale: torch.Tensor  # [E, J]
    kd_scale: torch.Tensor  # [E, J]
    armature_scale: torch.Tensor  # [E, J]
    joint_friction_scale: torch.Tensor  # [E, J]
    default_joint_offset: torch.Tensor  # [E, J] rad
    action_latency: torch.Tensor  # [E] long, control steps (0 or 1)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_state_dict(cls, d: dict[str, torch.Tensor]) -> EnvParams:
        return cls(**{f.name: d[f.name] for f in fields(cls)})


def nominal_params(like: EnvParams) -> EnvParams:
    """Nominal (un-randomised) parameters shaped like ``like``."""
    E, NB, J = like.link_mass_scale.shape[0], like.link_mass_scale.shape[1], like.kp_scale.shape[1]
    dev = like.kp_scale.device
    out = sample_params(DomainRandCfg(enabled=False), E, NB, J, dev)
    out.friction = like.friction.clone()
    return out


def _rows(num: int, device, draw: Draw | None) -> Draw:
    """``draw`` (the envs' own streams, ``training.rng``) or ``num`` rows from torch's global generator."""
    if draw is None:
        return Draw([None], [num], torch.device(device))
    if draw.n != num:
        raise ValueError(f"draw for {draw.n} envs used for {num}")
    return draw


def sample_params(
    cfg: DomainRandCfg,
    num_envs: int,
    num_bodies: int,
    num_joints: int,
    device,
    draw: Draw | None = None,
    torso_index: int | None = None,
) -> EnvParams:
    """Draw parameters for ``num_envs`` envs (float64; nominal when ``cfg.enabled`` is False).
    ``torso_index``: the body that draws its CoM offset from ``cfg.torso_com_offset`` (per-axis maximum with
    ``cfg.link_com_offset``), drawn after every other field."""
    E, NB, J = num_envs, num_bodies, num_joints
    if not cfg.enabled:
        one = torch.ones((), dtype=torch.float64, device=device)
        return EnvParams(
            friction=torch.full((E,), 0.5 * (cfg.friction[0] + cfg.friction[1]), dtype=torch.float64, device=device),
            base_mass_add=torch.zeros(E, dtype=torch.float64, device=device),
            link_mass_scale=one.expand(E, NB).clone(),
            link_com_offset=torch.zeros(E, NB, 3, dtype=torch.float64, device=device),
            kp_scale=one.expand(E, J).clone(),
            kd_scale=one.expand(E, J).clone(),
            armature_scale=one.expand(E, J).clone(),
            joint_friction_scale=one.expand(E, J).clone(),
            default_joint_offset=torch.zeros(E, J, dtype=torch.float64, device=device),
            action_latency=torch.zeros(E, dtype=torch.long, device=device),
        )
    c = cfg.link_com_offset
    d = _rows(E, device, draw)
    params = EnvParams(
        friction=d.uniform(*cfg.friction),
        base_mass_add=d.uniform(*cfg.base_mass_add),
        link_mass_scale=d.uniform(*cfg.link_mass_scale, NB),
        link_com_offset=d.uniform(-c, c, NB, 3),
        kp_scale=d.uniform(*cfg.kp_scale, J),
        kd_scale=d.uniform(*cfg.kd_scale, J),
        armature_scale=d.uniform(*cfg.armature_scale, J),
        joint_friction_scale=d.uniform(*cfg.joint_friction_scale, J),
        default_joint_offset=d.uniform(-cfg.default_joint_offset, cfg.default_joint_offset, J),
        action_latency=d.randint(cfg.action_latency[0], cfg.action_latency[1] + 1),
    )
    if torso_index is not None:
        half = _const(tuple(max(c, h) for h in cfg.torso_com_offset), torch.device(device))
        params.link_com_offset[:, torso_index] = (2.0 * d.rand(3) - 1.0) * half
    return params


RESET_FIELDS = ("default_joint_offset", "action_latency")
"""Resampled at every episode reset; the physical parameters are drawn once per env at start-up
(Decision: like mjlab's "startup" events; re-uploading model arrays to the simulator drops its
recorded launch buffers, too costly at every reset)."""


def assign_rows(params: EnvParams, new: EnvParams, idx: torch.Tensor, names: tuple[str, ...] | None = None) -> None:
    """In place: rows ``idx`` [n] of ``params`` (fields ``names``, default all) take the n rows of ``new``."""
    for f in fields(params):
        if names is None or f.name in names:
            setattr(params, f.name, getattr(params, f.name).index_copy(0, idx, getattr(new, f.name)))


def assign_masked(params: EnvParams, new: EnvParams, mask: torch.Tensor, names: tuple[str, ...] | None = None) -> None:
    """In place: the rows of ``mask`` [E] bool of ``params`` (fields ``names``, default all) take the same
    rows of ``new`` (E rows); no host read (``assign_rows`` with a mask instead of indices)."""
    for f in fields(params):
        if names is None or f.name in names:
            cur = getattr(params, f.name)
            m = mask.reshape(-1, *([1] * (cur.dim() - 1)))
            setattr(params, f.name, torch.where(m, getattr(new, f.name), cur))


@functools.lru_cache(maxsize=64)
def _const(values: tuple[float, ...], device: torch.device) -> torch.Tensor:
    """A float64 constant on ``device``, made once per value and device (no host-to-device copy per call)."""
    return torch.tensor(values, dtype=torch.float64, device=device)


def sample_push_interval(
    cfg: DomainRandCfg, num: int, control_dt: float, device, draw: Draw | None = None
) -> torch.Tensor:
    """Control steps until the next push, U(push_interval_s) rounded, at least 1; [num] long."""
    s = _rows(num, device, draw).uniform(*cfg.push_interval_s)
    return torch.clamp(torch.round(s / control_dt), min=1).long()


def sample_push(cfg: DomainRandCfg, num: int, device, draw: Draw | None = None) -> torch.Tensor:
    """Velocity kicks [num, 6]: base linear (world, m/s) then angular (base frame, rad/s)."""
    half = _const(tuple(cfg.push_lin_vel) + tuple(cfg.push_ang_vel), torch.device(device))
    return (2.0 * _rows(num, device, draw).rand(6) - 1.0) * half


def sample_reset_noise(
    cfg: DomainRandCfg, num: int, num_joints: int, device, draw: Draw | None = None
) -> dict[str, torch.Tensor]:
    """Reset offsets: ``pos`` [num, 3] m, ``rpy`` [num, 3] rad, ``joints`` [num, J] rad (zeros when off); the
    half-widths are the configured box times ``cfg.reset_scale`` (the same draws, scaled)."""
    if not cfg.enabled:
        z = torch.zeros(num, 3, dtype=torch.float64, device=device)
        return {"pos": z, "rpy": z.clone(), "joints": torch.zeros(num, num_joints, dtype=torch.float64, device=device)}
    k = cfg.reset_scale
    pos_h = _const(tuple(k * x for x in cfg.reset_pos), torch.device(device))
    rot_h = _const(tuple(k * x for x in cfg.reset_rot), torch.device(device))
    d = _rows(num, device, draw)
    return {
        "pos": (2.0 * d.rand(3) - 1.0) * pos_h,
        "rpy": (2.0 * d.rand(3) - 1.0) * rot_h,
        "joints": d.uniform(-k * cfg.reset_joint, k * cfg.reset_joint, num_joints),
    }
