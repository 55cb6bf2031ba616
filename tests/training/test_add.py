"""ADD: residual normaliser, discriminator loss terms, replay buffer, differentiable softplus reward."""

from __future__ import annotations

import math

import torch

from bcg_deploy.rotations.quat_torch import axis_angle_quat, quat_to_mat, tangent_normal
from bcg_deploy.training.config import ADDCfg
from bcg_deploy.training.env.add import (
    ADD,
    DiffNormalizer,
    Discriminator,
    ReplayBuffer,
    action_rate_penalty,
    discriminator_loss,
)

CFG = ADDCfg(hidden=(16, 8), batch_size=32, replay_size=64)


def test_tangent_normal_is_x_and_z_axes():
    q = axis_angle_quat(
        torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64), torch.tensor(math.pi / 2, dtype=torch.float64)
    )
    tn = tangent_normal(quat_to_mat(q))
    torch.testing.assert_close(tn, torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0, 1.0], dtype=torch.float64))


def test_diff_normalizer_is_running_mean_abs():
    n = DiffNormalizer(3, floor=1e-4)
    a = torch.tensor([[1.0, -2.0, 0.0], [3.0, 2.0, 0.0]])
    b = torch.tensor([[-5.0, 0.0, 0.0]])
    n.update(a)
    n.update(b)
    torch.testing.assert_close(n.mean_abs, torch.cat([a, b]).abs().mean(0))
    out = n.normalize(torch.ones(1, 3))
    torch.testing.assert_close(out, torch.tensor([[1 / 3, 0.75, 1e4]]))  # floor on the all-zero feature


def test_replay_buffer_wraps_and_drops_non_finite():
    r = ReplayBuffer(2, size=4)
    r.add(torch.arange(6.0).reshape(3, 2))
    r.add(torch.tensor([[float("nan"), 0.0], [10.0, 11.0], [12.0, 13.0]]))
    assert int(r.count) == 4 and int(r.ptr) == 1
    assert torch.isfinite(r.data).all()
    assert {tuple(x) for x in r.data.tolist()} == {(12.0, 13.0), (2.0, 3.0), (4.0, 5.0), (10.0, 11.0)}


def test_discriminator_loss_terms_match_definitions():
    torch.manual_seed(0)
    d = Discriminator(5, (16, 8)).double()
    neg = torch.randn(7, 5, dtype=torch.float64)
    loss = discriminator_loss(d, neg, CFG)
    lp, ln = d(torch.zeros(1, 5, dtype=torch.float64)), d(neg)
    bce = 0.5 * (-torch.log(torch.sigmoid(lp)).mean() - torch.log(1 - torch.sigmoid(ln)).mean())

    # gradient penalty by central finite differences of D at each input
    def grad_fd(x):
        g = torch.zeros_like(x)
        for i in range(x.shape[1]):
            e = torch.zeros_like(x)
            e[:, i] = 1e-6
            g[:, i] = (d(x + e) - d(x - e)) / 2e-6
        return g

    gp = 0.5 * (grad_fd(neg).square().sum(-1).mean() + grad_fd(torch.zeros(1, 5, dtype=torch.float64)).square().sum())
    reg = d.out.weight.square().sum()
    torch.testing.assert_close(loss.bce, bce.detach())
    torch.testing.assert_close(loss.grad_penalty, gp.detach(), rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(loss.total.detach(), (bce + 0.01 * reg + 2.0 * gp).detach(), rtol=1e-6, atol=1e-9)


def test_reward_is_softplus_and_keeps_gradient_when_saturated():
    torch.manual_seed(0)
    add = ADD(4, CFG).double()
    delta = (torch.randn(3, 4, dtype=torch.float64) * 100).requires_grad_(True)
    r = add.reward(delta)
    logit = add.disc(add.norm.normalize(delta))
    torch.testing.assert_close(r, 2.0 * -torch.log1p(-torch.sigmoid(logit)))
    r.sum().backward()
    assert torch.isfinite(delta.grad).all() and delta.grad.abs().sum() > 0
    assert all(p.grad is None for p in add.disc.parameters())  # frozen during rollouts


def test_discriminator_learns_zero_is_real():
    torch.manual_seed(0)
    add = ADD(6, ADDCfg(hidden=(32, 32), batch_size=64, replay_size=256, lr=0.05, updates_per_iter=20))
    before = float(add.reward(torch.zeros(1, 6)) - add.reward(torch.ones(1, 6) * 2))
    for _ in range(10):
        stats = add.update(torch.randn(4, 16, 6) + 2.0)
    after = float(add.reward(torch.zeros(1, 6)) - add.reward(torch.ones(1, 6) * 2))
    assert after > before + 0.2 and stats["disc_acc_pos"] == 1.0
    assert int(add.replay.count) == 256


def test_action_rate_penalty():
    a, b = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 0.0]])
    torch.testing.assert_close(action_rate_penalty(a, b, -0.8), torch.tensor([-0.4]))
