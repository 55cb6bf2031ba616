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
from pathlib import Path

import torch

from bcg_deploy.motions.motion import Motion
from bcg_deploy.robots import load_robot
from bcg_deploy.training import checkpoint as ckpt_io
from bcg_deploy.training.config import TrainConfig, from_dict
from bcg_deploy.training.env import ImitationEnv
from bcg_deploy.training.networks import Actor
from bcg_deploy.training.normalizer import RunningNormalizer


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
) -> dict:
    """Roll the actor out for ``steps`` control steps in ``num_envs`` envs; see the module docstring."""
    cfg = copy.deepcopy(cfg)
    cfg.env.num_envs = num_envs
    cfg.env.obs_noise = False
    if nominal:
        cfg.domain_rand.enabled = False
    rng = torch.get_rng_state()
    torch.manual_seed(seed)
    try:
        env = ImitationEnv(cfg, load_robot(cfg.robot), motion, sim=sim, device=cfg.runner.device)
        obs = env.reset()
        alive = torch.zeros(num_envs, dtype=torch.long)
        lengths: list[int] = []
        falls = strayed = 0
        err_sum, err_n = 0.0, 0
        pen_sum, pen_n = 0.0, 0
        for _ in range(steps):
            x = obs_normalizer(obs) if obs_normalizer is not None else obs
            x = x.to(next(actor.parameters()).dtype)
            a = actor(x, deterministic=deterministic).to(env.dtype)
            out = env.step(a)
            alive += 1
            e = out.info["tracking_error"]
            ok = torch.isfinite(e)
            err_sum += float(e[ok].double().sum())
            err_n += int(ok.sum())
            depth = out.info["transition"].get("contact_depth")
            if depth is not None:
                live = depth[~out.info["diverged"]]
                pen_sum += float(live.clamp_min(0).double().sum())
                pen_n += int((live > 0).sum())
            falls += int((out.terminated & ~out.info["strayed"]).sum())
            strayed += int(out.info["strayed"].sum())
            lengths += alive[out.done].tolist()
            alive[out.done] = 0
            obs = out.obs
        censored = [int(x) for x in alive.tolist() if x > 0]
    finally:
        torch.set_rng_state(rng)
    all_len = lengths + censored
    return {
        "tracking_error_cm": 100.0 * err_sum / max(err_n, 1),
        "episode_length": sum(all_len) / max(len(all_len), 1),
        "episodes_ended": len(lengths),
        "falls": falls,
        "strayed": strayed,
        "falls_per_env_minute": falls / (num_envs * steps * env.control_dt / 60.0),
        "foot_penetration_mm": 1000.0 * pen_sum / pen_n if pen_n else None,
        "steps": steps,
        "num_envs": num_envs,
        "seed": seed,
    }


def evaluate_checkpoint(path: str | Path, **kwargs) -> dict:
    """``evaluate_policy`` for the actor and normaliser stored in a run.pt."""
    ck = ckpt_io.load_checkpoint(path, required=ckpt_io.EXPORT_KEYS)
    d = dict(ck["config"])
    d["sim"] = {k: v for k, v in d["sim"].items() if k != "control_dt"}
    cfg = from_dict(d)
    actor = Actor.from_state_dict(ck["actor"])
    norm = RunningNormalizer.from_state_dict(ck["obs_normalizer"]) if cfg.shac.normalize_obs else None
    dtype = torch.float64 if cfg.sim.dtype == "float64" else torch.float32
    actor.to(dtype)
    return {
        **evaluate_policy(cfg, ckpt_io.motion_from_checkpoint(ck), actor, norm, **kwargs),
        "iteration": ck["iteration"],
    }
