"""ADD: adversarial differential discriminator imitation reward (METHOD.md section 5).

Features f (simulated) and f_ref (phase-matched reference) are compared as Delta = f_ref - f,
divided by a running mean of |Delta| (``DiffNormalizer``). The discriminator D learns that the
only positive sample is Delta = 0; the reward 2 softplus(D(Delta)) is large for small residuals and
stays differentiable in the simulated features (D is frozen during the rollout, its input gradient
flows into the simulator).

Feature layout (world frame unless said, all from body poses so the reference and the robot use
the same code): root position (3), root rotation tangent-normal 6D (6), rotations of the 29
non-root bodies, tangent-normal 6D (174), key-body positions relative to the root, in the root
frame (3 K), root linear velocity (3) and angular velocity (3), joint velocities (J).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from bcg_deploy.rotations.quat_torch import tangent_normal
from bcg_deploy.training.config import ADDCfg
from bcg_deploy.training.parallel.distributed import World
from bcg_deploy.training.parallel.syncs import first_true
from bcg_deploy.training.rng import even_split

# ---------------------------------------------------------------------------------------------
# features


def feature_dim(num_bodies: int, num_key: int, num_joints: int) -> int:
    return 3 + 6 + 6 * (num_bodies - 1) + 3 * num_key + 3 + 3 + num_joints


def add_features(
    body_pos_w: torch.Tensor,
    body_mat_w: torch.Tensor,
    key_pos_w: torch.Tensor,
    root_lin_vel_w: torch.Tensor,
    root_ang_vel_w: torch.Tensor,
    joint_vel: torch.Tensor,
) -> torch.Tensor:
    """ADD features [B, D] from body poses (pos [B, NB, 3] m, rotation matrices [B, NB, 3, 3], body 0 =
    root, world), key points [B, K, 3] (world), root velocities (world, m/s, rad/s), joint rates [B, J]."""
    root_pos, root_mat = body_pos_w[:, 0], body_mat_w[:, 0]
    key_rel = ((key_pos_w - root_pos[:, None]) @ root_mat).flatten(1)  # R^T (p - p_root), row form
    parts = [
        root_pos,
        tangent_normal(root_mat),
        tangent_normal(body_mat_w[:, 1:]).flatten(1),
        key_rel,
        root_lin_vel_w,
        root_ang_vel_w,
        joint_vel,
    ]
    return torch.cat(parts, dim=-1)


# ---------------------------------------------------------------------------------------------
# normaliser, discriminator, replay


class DiffNormalizer(nn.Module):
    """Running mean of |Delta| per feature; ``normalize`` divides by it (floored)."""

    def __init__(self, dim: int, floor: float = 1e-4) -> None:
        super().__init__()
        self.floor = floor
        self.register_buffer("mean_abs", torch.ones(dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))

    @torch.no_grad()
    def update(self, delta: torch.Tensor) -> None:
        """Fold the finite rows of ``delta`` [..., D] into the running mean."""
        x = delta.detach().reshape(-1, delta.shape[-1]).abs()
        x = x[torch.isfinite(x).all(dim=-1)]
        self.update_sum(x.shape[0], x.sum(dim=0))

    @torch.no_grad()
    def update_sum(self, n: int, abs_sum: torch.Tensor) -> None:
        """Merge ``n`` rows given by the sum of their |Delta| [dim] (exact merges across processes)."""
        if n == 0:
            return
        total = self.count + n  # on the device (no host read); the weight n / total in float64 there
        w = n / total.double()
        self.mean_abs.mul_(1.0 - w).add_(w * (abs_sum / n).to(self.mean_abs.dtype))
        self.count.copy_(total)

    def normalize(self, delta: torch.Tensor) -> torch.Tensor:
        return delta / self.mean_abs.clamp_min(self.floor).to(delta.dtype)


class Discriminator(nn.Module):
    """MLP [1024, 512] with ReLU and a scalar logit; D(0) is taught to be 'real'."""

    def __init__(self, dim: int, hidden: tuple[int, ...] = (1024, 512)) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        last = dim
        for h in hidden:
            layers += [nn.Linear(last, h), nn.ReLU()]
            last = h
        self.trunk = nn.Sequential(*layers)
        self.out = nn.Linear(last, 1)
        nn.init.uniform_(self.out.weight, -1.0, 1.0)
        self.out.weight.data.mul_(0.01)
        nn.init.zeros_(self.out.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.trunk(x)).squeeze(-1)


class ReplayBuffer(nn.Module):
    """Circular buffer of past residuals (unnormalised), saved with the run."""

    def __init__(self, dim: int, size: int) -> None:
        super().__init__()
        self.register_buffer("data", torch.zeros(size, dim))
        self.register_buffer("ptr", torch.zeros((), dtype=torch.long))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))

    @torch.no_grad()
    def add(self, x: torch.Tensor, finite: bool = False) -> None:
        """Store the rows of ``x`` (non-finite rows dropped unless ``finite``: the caller did); pointer
        and count advance on the device (no host read)."""
        x = x.detach().reshape(-1, self.data.shape[1]).to(self.data.dtype)
        if not finite:
            x = x[torch.isfinite(x).all(dim=-1)]
        size = self.data.shape[0]
        if x.shape[0] > size:
            x = x[-size:]
        n = x.shape[0]
        idx = (self.ptr + torch.arange(n, device=x.device)) % size
        self.data[idx] = x
        self.ptr.copy_((self.ptr + n) % size)
        self.count.copy_((self.count + n).clamp_max(size))

    def sample(self, n: int, count: int | None = None) -> torch.Tensor:
        """``n`` stored rows drawn uniformly; ``count``: ``int(self.count)`` if the caller has read it."""
        count = int(self.count) if count is None else count
        idx = torch.randint(0, count, (n,), device=self.data.device)
        return self.data[idx]


# ---------------------------------------------------------------------------------------------
# loss and reward


def add_reward(disc: Discriminator, norm: DiffNormalizer, delta: torch.Tensor, weight: float) -> torch.Tensor:
    """r = weight * softplus(D(Delta / mean|Delta|)) = -weight log(1 - sigmoid(D)), differentiable in Delta."""
    return weight * F.softplus(disc(norm.normalize(delta)))


def action_rate_penalty(action: torch.Tensor, prev_action: torch.Tensor, weight: float) -> torch.Tensor:
    """weight * mean_j (a_t - a_{t-1})_j^2 per env (weight is negative)."""
    return weight * (action - prev_action).square().mean(dim=-1)


@dataclass
class DiscLoss:
    total: torch.Tensor
    bce: torch.Tensor
    logit_reg: torch.Tensor
    grad_penalty: torch.Tensor
    acc_pos: torch.Tensor
    acc_neg: torch.Tensor


def discriminator_loss(
    disc: Discriminator, neg: torch.Tensor, cfg: ADDCfg, w_pos: float = 1.0, w_neg: float = 1.0
) -> DiscLoss:
    """0.5 [BCE(D(0), 1) + BCE(D(neg), 0)] + logit_reg ||W_out||^2
    + grad_penalty * 0.5 (E||dD/dx(neg)||^2 + E||dD/dx(0)||^2); ``neg`` are normalised residuals.

    Data-parallel: a rank weights the data-free terms (positive sample, logit regulariser) by ``w_pos`` =
    1 / world size and its negatives' means by ``w_neg`` = its share of the negatives, so the ranks'
    losses sum to the single-process loss."""
    neg = neg.detach().requires_grad_(True)
    pos = torch.zeros(1, neg.shape[-1], dtype=neg.dtype, device=neg.device, requires_grad=True)
    logit_pos = disc(pos)
    logit_neg = disc(neg)
    bce = 0.5 * (
        w_pos * F.binary_cross_entropy_with_logits(logit_pos, torch.ones_like(logit_pos))
        + w_neg * F.binary_cross_entropy_with_logits(logit_neg, torch.zeros_like(logit_neg))
    )
    g_pos, g_neg = torch.autograd.grad(logit_pos.sum() + logit_neg.sum(), (pos, neg), create_graph=True)
    gp = 0.5 * (w_neg * g_neg.square().sum(-1).mean() + w_pos * g_pos.square().sum(-1).mean())
    reg = w_pos * disc.out.weight.square().sum()
    total = bce + cfg.logit_reg * reg + cfg.grad_penalty * gp
    with torch.no_grad():
        acc_pos = w_pos * (logit_pos > 0).float().mean()
        acc_neg = w_neg * (logit_neg < 0).float().mean()
    return DiscLoss(total, bce.detach(), reg.detach(), gp.detach(), acc_pos, acc_neg)


class ADD(nn.Module):
    """Discriminator + residual normaliser + replay buffer + optimiser step."""

    def __init__(self, dim: int, cfg: ADDCfg, world: World | None = None) -> None:
        """``world``: the data-parallel run (each rank steps on its share of the negatives; the
        gradients and the |Delta| statistics are summed over ranks)."""
        super().__init__()
        self.cfg = cfg
        self.world = world if world is not None else World(env_sizes=[1])
        self.disc = Discriminator(dim, cfg.hidden)
        self.norm = DiffNormalizer(dim, cfg.norm_floor)
        self.replay = ReplayBuffer(dim, cfg.replay_size)
        self.optimizer = torch.optim.SGD(
            self.disc.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
        )
        self.freeze()

    def freeze(self) -> None:
        """Rollout mode: D's parameters get no gradient (its input gradient still flows)."""
        self.disc.requires_grad_(False)

    def reward(self, delta: torch.Tensor) -> torch.Tensor:
        return add_reward(self.disc, self.norm, delta, self.cfg.reward_weight)

    def update(self, deltas: torch.Tensor) -> dict[str, float]:
        """One or more SGD steps on the rollout's residuals [N, E, D] (+ replay), then store them.

        Host reads: the number of finite rows and the replay count together (then the run's number of rows in a
        data-parallel run), and per SGD step one read of the summed loss terms (whether the loss is finite, and
        the logged statistics)."""
        w = self.world
        flat = deltas.detach().reshape(-1, deltas.shape[-1])
        finite = torch.isfinite(flat).all(dim=-1)
        n_local, stored = torch.stack([finite.sum(), self.replay.count.to(finite.device)]).tolist()
        flat = flat[first_true(finite, n_local)]
        stats: dict[str, float] = {}
        n = torch.full((1,), float(n_local), dtype=flat.dtype, device=flat.device)
        sums = w.all_reduce_(torch.cat([n, flat.abs().sum(0)]).double())
        n_all = int(sums[0]) if w.distributed else n_local
        if n_all == 0:
            return stats
        self.norm.update_sum(n_all, sums[1:])
        share = even_split(self.cfg.batch_size, w.size)[w.rank]
        w_neg = share / self.cfg.batch_size
        params = list(self.disc.parameters())
        self.disc.requires_grad_(True)
        try:
            for _ in range(self.cfg.updates_per_iter):
                n_cur = share if stored == 0 else share // 2
                if flat.shape[0] == 0:  # this rank has no finite residual: it contributes no negatives
                    neg = flat[:0]
                else:
                    cur = flat[torch.randint(0, flat.shape[0], (n_cur,), device=flat.device)]
                    neg = cur if stored == 0 else torch.cat([cur, self.replay.sample(share - n_cur, stored)])
                loss = discriminator_loss(
                    self.disc, self.norm.normalize(neg.to(flat.dtype)), self.cfg, 1.0 / w.size, w_neg
                )
                self.optimizer.zero_grad(set_to_none=True)
                loss.total.backward()
                parts = torch.stack(
                    [loss.total, loss.bce, loss.grad_penalty, loss.logit_reg, loss.acc_pos, loss.acc_neg]
                )
                t = w.all_reduce_grads(params, parts.detach()).tolist()  # the SGD step's one host read
                if not math.isfinite(t[0]):
                    self.optimizer.zero_grad(set_to_none=True)
                    stats["disc_skipped"] = stats.get("disc_skipped", 0.0) + 1.0
                    continue
                for p in params:
                    if p.grad is not None:
                        torch.nan_to_num_(p.grad, nan=0.0, posinf=0.0, neginf=0.0)
                self.optimizer.step()
                stats.update(
                    disc_loss=t[0], disc_bce=t[1], disc_grad_penalty=t[2], disc_logit_reg=t[3],
                    disc_acc_pos=t[4], disc_acc_neg=t[5],
                )  # fmt: skip
        finally:
            self.freeze()
        self.replay.add(flat, finite=True)
        return stats
