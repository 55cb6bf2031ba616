"""Pure SHAC maths: TD(lambda) against the weighted-n-step definition, lr schedule, Polyak target."""

from __future__ import annotations

import torch

from bcg_deploy.training.algorithms.shac import SHAC, Rollout, td_lambda_targets
from bcg_deploy.training.config import SHACCfg


def _lambda_return_reference(r, v, done, gamma, lam):
    """(1-lam) sum_n lam^(n-1) G^(n) truncated at the window/episode end, per env, by brute force."""
    n_steps, n_env = r.shape
    out = torch.zeros_like(r)
    for e in range(n_env):
        for t in range(n_steps):
            end = t
            while end < n_steps - 1 and not done[end, e]:
                end += 1
            # n-step returns G^(k) for k = 1 .. end - t + 1 (the last one is the full return to the end)
            gs = []
            for k in range(1, end - t + 2):
                g = sum(gamma**i * r[t + i, e] for i in range(k)) + gamma**k * v[t + k - 1, e]
                gs.append(g)
            total = sum((1 - lam) * lam ** (k - 1) * gs[k - 1] for k in range(1, len(gs)))
            total += lam ** (len(gs) - 1) * gs[-1]
            out[t, e] = total
    return out


def test_td_lambda_matches_definition():
    torch.manual_seed(0)
    n, e = 7, 3
    r, v = torch.randn(n, e, dtype=torch.float64), torch.randn(n, e, dtype=torch.float64)
    done = torch.zeros(n, e, dtype=torch.bool)
    done[2, 0] = done[5, 1] = done[0, 2] = True
    got = td_lambda_targets(r, v, done, 0.9, 0.8)
    torch.testing.assert_close(got, _lambda_return_reference(r, v, done, 0.9, 0.8))


def test_td_lambda_extremes():
    r = torch.tensor([[1.0], [2.0], [3.0]])
    v = torch.tensor([[10.0], [20.0], [30.0]])
    done = torch.zeros(3, 1, dtype=torch.bool)
    torch.testing.assert_close(td_lambda_targets(r, v, done, 0.5, 0.0), r + 0.5 * v)  # TD(0)
    mc = torch.tensor([[1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 30], [2 + 0.5 * 3 + 0.25 * 30], [3 + 0.5 * 30]])
    torch.testing.assert_close(td_lambda_targets(r, v, done, 0.5, 1.0), mc)


def test_lr_decays_linearly_and_target_is_polyak():
    cfg = SHACCfg(actor_hidden=(8,), critic_hidden=(8,), num_critics=2)
    s = SHAC(cfg, 5, 2, num_envs=3)
    assert s.set_learning_rate(0, 100) == (5e-3, 2e-3)
    a, c = s.set_learning_rate(50, 100)
    assert abs(a - (5e-3 + 1e-5) / 2) < 1e-12 and abs(c - (2e-3 + 1e-5) / 2) < 1e-12
    torch.testing.assert_close(torch.tensor(s.set_learning_rate(100, 100)), torch.tensor([1e-5, 1e-5]))
    before = [p.clone() for p in s.target_critic.parameters()]
    for p in s.critic.parameters():
        p.data.add_(1.0)
    s._update_target()
    for b, p, tp in zip(before, s.critic.parameters(), s.target_critic.parameters(), strict=True):
        torch.testing.assert_close(tp, 0.995 * b + 0.005 * p)


def _critic_rollout(n: int = 8, e: int = 4, obs_dim: int = 5) -> Rollout:
    g = torch.Generator().manual_seed(3)
    obs = torch.randn(n, e, obs_dim, generator=g)
    z = torch.zeros(n, e)
    return Rollout(
        actor_loss=torch.zeros(()), obs=obs, obs_norm=obs, rewards=torch.rand(n, e, generator=g), raw_rewards=z,
        next_values=torch.rand(n, e, generator=g), done=torch.zeros(n, e, dtype=torch.bool), deltas=z[..., None],
        valid=torch.ones(n, e, dtype=torch.bool),
    )  # fmt: skip


def test_a_non_finite_critic_loss_skips_the_step_and_leaves_adam_untouched():
    """An overflowing (inf) minibatch loss with finite gradients: every step is skipped on the device, so the
    critics and Adam's step counts and moments stay as they were; a finite update takes all 16 x 4 steps."""
    cfg = SHACCfg(actor_hidden=(8,), critic_hidden=(8,), num_critics=2, critic_iterations=16, critic_minibatches=4)
    s = SHAC(cfg, 5, 2, num_envs=4)
    roll = _critic_rollout()
    with torch.no_grad():
        s.critic.out_bias.fill_(1e30)  # (pred - y)^2 overflows float32; its gradient 2 (pred - y) does not
    before = [p.detach().clone() for p in s.critic.parameters()]
    stats = s.read_iteration(s.update_critic(roll))  # the counts and losses stay on the device until read
    assert s.counters["critic_skipped"] == 64 and stats["critic_loss"] != stats["critic_loss"]  # NaN
    for b, p in zip(before, s.critic.parameters(), strict=True):
        assert torch.equal(b, p)
    for st in s.critic_optimizer.state.values():
        assert float(st["step"]) == 0 and not st["exp_avg"].any() and not st["exp_avg_sq"].any()
    with torch.no_grad():
        s.critic.out_bias.zero_()
    stats = s.read_iteration(s.update_critic(roll))  # the counts and losses stay on the device until read
    assert s.counters["critic_skipped"] == 64 and stats["critic_loss"] > 0
    assert all(float(st["step"]) == 64 for st in s.critic_optimizer.state.values())


def test_bf16_critic_regression_tracks_float32():
    """Five critic updates (16 passes x 4 minibatches each) on a learnable target under bf16 autocast and in
    float32 from the same initialisation: the losses agree to 5 % and the parameter updates point the same
    way to 5 %, and they are not the same numbers (bf16 was on)."""
    n, e, o = 16, 32, 40
    g = torch.Generator().manual_seed(0)
    obs = torch.randn(n, e, o, generator=g)
    rew = torch.tanh(obs @ torch.randn(o, generator=g) / 6)
    z = torch.zeros(n, e)
    roll = Rollout(
        actor_loss=torch.zeros(()), obs=obs, obs_norm=obs, rewards=rew, raw_rewards=z, next_values=z,
        done=z.bool(), deltas=z[..., None], valid=~z.bool(), stats={},
    )  # fmt: skip
    runs = {}
    for bf16 in (False, True):
        torch.manual_seed(0)
        cfg = SHACCfg(actor_hidden=(8,), critic_hidden=(64, 64), num_critics=3, critic_bf16=bf16)
        s = SHAC(cfg, o, 2, num_envs=e)
        p0 = torch.cat([p.detach().flatten().clone() for p in s.critic.parameters()])
        losses = torch.tensor([float(s.read_iteration(s.update_critic(roll))["critic_loss"]) for _ in range(5)])
        runs[bf16] = losses, torch.cat([p.detach().flatten() for p in s.critic.parameters()]) - p0
    (l32, d32), (l16, d16) = runs[False], runs[True]
    assert l32[-1] < 0.1 * l32[0]  # the target is learnable: the float32 fit gets 10x better
    torch.testing.assert_close(l16, l32, rtol=0.05, atol=0.0)
    assert not torch.equal(d16, d32)
    assert float((d16 - d32).norm() / d32.norm()) < 0.05
