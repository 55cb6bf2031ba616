"""Every number of a ``TrainConfig`` checked before anything runs (``TrainConfig.validate`` calls ``check_values``).

Generic rules, over the dataclass fields themselves (so a field added later is covered too):

- every float, alone, in a tuple or in an optional field, is finite (``ALLOW_INF`` names the exceptions, where
  an infinite value means "never"; NaN is never allowed);
- every numeric field has a bound in ``BOUNDS`` (checked on each element of a tuple) or is named in ``FREE``
  (any finite value works); a test keeps that so;
- every 2-tuple of ``domain_rand`` is a (low, high) range: low <= high;

plus the couplings no single field shows (``_couplings``): the control period physics_dt x substeps is the
clips' frame period (the motions are resampled to ``CONTROL_FPS``). A violation is one line:
``<key> must be <bound>, got <value>`` (the CLI prints it as ``error: ...`` and exits 2).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable, Iterator
from typing import Any

from bcg_deploy.errors import BcgdError
from bcg_deploy.motions import CONTROL_FPS


@dataclasses.dataclass(frozen=True)
class Bound:
    ok: Callable[[float], bool]
    text: str


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def gt(lo: float) -> Bound:
    return Bound(lambda v: v > lo, f"> {_num(lo)}")


def ge(lo: float) -> Bound:
    return Bound(lambda v: v >= lo, f">= {_num(lo)}")


def le(hi: float) -> Bound:
    return Bound(lambda v: v <= hi, f"<= {_num(hi)}")


def within(lo: float, hi: float, left: str = "[", right: str = "]") -> Bound:
    def ok(v: float) -> bool:
        return (v >= lo if left == "[" else v > lo) and (v <= hi if right == "]" else v < hi)

    return Bound(ok, f"in {left}{_num(lo)}, {_num(hi)}{right}")


POSITIVE, NON_NEGATIVE, COUNT, FRACTION = gt(0), ge(0), ge(1), within(0, 1)
DISCOUNT = within(0, 1, "(", ")")

BOUNDS: dict[str, Bound] = {
    "motion.start_s": NON_NEGATIVE,
    "motion.duration_s": POSITIVE,
    "sim.physics_dt": POSITIVE,
    "sim.substeps": COUNT,
    "sim.kappa": POSITIVE,
    "sim.contact_iterations": COUNT,
    "env.num_envs": COUNT,
    "env.max_tracking_error": POSITIVE,
    "env.action_scale": POSITIVE,
    "env.action_scale_factor": POSITIVE,
    "env.obs_noise_scale": NON_NEGATIVE,
    "env.adaptive_bin_s": POSITIVE,
    "env.adaptive_kernel_bins": COUNT,
    "env.adaptive_decay": within(0, 1, "("),
    "env.adaptive_uniform": FRACTION,
    "env.adaptive_alpha": within(0, 1, "("),
    "env.first_frame_share": FRACTION,
    "env.max_abs_qd": POSITIVE,
    "env.max_abs_pos": POSITIVE,
    "env.self_collision_weight": le(0),
    "domain_rand.friction": NON_NEGATIVE,
    "domain_rand.link_mass_scale": POSITIVE,
    "domain_rand.link_com_offset": NON_NEGATIVE,
    "domain_rand.torso_com_offset": NON_NEGATIVE,
    "domain_rand.kp_scale": NON_NEGATIVE,
    "domain_rand.kd_scale": NON_NEGATIVE,
    "domain_rand.armature_scale": NON_NEGATIVE,
    "domain_rand.joint_friction_scale": NON_NEGATIVE,
    "domain_rand.default_joint_offset": NON_NEGATIVE,
    "domain_rand.action_latency": NON_NEGATIVE,
    "domain_rand.push_interval_s": POSITIVE,
    "domain_rand.push_lin_vel": NON_NEGATIVE,
    "domain_rand.push_ang_vel": NON_NEGATIVE,
    "domain_rand.reset_pos": NON_NEGATIVE,
    "domain_rand.reset_rot": NON_NEGATIVE,
    "domain_rand.reset_joint": NON_NEGATIVE,
    "domain_rand.reset_scale": NON_NEGATIVE,
    "add.hidden": COUNT,
    "add.lr": POSITIVE,
    "add.momentum": within(0, 1, "[", ")"),
    "add.weight_decay": NON_NEGATIVE,
    "add.logit_reg": NON_NEGATIVE,
    "add.grad_penalty": NON_NEGATIVE,
    "add.reward_weight": NON_NEGATIVE,
    "add.norm_floor": POSITIVE,
    "add.replay_size": COUNT,
    "add.batch_size": ge(2),
    "add.updates_per_iter": NON_NEGATIVE,
    "shac.horizon": COUNT,
    "shac.gamma": DISCOUNT,
    "shac.lam": FRACTION,
    "shac.actor_lr": POSITIVE,
    "shac.critic_lr": POSITIVE,
    "shac.lr_min": NON_NEGATIVE,
    "shac.betas": within(0, 1, "[", ")"),
    "shac.actor_grad_clip": POSITIVE,
    "shac.critic_grad_clip": POSITIVE,
    "shac.init_std": POSITIVE,
    "shac.actor_hidden": COUNT,
    "shac.critic_hidden": COUNT,
    "shac.num_critics": COUNT,
    "shac.critic_iterations": COUNT,
    "shac.critic_minibatches": COUNT,
    "shac.target_alpha": FRACTION,
    "ppo.num_envs": COUNT,
    "ppo.iterations": COUNT,
    "ppo.num_steps_per_env": COUNT,
    "ppo.learning_rate": POSITIVE,
    "ppo.desired_kl": POSITIVE,
    "ppo.num_learning_epochs": COUNT,
    "ppo.num_mini_batches": COUNT,
    "ppo.clip_param": POSITIVE,
    "ppo.entropy_coef": NON_NEGATIVE,
    "ppo.value_loss_coef": NON_NEGATIVE,
    "ppo.max_grad_norm": POSITIVE,
    "ppo.gamma": DISCOUNT,
    "ppo.lam": FRACTION,
    "ppo.init_std": POSITIVE,
    "ppo.actor_hidden": COUNT,
    "ppo.critic_hidden": COUNT,
    "ppo.disc_updates_per_iter": NON_NEGATIVE,
    "bcg.num_branches": COUNT,
    "bcg.horizon": COUNT,
    "bcg.sigma_p": NON_NEGATIVE,
    "bcg.sigma_v": NON_NEGATIVE,
    "bcg.damping": POSITIVE,
    "bcg.max_dq": POSITIVE,
    "bcg.max_dqd": POSITIVE,
    "runner.iterations": COUNT,
    "runner.save_every": COUNT,
    "runner.keep_every": NON_NEGATIVE,
    "runner.seed": within(0, 2**32 - 1),  # numpy's legacy seeding takes 32 bits
    "runner.stop_at": NON_NEGATIVE,
    "runner.env_streams": COUNT,
    "runner.threads": NON_NEGATIVE,
    "debug.inject_nan_iteration": ge(-1),
    "debug.inject_nan_step": NON_NEGATIVE,
}
"""The bound of each numeric field (of each element of a tuple field); None in an optional field is allowed."""

FREE = frozenset({"env.fall_height", "env.action_rate_weight", "domain_rand.base_mass_add", "bcg.tau"})
"""Numeric fields any finite value of which is meaningful (a fall height below the floor never ends an
episode; a reward weight of either sign; an added mass of either sign; a trigger force)."""

ALLOW_INF = frozenset({"bcg.tau"})
"""Fields where an infinite value means "never" (a bundle trigger force no contact reaches)."""


def _leaves(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from _leaves(value, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", value


def _numbers(value: Any) -> list[int | float] | None:
    """The numbers of a numeric field (one, or a tuple's), None for a non-numeric field."""
    items = value if isinstance(value, (tuple, list)) else (value,)
    if not items or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
        return None
    return list(items)


def numeric_keys(cfg: Any, prefix: str = "") -> list[str]:
    """The dotted keys of every field of ``cfg`` whose type holds an int or a float (for the test that each
    has a rule)."""
    keys = []
    hints = typing.get_type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            keys += numeric_keys(value, f"{prefix}{f.name}.")
        elif _holds_number(hints[f.name]):
            keys.append(f"{prefix}{f.name}")
    return keys


def _holds_number(tp: Any) -> bool:
    if tp in (int, float):
        return True
    return any(_holds_number(a) for a in typing.get_args(tp) if a is not Ellipsis)


def _shown(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value) + ")"
    return f"{value:g}" if isinstance(value, float) else str(value)


def check_values(cfg: Any) -> None:
    """One-line BcgdError for the first value of ``cfg`` (a ``TrainConfig``) that breaks a rule above."""
    for key, value in _leaves(cfg):
        numbers = _numbers(value)
        if numbers is None:
            continue
        bound = BOUNDS.get(key)
        for v in numbers:
            if isinstance(v, float) and not (math.isfinite(v) or (key in ALLOW_INF and not math.isnan(v))):
                within_ = f" {bound.text}" if bound is not None else ""
                raise BcgdError(f"{key} must be a finite number{within_}, got {_shown(value)}")
        if bound is not None and not all(bound.ok(v) for v in numbers):
            each = " (each)" if isinstance(value, (tuple, list)) else ""
            raise BcgdError(f"{key} must be {bound.text}{each}, got {_shown(value)}")
        if key.startswith("domain_rand.") and isinstance(value, (tuple, list)) and len(value) == 2:
            if value[0] > value[1]:
                raise BcgdError(f"{key} is a (low, high) range: low must be <= high, got {_shown(value)}")
    _couplings(cfg)


def check_bcg_cfg(cfg: Any) -> Any:
    """Raise BcgdError for values no bundle can use (``cfg``: a ``BCGCfg``, checked before its run starts and
    again by the bundle that uses it); return ``cfg``."""
    fin = math.isfinite
    checks = [
        (cfg.num_branches >= 1, "bcg.num_branches must be >= 1", cfg.num_branches),
        (cfg.horizon >= 1, "bcg.horizon must be >= 1 control step", cfg.horizon),
        (fin(cfg.sigma_p) and cfg.sigma_p >= 0, "bcg.sigma_p must be finite and >= 0 (m)", cfg.sigma_p),
        (fin(cfg.sigma_v) and cfg.sigma_v >= 0, "bcg.sigma_v must be finite and >= 0 (m/s)", cfg.sigma_v),
        (not math.isnan(cfg.tau), "bcg.tau must be a number (N)", cfg.tau),
        (fin(cfg.damping) and cfg.damping > 0, "bcg.damping must be finite and > 0", cfg.damping),
    ]
    for name in ("max_dq", "max_dqd"):
        v = getattr(cfg, name)
        unit = "rad" if name == "max_dq" else "rad/s"
        checks.append((v is None or (fin(v) and v > 0), f"bcg.{name} must be finite and > 0 ({unit}) or none", v))
    for ok, msg, value in checks:
        if not ok:
            raise BcgdError(f"{msg}, got {value}")
    return cfg


def _couplings(cfg: Any) -> None:
    control_dt = cfg.sim.physics_dt * cfg.sim.substeps
    if abs(control_dt * CONTROL_FPS - 1.0) > 1e-6:
        raise BcgdError(
            f"sim.physics_dt x sim.substeps must be the control period {1 / CONTROL_FPS:g} s (the clips are at "
            f"{CONTROL_FPS:g} fps), got {cfg.sim.physics_dt:g} x {cfg.sim.substeps} = {control_dt:g} s"
        )
