"""SHAC: short-horizon actor-critic through the differentiable env (METHOD.md section 3).

Loop contract (rsl_rl style): ``rollout(env)`` (differentiable window, returns the actor loss and
the detached buffers), ``update_actor(loss)``, ``update_critic(rollout)``, ``update_normalizers``,
``set_learning_rate``. ``td_lambda_targets`` is the pure TD(lambda) recursion the critic learns.

Actor loss of one window (N steps, E envs), with per-env discount restarting at episode ends:
    L = -(1 / (N E)) sum_envs [ sum_t gamma^t r_t + gamma^n V_target(o_end) ]
where each finished episode segment contributes its own return plus gamma^n V_target at its end
(0 on early termination / non-finite state, V_target(terminal obs) at a time-out), and the window end
bootstraps every env with V_target(o_N). V_target is the mean of the target-critic ensemble.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
from torch import nn

from bcg_deploy.training.config import SHACCfg
from bcg_deploy.training.networks import Actor, Critic
from bcg_deploy.training.normalizer import RunningNormalizer


def td_lambda_targets(
    rewards: torch.Tensor, next_values: torch.Tensor, done: torch.Tensor, gamma: float, lam: float
) -> torch.Tensor:
    """TD(lambda) value targets [N, E] of the states x_0..x_{N-1} of a window.

    ``rewards`` [N, E] r_t of the step x_t -> x_{t+1}; ``next_values`` [N, E] V(x_{t+1}) (already 0
    where the episode terminated, V(terminal) at time-outs); ``done`` [N, E] episode ended at step t.
    G_t = r_t + gamma V_{t+1} at the window end or an episode end, else
    G_t = r_t + gamma ((1 - lam) V_{t+1} + lam G_{t+1}).
    """
    n = rewards.shape[0]
    out = torch.empty_like(rewards)
    g = torch.zeros_like(rewards[0])
    for t in range(n - 1, -1, -1):
        one_step = rewards[t] + gamma * next_values[t]
        if t == n - 1:
            g = one_step
        else:
            blended = rewards[t] + gamma * ((1.0 - lam) * next_values[t] + lam * g)
            g = torch.where(done[t], one_step, blended)
        out[t] = g
    return out


@dataclass
class Rollout:
    """A window's differentiable actor loss and its detached buffers ([N, E, ...])."""

    actor_loss: torch.Tensor
    obs: torch.Tensor  # noise-free raw observations of x_0..x_{N-1}
    obs_norm: torch.Tensor  # the same, normalised (critic input)
    rewards: torch.Tensor  # scaled rewards (what the critic regresses)
    raw_rewards: torch.Tensor
    next_values: torch.Tensor
    done: torch.Tensor
    deltas: torch.Tensor  # ADD residuals [N, E, D]
    valid: torch.Tensor  # [N, E] state finite
    stats: dict = field(default_factory=dict)


class CriticEnsemble(nn.Module):
    """K critics; ``forward`` is their mean value [B]."""

    def __init__(self, obs_dim: int, hidden: tuple[int, ...], num: int) -> None:
        super().__init__()
        self.members = nn.ModuleList([Critic(obs_dim, hidden) for _ in range(num)])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.stack([c(obs) for c in self.members]).mean(0)

    def each(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.stack([c(obs) for c in self.members])


def _sanitize_grads(params) -> int:
    """Zero NaN/Inf gradient entries in place; return how many tensors had any."""
    bad = 0
    for p in params:
        if p.grad is not None and not bool(torch.isfinite(p.grad).all()):
            bad += 1
            torch.nan_to_num_(p.grad, nan=0.0, posinf=0.0, neginf=0.0)
    return bad


class SHAC(nn.Module):
    """Actor, critic ensemble + target, normalisers and optimisers; see the module docstring."""

    def __init__(self, cfg: SHACCfg, obs_dim: int, act_dim: int, num_envs: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.actor = Actor(obs_dim, act_dim, cfg.actor_hidden, cfg.init_std)
        self.critic = CriticEnsemble(obs_dim, cfg.critic_hidden, cfg.num_critics)
        self.target_critic = copy.deepcopy(self.critic)
        self.target_critic.requires_grad_(False)
        self.obs_normalizer = RunningNormalizer(obs_dim)
        self.ret_normalizer = RunningNormalizer(1)
        self.register_buffer("ret", torch.zeros(num_envs, dtype=torch.float64))
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr, betas=cfg.betas)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr, betas=cfg.betas)
        self.counters = {"actor_skipped": 0, "critic_skipped": 0, "nan_grad_actor": 0, "nan_grad_critic": 0}

    # ------------------------------------------------------------------ helpers

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        return self.obs_normalizer(obs) if self.cfg.normalize_obs else obs

    def reward_scale(self) -> float:
        if not self.cfg.normalize_returns or float(self.ret_normalizer.count) < 2:
            return 1.0
        return float(1.0 / torch.sqrt(self.ret_normalizer.var[0] + 1e-6))

    def set_learning_rate(self, iteration: int, total: int) -> tuple[float, float]:
        """Linear decay from the initial rates to ``lr_min`` at the last iteration."""
        frac = min(max(iteration / max(total, 1), 0.0), 1.0)
        a = self.cfg.actor_lr + (self.cfg.lr_min - self.cfg.actor_lr) * frac
        c = self.cfg.critic_lr + (self.cfg.lr_min - self.cfg.critic_lr) * frac
        for g in self.actor_optimizer.param_groups:
            g["lr"] = a
        for g in self.critic_optimizer.param_groups:
            g["lr"] = c
        return a, c

    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Policy action in (-1, 1) from a RAW (unnormalised) observation."""
        return self.actor(self.normalize(obs), deterministic=deterministic)

    # ------------------------------------------------------------------ rollout

    def rollout(self, env) -> Rollout:  # noqa: ANN001 - ImitationEnv (kept duck-typed for BCG variants)
        """One differentiable window of ``cfg.horizon`` control steps from the env's current state."""
        cfg = self.cfg
        n, e = cfg.horizon, env.num_envs
        gamma = cfg.gamma
        scale = self.reward_scale()
        env.detach()
        obs = env.observe()
        dt = obs.dtype
        rew_acc = torch.zeros(e, dtype=dt, device=obs.device)
        disc = torch.ones(e, dtype=dt, device=obs.device)
        loss = torch.zeros((), dtype=dt, device=obs.device)
        bufs: dict[str, list] = {k: [] for k in ("obs", "obs_norm", "rew", "raw", "nv", "done", "delta", "valid")}
        stats = {"tracking_error": [], "episode_len": [], "episode_return": []}
        stats.update(diverged=0, fell=0, strayed=0, timeout=0)
        stats.update(reward_add=[], reward_action_rate=[], foot_force=[], transition={})
        for t in range(n):
            obs_n = self.normalize(obs)
            action = self.actor(self.normalize(env.noisy(obs)))
            out = env.step(action)
            r = out.reward * scale
            v_next = self.target_critic(self.normalize(out.obs_before_reset))
            v_next = torch.where(out.terminated, torch.zeros_like(v_next), v_next)
            rew_acc = rew_acc + disc * r
            seg = -(rew_acc + gamma * disc * v_next)
            if t < n - 1:
                loss = loss + torch.where(out.done, seg, torch.zeros_like(seg)).sum()
            else:
                loss = loss + seg.sum()
            disc = torch.where(out.done, torch.ones_like(disc), disc * gamma)
            rew_acc = torch.where(out.done, torch.zeros_like(rew_acc), rew_acc)
            bufs["obs"].append(obs.detach())
            bufs["obs_norm"].append(obs_n.detach())
            bufs["rew"].append(r.detach())
            bufs["raw"].append(out.reward.detach())
            bufs["nv"].append(v_next.detach())
            bufs["done"].append(out.done)
            bufs["delta"].append(out.delta)
            bufs["valid"].append(out.valid)
            info = out.info
            stats["tracking_error"].append(info["tracking_error"])
            stats["reward_add"].append(info["reward_add"])
            stats["reward_action_rate"].append(info["reward_action_rate"])
            if info.get("foot_force") is not None:
                stats["foot_force"].append(info["foot_force"])
            for k, v in (info.get("transition") or {}).items():  # transition counters (BCG), summed
                if isinstance(v, (int, float)):
                    stats["transition"][k] = stats["transition"].get(k, 0) + v
            stats["diverged"] += int(info["diverged"].sum())
            stats["fell"] += int(info["fell"].sum())
            stats["strayed"] += int(info["strayed"].sum())
            stats["timeout"] += int(out.timeout.sum())
            stats["episode_len"] += info["episode_len"][out.done].tolist()
            stats["episode_return"] += info["episode_return"][out.done].tolist()
            obs = out.obs
        loss = loss / (n * e)
        stack = {k: torch.stack(v) for k, v in bufs.items()}
        return Rollout(
            actor_loss=loss,
            obs=stack["obs"],
            obs_norm=stack["obs_norm"],
            rewards=stack["rew"],
            raw_rewards=stack["raw"],
            next_values=stack["nv"],
            done=stack["done"],
            deltas=stack["delta"],
            valid=stack["valid"],
            stats=stats,
        )

    # ------------------------------------------------------------------ updates

    def update_actor(self, loss: torch.Tensor) -> dict[str, float]:
        """Backprop the window loss; skip (and count) a non-finite loss; zero NaN grads; clip; step."""
        self.actor_optimizer.zero_grad(set_to_none=True)
        if not bool(torch.isfinite(loss)):
            self.counters["actor_skipped"] += 1
            return {"actor_loss": float("nan"), "actor_grad_norm": float("nan"), "actor_skipped": 1.0}
        loss.backward()
        nan_tensors = _sanitize_grads(self.actor.parameters())
        self.counters["nan_grad_actor"] += int(nan_tensors > 0)
        norm = torch.nn.utils.clip_grad_norm_(self.actor.parameters(), self.cfg.actor_grad_clip)
        if not bool(torch.isfinite(norm)):
            self.actor_optimizer.zero_grad(set_to_none=True)
            self.counters["actor_skipped"] += 1
            return {"actor_loss": float(loss.detach()), "actor_grad_norm": float("nan"), "actor_skipped": 1.0}
        self.actor_optimizer.step()
        return {
            "actor_loss": float(loss.detach()),
            "actor_grad_norm": float(norm),
            "actor_nan_grad_tensors": float(nan_tensors),
        }

    def update_critic(self, roll: Rollout) -> dict[str, float]:
        """TD(lambda) targets, then ``critic_iterations`` passes over ``critic_minibatches`` shuffled batches."""
        cfg = self.cfg
        with torch.no_grad():
            targets = td_lambda_targets(roll.rewards, roll.next_values, roll.done, cfg.gamma, cfg.lam)
        x = roll.obs_norm.reshape(-1, roll.obs_norm.shape[-1])
        y = targets.reshape(-1)
        keep = torch.isfinite(y) & torch.isfinite(x).all(dim=-1)
        x, y = x[keep], y[keep]
        total = x.shape[0]
        if total == 0:
            self.counters["critic_skipped"] += 1
            return {"critic_loss": float("nan")}
        bs = max(1, total // cfg.critic_minibatches)
        last = float("nan")
        for _ in range(cfg.critic_iterations):
            perm = torch.randperm(total, device=x.device)
            losses = []
            for b in range(cfg.critic_minibatches):
                idx = perm[b * bs : (b + 1) * bs] if b < cfg.critic_minibatches - 1 else perm[b * bs :]
                if idx.numel() == 0:
                    continue
                pred = self.critic.each(x[idx])
                loss = (pred - y[idx]).square().mean(dim=-1).sum()
                if not bool(torch.isfinite(loss)):
                    self.counters["critic_skipped"] += 1
                    continue
                self.critic_optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.counters["nan_grad_critic"] += int(_sanitize_grads(self.critic.parameters()) > 0)
                torch.nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.critic_grad_clip)
                self.critic_optimizer.step()
                losses.append(float(loss.detach()) / len(self.critic.members))
            if losses:
                last = sum(losses) / len(losses)
        self._update_target()
        return {"critic_loss": last, "value_target_mean": float(y.mean())}

    @torch.no_grad()
    def _update_target(self) -> None:
        a = self.cfg.target_alpha
        for p, tp in zip(self.critic.parameters(), self.target_critic.parameters(), strict=True):
            tp.mul_(a).add_((1.0 - a) * p)

    @torch.no_grad()
    def update_normalizers(self, roll: Rollout) -> None:
        """Observation statistics from the window's raw observations; return statistics (SHAC's ret_rms)
        from the per-env discounted return of the raw rewards."""
        if self.cfg.normalize_obs:
            valid = roll.valid.reshape(-1)
            self.obs_normalizer.update(roll.obs.reshape(-1, roll.obs.shape[-1])[valid])
        if self.cfg.normalize_returns:
            ret = self.ret
            for t in range(roll.raw_rewards.shape[0]):
                ret = ret * self.cfg.gamma + roll.raw_rewards[t].double()
                self.ret_normalizer.update(ret[:, None])
                ret = torch.where(roll.done[t], torch.zeros_like(ret), ret)
            self.ret.copy_(ret)

    def parameters_finite(self) -> bool:
        """True when every parameter and normaliser statistic is finite (safe to checkpoint)."""
        return all(bool(torch.isfinite(t).all()) for t in list(self.parameters()) + list(self.buffers()))
