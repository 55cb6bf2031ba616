"""Policy evaluation in the training simulator: deterministic actions, fixed seed, no gradients.

``evaluate_checkpoint(run.pt)`` and ``evaluate_policy(cfg, motion, actor, normalizer)`` run E envs
for a fixed number of control steps from seeded reference-state initialisations and report the
global mean per-body position error (cm, over all live steps), the mean length of the episodes
that ended (falls and time-outs) plus the still-running ones (censored at the end), and the fall
rate; episodes ended by ``env.max_tracking_error`` are counted apart (``strayed``). The same seed
gives the same start phases, so an untrained and a trained actor are compared on identical starts.
``nominal=True`` turns domain randomisation (and pushes) off. With contact, the mean foot-sphere
penetration while penetrating (mm, at the last physics substep of each control step) is reported
too: the training-simulator side of the paper's Delta d.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import torch

from bcg_deploy.motions.motion import Motion
from bcg_deploy.training import checkpoint as ckpt_io
from bcg_deploy.training.config import TrainConfig, from_dict, training_robot
from bcg_deploy.training.device import resolve_device
from bcg_deploy.training.env.imitation import ImitationEnv, StepOut
from bcg_deploy.training.networks import Actor
from bcg_deploy.training.normalizer import RunningNormalizer
from bcg_deploy.training.rng import EnvRandom


@torch.no_grad()
def evaluate_policy(
    cfg: TrainConfig,
    motion: Motion,
    actor: Actor,
    obs_normalizer: RunningNormalizer | None,
    num_envs: int = 16,
    steps: int = 250,
    seed: int = 1234,
    deterministic: bool = True,
    sim=None,  # noqa: ANN001 - a Simulator with num_envs envs, to reuse compiled buffers
    nominal: bool = False,
    device: str | torch.device | None = None,
) -> dict:
    """Roll the actor out for ``steps`` control steps in ``num_envs`` envs; see the module docstring.

    Everything runs on ONE device: ``device`` (default ``cfg.runner.device``, resolved to "cuda:N"); the
    actor and normaliser are used there (copies when the caller's live elsewhere). Statistics accumulate
    on that device and are read once at the end. The RNG states of the CPU and that device are restored."""
    cfg = _evaluation_cfg(cfg, num_envs, nominal)
    dev = resolve_device(cfg.runner.device if device is None else device)
    actor, obs_normalizer = _on(actor, dev), _on(obs_normalizer, dev)
    with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
        torch.manual_seed(seed)
        rng = EnvRandom(seed, [num_envs], device=dev)  # the envs' draws follow ``seed``, not the run's
        env = ImitationEnv(cfg, training_robot(cfg), motion, sim=sim, device=dev, rng=rng)
        stats = _rollout(env, actor, obs_normalizer, steps, deterministic)
    return {
        **stats,
        "falls_per_env_minute": stats["falls"] / (num_envs * steps * env.control_dt / 60.0),
        "steps": steps,
        "num_envs": num_envs,
        "seed": seed,
    }


def _evaluation_cfg(cfg: TrainConfig, num_envs: int, nominal: bool) -> TrainConfig:
    """A copy of ``cfg`` for evaluation: ``num_envs`` envs, no observation noise, uniform start phases (the
    same seed, the same starts, however the run trained); ``nominal``: no domain randomisation or pushes."""
    cfg = copy.deepcopy(cfg)
    cfg.env.num_envs = num_envs
    cfg.env.obs_noise = False
    cfg.env.adaptive_start = False
    if nominal:
        cfg.domain_rand.enabled = False
    return cfg


def _on(module: torch.nn.Module | None, dev: torch.device) -> torch.nn.Module | None:
    """``module`` itself when its tensors are on ``dev``, else a copy moved there."""
    if module is None:
        return None
    tensors = list(module.parameters()) + list(module.buffers())
    if all(t.device == dev for t in tensors):
        return module
    return copy.deepcopy(module).to(dev)


def _rollout(env: ImitationEnv, actor: Actor, obs_normalizer, steps: int, deterministic: bool) -> dict:  # noqa: ANN001
    """The evaluation loop: device-side sums, one read at the end."""
    dev, n = env.device, env.num_envs
    obs = env.reset()
    zero = lambda dtype: torch.zeros((), dtype=dtype, device=dev)  # noqa: E731
    alive = torch.zeros(n, dtype=torch.long, device=dev)
    err_sum, pen_sum = zero(torch.float64), zero(torch.float64)
    err_n, pen_n, falls, strayed, ended, ended_len = (zero(torch.long) for _ in range(6))
    actor_dtype = next(actor.parameters()).dtype
    for _ in range(steps):
        x = obs_normalizer(obs) if obs_normalizer is not None else obs
        a = actor(x.to(actor_dtype), deterministic=deterministic).to(env.dtype)
        out = env.step(a)
        alive += 1
        e = out.info["tracking_error"]
        ok = torch.isfinite(e)
        err_sum += torch.where(ok, e, torch.zeros_like(e)).double().sum()
        err_n += ok.sum()
        depth = out.info["transition"].get("contact_depth")
        if depth is not None:
            live = torch.where(out.info["diverged"][:, None], torch.zeros_like(depth), depth)
            pen_sum += live.clamp_min(0).double().sum()
            pen_n += (live > 0).sum()
        falls += (out.terminated & ~out.info["strayed"]).sum()
        strayed += out.info["strayed"].sum()
        ended += out.done.sum()
        ended_len += torch.where(out.done, alive, torch.zeros_like(alive)).sum()
        alive = alive.masked_fill(out.done, 0)
        obs = out.obs
    running = alive > 0
    sums = (err_sum, err_n, pen_sum, pen_n, falls, strayed, ended, ended_len, running.sum(), (alive * running).sum())
    totals = torch.stack([x.double() for x in sums]).tolist()  # the one host read of the evaluation
    err_sum, err_n, pen_sum, pen_n, falls, strayed, ended, ended_len, n_run, run_len = totals
    return {
        "tracking_error_cm": 100.0 * err_sum / max(err_n, 1.0),
        "episode_length": (ended_len + run_len) / max(ended + n_run, 1.0),
        "episodes_ended": int(ended),
        "falls": int(falls),
        "strayed": int(strayed),
        "foot_penetration_mm": 1000.0 * pen_sum / pen_n if pen_n else None,
    }


END_REASONS = ("fall", "stray", "diverged", "clip end", "running")


@torch.no_grad()
def failure_map(
    cfg: TrainConfig,
    motion: Motion,
    actor: Actor,
    obs_normalizer: RunningNormalizer | None,
    every_s: float = 0.5,
    nominal: bool = True,
    stray: bool = False,
    seed: int = 1234,
    device: str | torch.device | None = None,
) -> list[dict]:
    """Where in its clip a policy fails, in the training simulator.

    One env starts at each multiple of ``every_s`` seconds of the clip (the last start at least one control
    step before its end), from the reference state (with the reset noise unless ``nominal``, which also
    turns domain randomisation and pushes off); see :func:`first_episodes` for the rows."""
    dt = cfg.sim.physics_dt * cfg.sim.substeps
    every = max(int(round(every_s / dt)), 1)
    starts = torch.arange(0, motion.num_frames - 1, every)
    return first_episodes(cfg, motion, actor, obs_normalizer, starts, nominal=nominal, stray=stray, seed=seed,
                          device=device)  # fmt: skip


@torch.no_grad()
def first_episodes(
    cfg: TrainConfig,
    motion: Motion,
    actor: Actor,
    obs_normalizer: RunningNormalizer | None,
    start_frames: torch.Tensor,
    start_noise: dict[str, torch.Tensor] | None = None,
    nominal: bool = True,
    stray: bool = False,
    seed: int = 1234,
    device: str | torch.device | None = None,
    on_step: Callable[[ImitationEnv, StepOut], None] | None = None,
) -> list[dict]:
    """The first episode of one env per start frame ``start_frames`` [n], in the training simulator.

    Each env starts from the reference state at its frame (with the reset noise unless ``nominal``, which also
    turns domain randomisation and pushes off), or, given ``start_noise`` (``pos`` [n, 3] m, ``rpy`` [n, 3]
    rad, ``joints`` [n, J] rad: the offsets of ``domain_rand.sample_reset_noise``, e.g. sim2sim's perturbed
    starts), from the reference state plus exactly those offsets. Deterministic actions, no observation
    noise; each env runs until its first episode ends.
    ``stray``: keep ``env.max_tracking_error`` (else only falls, divergence and the clip's end end an
    episode). Returns one row per start: ``start_s`` and ``end_s`` (s from the clip's start), ``survived_s``,
    ``end`` (one of ``END_REASONS``) and ``tracking_error_cm`` (mean per-body error over the episode).
    ``on_step(env, out)`` is called after every control step (rows whose episode ended there are already
    reset in ``env.q``)."""
    dt = cfg.sim.physics_dt * cfg.sim.substeps
    n = len(start_frames)
    cfg = _evaluation_cfg(cfg, n, nominal)
    if not stray:
        cfg.env.max_tracking_error = None
    dev = resolve_device(cfg.runner.device if device is None else device)
    actor, obs_normalizer = _on(actor, dev), _on(obs_normalizer, dev)
    starts = torch.as_tensor(start_frames, dtype=torch.long, device=dev)
    with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
        torch.manual_seed(seed)
        env = ImitationEnv(cfg, training_robot(cfg), motion, device=dev, rng=EnvRandom(seed, [n], device=dev))
        obs = env.reset(start_frames=starts)
        if start_noise is not None:
            env.q, env.qd = env.reference_state(starts, {k: v.to(dev) for k, v in start_noise.items()})
            obs = env.observe()
        end = torch.full((n,), -1, dtype=torch.long, device=dev)
        reason = torch.full((n,), END_REASONS.index("running"), dtype=torch.long, device=dev)
        err_sum = torch.zeros(n, dtype=torch.float64, device=dev)
        actor_dtype = next(actor.parameters()).dtype
        for _ in range(motion.num_frames):
            x = obs_normalizer(obs) if obs_normalizer is not None else obs
            frame = env.frame
            out = env.step(actor(x.to(actor_dtype), deterministic=True).to(env.dtype))
            if on_step is not None:
                on_step(env, out)
            live = end < 0
            e = out.info["tracking_error"]
            err_sum += torch.where(live & torch.isfinite(e), e, torch.zeros_like(e)).double()
            ended = live & out.done
            code = torch.stack([out.info["fell"], out.info["strayed"], out.info["diverged"], out.done]).long().argmax(0)
            reason = torch.where(ended, code, reason)
            end = torch.where(ended, frame + 1, end)
            if bool((end >= 0).all()):
                break
            obs = out.obs
    end = torch.where(end < 0, env.frame, end)
    rows = []
    for s_, e_, r_, err in zip(starts.tolist(), end.tolist(), reason.tolist(), err_sum.tolist(), strict=True):
        steps = max(e_ - s_, 1)
        rows.append({"start_s": s_ * dt, "end_s": e_ * dt, "survived_s": (e_ - s_) * dt, "end": END_REASONS[r_],
                     "tracking_error_cm": 100.0 * err / steps})  # fmt: skip
    return rows


def load_policy(path: str | Path) -> tuple[TrainConfig, Motion, Actor, RunningNormalizer | None, int]:
    """The config, clip, actor (in the simulator's dtype), normaliser and iteration stored in a run.pt."""
    ck = ckpt_io.load_checkpoint(path, required=ckpt_io.EXPORT_KEYS)
    d = dict(ck["config"])
    d["sim"] = {k: v for k, v in d["sim"].items() if k != "control_dt"}
    cfg = from_dict(d)
    actor = Actor.from_state_dict(ck["actor"])
    norm = RunningNormalizer.from_state_dict(ck["obs_normalizer"]) if cfg.shac.normalize_obs else None
    actor.to(torch.float64 if cfg.sim.dtype == "float64" else torch.float32)
    return cfg, ckpt_io.motion_from_checkpoint(ck), actor, norm, ck["iteration"]


def evaluate_checkpoint(path: str | Path, **kwargs) -> dict:
    """``evaluate_policy`` for the actor and normaliser stored in a run.pt."""
    cfg, motion, actor, norm, iteration = load_policy(path)
    return {**evaluate_policy(cfg, motion, actor, norm, **kwargs), "iteration": iteration}
