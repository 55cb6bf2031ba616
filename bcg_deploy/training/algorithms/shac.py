"""SHAC: short-horizon actor-critic through the differentiable env (METHOD.md section 3).

Loop contract (rsl_rl style): ``rollout(env)`` (differentiable window, returns the actor loss and
the detached buffers), ``update_actor(loss)``, ``update_critic(rollout)``, ``update_normalizers``,
``set_learning_rate``. ``td_lambda_targets`` is the pure TD(lambda) recursion the critic learns.

Actor loss of one window (N steps, E envs), with per-env discount restarting at episode ends:
    L = -(1 / (N E)) sum_envs [ sum_t gamma^t r_t + gamma^n V_target(o_end) ]
where each finished episode segment contributes its own return plus gamma^n V_target at its end
(0 on early termination / non-finite state, V_target(terminal obs) at a time-out), and the window end
bootstraps every env with V_target(o_N). V_target is the mean of the target-critic ensemble.

Data-parallel (``training.parallel.distributed.World``): each rank rolls out its share of the envs; the actor
loss is divided by the GLOBAL env count and the critic loss by the GLOBAL minibatch size (minibatches
are drawn from one permutation of the run's samples, shared by every rank), so the summed gradients are
the single-process gradients. One collective per optimiser step carries the gradients and the loss.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from bcg_deploy.training.config import SHACCfg
from bcg_deploy.training.networks import Actor, CriticEnsemble
from bcg_deploy.training.normalizer import RunningNormalizer
from bcg_deploy.training.parallel.distributed import World, world_moments
from bcg_deploy.training.parallel.flat_grads import FlatGrads
from bcg_deploy.training.parallel.syncs import first_true, read_once
from bcg_deploy.training.rng import common_seed

EVENTS = ("diverged", "fell", "strayed", "timeout")
"""The window's event counts, in the order of ``Rollout.stats["events"]``."""


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
    obs_norm: torch.Tensor  # the critics' input, normalised (the actor's noise-free terms, or the privileged ones)
    rewards: torch.Tensor  # scaled rewards (what the critic regresses)
    raw_rewards: torch.Tensor
    next_values: torch.Tensor
    done: torch.Tensor
    deltas: torch.Tensor  # ADD residuals [N, E, D]
    valid: torch.Tensor  # [N, E] state finite
    stats: dict = field(default_factory=dict)
    critic_obs: torch.Tensor | None = None  # the critics' raw privileged observations (None: they see ``obs``)


def clip_and_sanitize(params: list[torch.Tensor], max_norm: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero the NaN/Inf entries of the gradients of ``params``, then clip them to the total norm ``max_norm``.

    Branch-free and without a host read: every gradient is sanitised (a no-op on finite entries) and the
    clip scale stays on the device. Returns the total norm after the zeroing, before clipping, and the number
    of tensors that had non-finite entries (both 0-dim tensors on the device).
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        z = torch.zeros(())
        return z, z.long()
    peak = torch._foreach_norm(grads, float("inf"))  # max |g| per tensor: non-finite iff an entry is
    bad = (~torch.isfinite(torch.stack(peak))).sum()
    for g in grads:
        torch.nan_to_num_(g, nan=0.0, posinf=0.0, neginf=0.0)
    norm = torch.nn.utils.get_total_norm(grads)
    # clip_grads_with_norm_ scales the .grad of the PARAMETERS it is given (given the gradients, it clips nothing)
    torch.nn.utils.clip_grads_with_norm_([p for p in params if p.grad is not None], max_norm, norm)
    return norm, bad


def fused_adam(params: Iterable[torch.Tensor], lr: float, betas: tuple[float, float]) -> torch.optim.Adam:
    """Adam with torch's fused kernel: one pass over each tensor instead of about ten elementwise ops
    (same update; the critic's 64 steps per iteration cost 3-4 ms less each at the paper's size). A step
    is skipped on the device, without a host read, by setting ``optimizer.found_inf`` to a 0-d float
    tensor that is 1 (the step count and moments stay as they were, as under torch's GradScaler)."""
    return torch.optim.Adam(params, lr=lr, betas=betas, fused=True)


def use_fused(optimizer: torch.optim.Optimizer) -> None:
    """Keep an optimiser fused after ``load_state_dict`` (which restores a checkpoint's ``foreach`` /
    ``fused`` flags along with its hyperparameters)."""
    for g in optimizer.param_groups:
        g["fused"], g["foreach"] = True, None


def step_unless(optimizer: torch.optim.Optimizer, skip: torch.Tensor) -> None:
    """``optimizer.step()`` unless ``skip`` (a 0-dim bool tensor on the parameters' device).

    A fused optimiser decides on the device: its kernel leaves the parameters and moments untouched and the
    step count is restored (torch's ``found_inf`` path, the one ``GradScaler`` uses), no host read. Any other
    optimiser reads ``skip`` (one host sync).
    """
    if optimizer.defaults.get("fused"):
        optimizer.found_inf = skip.to(torch.float32)
        try:
            optimizer.step()
        finally:
            del optimizer.found_inf
    elif not bool(skip):
        optimizer.step()


class SHAC(nn.Module):
    """Actor, critic ensemble + target, normalisers and optimisers; see the module docstring."""

    def __init__(
        self,
        cfg: SHACCfg,
        obs_dim: int,
        act_dim: int,
        num_envs: int,
        world: World | None = None,
        seed: int = 0,
        critic_obs_dim: int | None = None,
    ) -> None:
        """``num_envs``: this process's envs; ``world``: the data-parallel run (default: one process);
        ``seed`` seeds the stream of critic minibatch permutations every rank shares; ``critic_obs_dim``: the
        size of the critics' own (privileged) observation, normalised by its own statistics (None: the
        critics see the actor's observation, noise-free)."""
        super().__init__()
        self.cfg = cfg
        self.world = world if world is not None else World(env_sizes=[int(num_envs)])
        self.actor = Actor(obs_dim, act_dim, cfg.actor_hidden, cfg.init_std)
        self.critic = CriticEnsemble(critic_obs_dim or obs_dim, cfg.critic_hidden, cfg.num_critics)
        self.target_critic = copy.deepcopy(self.critic)
        self.target_critic.requires_grad_(False)
        self.obs_normalizer = RunningNormalizer(obs_dim)
        self.critic_obs_normalizer = RunningNormalizer(critic_obs_dim) if critic_obs_dim is not None else None
        self.ret_normalizer = RunningNormalizer(1)
        self.register_buffer("ret", torch.zeros(num_envs, dtype=torch.float64))
        self.actor_optimizer = fused_adam(self.actor.parameters(), cfg.actor_lr, cfg.betas)
        self.critic_optimizer = fused_adam(self.critic.parameters(), cfg.critic_lr, cfg.betas)
        self.minibatch_generator = torch.Generator()
        self.minibatch_generator.manual_seed(common_seed(seed))
        self.counters = {"actor_skipped": 0, "critic_skipped": 0, "nan_grad_actor": 0, "nan_grad_critic": 0}
        self._flat_critic_grads: FlatGrads | None = None
        self.pending_counts: dict[str, torch.Tensor] = {}
        """Counter increments accumulated on the device during an iteration (``commit_counts`` adds them)."""

    # ------------------------------------------------------------------ helpers

    def load_critic_optimizer_state(self, sd: dict) -> None:
        """The critic optimiser's state dict, also from a checkpoint of separate ``Critic`` modules (one
        parameter per member tensor: their moments are stacked into the ensemble's batched parameters)."""
        params = list(self.critic.parameters())
        order = self.critic.member_param_order()
        ids = sd["param_groups"][0]["params"]
        if len(ids) == len(order) != len(params):
            state: dict = {}
            for new_j, p in enumerate(params):
                olds = [i for i, j in enumerate(order) if j == new_j]
                per = [sd["state"].get(ids[i]) for i in olds]
                if any(x is None for x in per):
                    continue
                state[new_j] = {
                    k: (torch.stack([x[k] for x in per]).reshape(p.shape) if per[0][k].dim() > 0 else per[0][k])
                    for k in per[0]
                }
            groups = [{**sd["param_groups"][0], "params": list(range(len(params)))}]
            sd = {"state": state, "param_groups": groups}
        self.critic_optimizer.load_state_dict(sd)
        use_fused(self.critic_optimizer)

    def load_actor_optimizer_state(self, sd: dict) -> None:
        """The actor optimiser's state dict (kept fused)."""
        self.actor_optimizer.load_state_dict(sd)
        use_fused(self.actor_optimizer)

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        return self.obs_normalizer(obs) if self.cfg.normalize_obs else obs

    def normalize_critic(self, obs: torch.Tensor) -> torch.Tensor:
        """The critics' input: their own observation by its own statistics, or the actor's by the actor's."""
        if self.critic_obs_normalizer is None:
            return self.normalize(obs)
        return self.critic_obs_normalizer(obs) if self.cfg.normalize_obs else obs

    def reward_scale(self) -> torch.Tensor:
        """The reward scale 1 / sqrt(var(return) + 1e-6) (1 before two returns were seen, or without return
        normalisation), a 0-dim float64 tensor on the device: no host read."""
        norm = self.ret_normalizer
        one = torch.ones((), dtype=torch.float64, device=norm.var.device)
        if not self.cfg.normalize_returns:
            return one
        return torch.where(norm.count < 2, one, 1.0 / torch.sqrt(norm.var[0] + 1e-6))

    def _count(self, name: str, inc: torch.Tensor) -> None:
        prev = self.pending_counts.get(name)
        inc = inc.long()
        self.pending_counts[name] = inc if prev is None else prev + inc

    def read_iteration(self, values: Any) -> Any:
        """``values`` (nested dicts/lists of device tensors and numbers, e.g. ``update_critic``'s) read by the
        host together with ``pending_counts``, in one sync (``syncs.read_once``); the counters take the
        increments. Returns ``values`` with host numbers in place of the tensors."""
        host, counts = read_once((values, self.pending_counts))
        for k, v in counts.items():
            self.counters[k] += int(v)
        self.pending_counts = {}
        return host

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
        obs, cobs = env.observe(), env.observe_critic()
        dt = obs.dtype
        rew_acc = torch.zeros(e, dtype=dt, device=obs.device)
        disc = torch.ones(e, dtype=dt, device=obs.device)
        loss = torch.zeros((), dtype=dt, device=obs.device)
        keys = ("obs", "obs_norm", "rew", "raw", "obs_next_norm", "terminated", "done", "delta", "valid", "cobs")
        bufs: dict[str, list] = {k: [] for k in keys}
        acc: dict[str, list] = {k: [] for k in ("diverged", "fell", "strayed", "timeout", "ep_len", "ep_ret")}
        stats: dict = {k: [] for k in ("tracking_error", "reward_add", "reward_action_rate", "foot_force")}
        stats |= {"reward_self_collision": [], "transition": {}}
        act_dim = self.actor.act_dim
        for t in range(n):
            obs_n = self.normalize_critic(obs if cobs is None else cobs)
            eps = env.rng.rows().randn(act_dim, dtype=dt)
            action = self.actor.sample(self.normalize(env.noisy(obs)), eps=eps)[0]
            out = env.step(action)
            r = out.reward * scale
            reached = out.obs_before_reset if out.critic_obs_before_reset is None else out.critic_obs_before_reset
            obs_next_n = self.normalize_critic(reached)
            v_next = self._bootstrap_values(obs_next_n, out.done, last=t == n - 1, every_row=env.fixed_shapes)
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
            bufs["obs_next_norm"].append(obs_next_n.detach())
            bufs["terminated"].append(out.terminated)
            bufs["done"].append(out.done)
            bufs["delta"].append(out.delta)
            bufs["valid"].append(out.valid)
            if cobs is not None:
                bufs["cobs"].append(cobs.detach())
            info = out.info
            stats["tracking_error"].append(info["tracking_error"])
            stats["reward_add"].append(info["reward_add"])
            stats["reward_action_rate"].append(info["reward_action_rate"])
            stats["reward_self_collision"].append(info["reward_self_collision"])
            if info.get("foot_force") is not None:
                stats["foot_force"].append(info["foot_force"])
            for k, v in (info.get("transition") or {}).items():  # transition counters (BCG), summed
                if isinstance(v, (int, float)):
                    stats["transition"][k] = stats["transition"].get(k, 0) + v
            acc["diverged"].append(info["diverged"])
            acc["fell"].append(info["fell"])
            acc["strayed"].append(info["strayed"])
            acc["timeout"].append(out.timeout)
            acc["ep_len"].append(info["episode_len"])
            acc["ep_ret"].append(info["episode_return"])
            obs, cobs = out.obs, out.critic_obs
        loss = loss / (n * self.world.total_envs)
        stack = {k: torch.stack(v) for k, v in bufs.items() if v}
        with torch.no_grad():  # V_target(x_{t+1}) of every step for the TD targets: one batched evaluation
            nv = self.target_critic(stack["obs_next_norm"].reshape(n * e, -1)).reshape(n, e)
            nv = torch.where(stack["terminated"], torch.zeros_like(nv), nv)
        stats["events"] = torch.stack([torch.stack(acc[k]).sum() for k in EVENTS])  # device counts [4]
        stats["episode_len"] = torch.stack(acc["ep_len"])  # [N, E], meaningful where done
        stats["episode_return"] = torch.stack(acc["ep_ret"])
        return Rollout(
            actor_loss=loss,
            obs=stack["obs"],
            obs_norm=stack["obs_norm"],
            rewards=stack["rew"],
            raw_rewards=stack["raw"],
            next_values=nv,
            done=stack["done"],
            deltas=stack["delta"],
            valid=stack["valid"],
            stats=stats,
            critic_obs=stack.get("cobs"),
        )

    def _bootstrap_values(self, obs_n: torch.Tensor, done: torch.Tensor, last: bool, every_row: bool) -> torch.Tensor:
        """V_target(o) [E] where the actor loss bootstraps: every row at the window's ``last`` step, else the
        rows that end their episode (``done``); the other rows are 0 (the loss masks them out, so their values
        and gradients were never used). ``every_row`` (fixed shapes, e.g. CUDA): every row, no host read."""
        if last or every_row:
            return self.target_critic(obs_n)
        rows = done.nonzero().squeeze(-1)
        v = torch.zeros(obs_n.shape[0], dtype=obs_n.dtype, device=obs_n.device)
        return v if rows.numel() == 0 else v.index_copy(0, rows, self.target_critic(obs_n[rows]))

    # ------------------------------------------------------------------ updates

    def update_actor(self, loss: torch.Tensor) -> dict[str, float]:
        """Backprop the window loss; sum the gradients over ranks; zero NaN grads; clip; step, unless the loss
        (of any rank) or the gradient norm is non-finite (skipped and counted).

        One host read: the summed loss, the norm and the count of non-finite gradient tensors together (every
        rank reads the same values, so every rank takes the same decision)."""
        self.actor_optimizer.zero_grad(set_to_none=True)
        params = list(self.actor.parameters())
        if loss.requires_grad:
            loss.backward()  # also when non-finite: the step is then skipped, on every rank alike
        total = self.world.all_reduce_grads(params, loss.detach())
        norm, bad = clip_and_sanitize(params, self.cfg.actor_grad_clip)
        total_f, norm_f, bad_n = read_once([total, norm, bad])  # the update's one host read
        if not math.isfinite(total_f):  # some rank's loss was non-finite: every rank skips
            return self._skip_actor(float("nan"))
        self.counters["nan_grad_actor"] += int(bad_n > 0)
        if not math.isfinite(norm_f):
            return self._skip_actor(total_f)
        self.actor_optimizer.step()
        return {"actor_loss": total_f, "actor_grad_norm": norm_f, "actor_nan_grad_tensors": float(bad_n)}

    def _skip_actor(self, loss: float) -> dict[str, float]:
        self.actor_optimizer.zero_grad(set_to_none=True)
        self.counters["actor_skipped"] += 1
        return {"actor_loss": loss, "actor_grad_norm": float("nan"), "actor_skipped": 1.0}

    def _critic_samples(self, roll: Rollout) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, int]:
        """This rank's critic samples (x [m, O], y [m]), and for each sample of the run's kept list (in the
        single-process order: step-major over all envs) its row in x, or -1 on another rank (None in a single
        process); and the run's kept count (the one host read)."""
        cfg = self.cfg
        with torch.no_grad():
            targets = td_lambda_targets(roll.rewards, roll.next_values, roll.done, cfg.gamma, cfg.lam)
        n, e = targets.shape
        x = roll.obs_norm.reshape(n * e, -1)
        y = targets.reshape(-1)
        keep = torch.isfinite(targets) & torch.isfinite(roll.obs_norm).all(dim=-1)  # [N, e]
        kept_local = keep.reshape(-1)
        w = self.world
        if not w.distributed:
            total = int(kept_local.sum())
            order = first_true(kept_local, total)
            return x[order], y[order], None, total
        keep_all = torch.cat(w.all_gather(keep.to(torch.uint8)), dim=1).bool()  # [N, E] in rank order
        total, n_local = torch.stack([keep_all.sum(), kept_local.sum()]).tolist()
        local_row = torch.full(keep_all.shape, -1, dtype=torch.long, device=keep.device)
        off = w.env_offset
        local_row[:, off : off + e] = torch.where(
            keep, torch.cumsum(kept_local.long(), 0).reshape(n, e) - 1, torch.full_like(local_row[:, :e], -1)
        )
        rows = local_row.reshape(-1)[first_true(keep_all.reshape(-1), total)]  # row in the local kept list
        order = first_true(kept_local, n_local)
        return x[order], y[order], rows, total

    def _minibatches(self, total: int, rows: torch.Tensor | None, device: torch.device) -> list[list]:
        """Per critic pass, its minibatches as (this rank's sample rows, the global minibatch size): one
        permutation of the run's samples per pass, all drawn first on the host (the same draws as one per pass)
        and copied to the device at once; in a data-parallel run the sizes of the ranks' parts are read once."""
        cfg = self.cfg
        gen = self.minibatch_generator
        perms = torch.stack([torch.randperm(total, generator=gen) for _ in range(cfg.critic_iterations)])
        if device.type == "cuda":  # from pinned memory: an asynchronous copy, not a host sync
            perms = perms.pin_memory().to(device, non_blocking=True)
        perms = perms.to(device)
        bs = max(1, total // cfg.critic_minibatches)
        mb = cfg.critic_minibatches
        bounds = [(b * bs, (b + 1) * bs if b < mb - 1 else total) for b in range(mb)]
        bounds = [(lo, min(hi, total)) for lo, hi in bounds if min(hi, total) > lo]
        if rows is None:
            return [[(perms[i, lo:hi], hi - lo) for lo, hi in bounds] for i in range(cfg.critic_iterations)]
        local = rows[perms]  # [passes, total]: row on this rank, -1 elsewhere
        mine = torch.stack([(local[:, lo:hi] >= 0).sum(dim=1) for lo, hi in bounds], dim=1).tolist()
        out = []
        for i in range(cfg.critic_iterations):
            part = []
            for (lo, hi), m in zip(bounds, mine[i], strict=True):
                seg = local[i, lo:hi]
                part.append((seg[first_true(seg >= 0, m)], hi - lo))
            out.append(part)
        return out

    def update_critic(self, roll: Rollout) -> dict[str, torch.Tensor | float]:
        """TD(lambda) targets, then ``critic_iterations`` passes over ``critic_minibatches`` shuffled batches.

        A minibatch whose loss (summed over ranks) is non-finite is skipped on the device (``step_unless``);
        the skips, the steps with NaN gradient entries (zeroed) and the logged losses are accumulated on the
        device (``pending_counts``; the returned values are 0-dim tensors), read once per iteration. With
        ``critic_bf16`` the ensemble's forward pass of the regression runs under bf16 autocast (the loss,
        gradients, optimiser and the target critic stay in the run's precision)."""
        cfg = self.cfg
        x, y, rows, total = self._critic_samples(roll)
        if total == 0:
            self.counters["critic_skipped"] += 1
            return {"critic_loss": float("nan")}
        grads = self._critic_grads()
        bf16 = cfg.critic_bf16
        xs = x.to(torch.bfloat16) if bf16 else x  # autocast's cast of every minibatch, done once (same values)
        k = self.critic.num
        last = torch.full((), float("nan"), dtype=x.dtype, device=x.device)
        for batches in self._minibatches(total, rows, x.device):
            losses, oks = [], []
            for idx, count in batches:
                with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
                    pred = self.critic.each(xs[idx])
                loss = (pred.to(y.dtype) - y[idx]).square().sum(dim=-1).sum() / count
                grads.zero_()
                loss.backward()
                loss = grads.sum_over_ranks_(loss)
                ok = torch.isfinite(loss)
                _, bad = grads.sanitize_and_clip_(cfg.critic_grad_clip)
                self._count("critic_skipped", ~ok)
                self._count("nan_grad_critic", ok & (bad > 0))
                step_unless(self.critic_optimizer, ~ok)
                losses.append(torch.where(ok, loss / k, torch.zeros_like(loss)))
                oks.append(ok)
            n_ok = torch.stack(oks).sum()
            last = torch.where(n_ok > 0, torch.stack(losses).sum() / n_ok.to(last.dtype), last)
        self._update_target()
        y_sum = self.world.all_reduce_(y.double().sum().reshape(1))
        return {"critic_loss": last, "value_target_mean": y_sum[0] / total}

    def _critic_grads(self) -> FlatGrads:
        """The critic's gradients as one flat buffer (made on first use, and again after a device move)."""
        params = list(self.critic.parameters())
        g = self._flat_critic_grads
        if g is None or g.flat.device != params[0].device or g.params[0] is not params[0]:
            g = self._flat_critic_grads = FlatGrads(params, self.world, "critic")
        return g

    @torch.no_grad()
    def _update_target(self) -> None:
        a = self.cfg.target_alpha
        tp = list(self.target_critic.parameters())
        torch._foreach_mul_(tp, a)
        torch._foreach_add_(tp, list(self.critic.parameters()), alpha=1.0 - a)

    @torch.no_grad()
    def update_normalizers(self, roll: Rollout) -> None:
        """Observation statistics from the window's raw observations; return statistics (SHAC's ret_rms)
        from the per-env discounted return of the raw rewards. Both merged exactly over ranks."""
        w = self.world
        if self.cfg.normalize_obs:
            pairs = [(self.obs_normalizer, roll.obs)]
            if self.critic_obs_normalizer is not None:
                pairs.append((self.critic_obs_normalizer, roll.critic_obs))
            for normalizer, obs in pairs:
                x = obs.reshape(-1, obs.shape[-1]).double()
                use = roll.valid.reshape(-1) & torch.isfinite(x).all(dim=1)
                x = x[first_true(use, int(use.sum()))]  # one host read: the number of rows
                normalizer.update_moments(*world_moments(w, x))
        if self.cfg.normalize_returns:
            ret = self.ret
            rets = []
            for t in range(roll.raw_rewards.shape[0]):
                ret = ret * self.cfg.gamma + roll.raw_rewards[t].double()
                rets.append(ret)
                ret = torch.where(roll.done[t], torch.zeros_like(ret), ret)
            self.ret.copy_(ret)
            per_step = torch.stack(rets)  # [N, e]: one normaliser update per step, over all envs
            n, mean, m2 = world_moments(w, per_step.T)  # moments over envs, per step
            for t in range(per_step.shape[0]):
                self.ret_normalizer.update_moments(n, mean[t : t + 1], m2[t : t + 1])

    def parameters_finite(self) -> bool:
        """True when every parameter and normaliser statistic is finite (safe to checkpoint)."""
        tensors = list(self.parameters()) + list(self.buffers())
        return bool(torch.stack([torch.isfinite(t).all() for t in tensors]).all())
