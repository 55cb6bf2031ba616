"""Actor / critic structure and the running normaliser against numpy statistics."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from bcg_deploy.training.networks import Actor, Critic
from bcg_deploy.training.normalizer import RunningNormalizer


def test_actor_structure_and_sampling():
    torch.manual_seed(0)
    actor = Actor(10, 4, hidden=(16, 8))
    kinds = [type(m) for m in actor.body]
    assert kinds == [nn.Linear, nn.ELU, nn.LayerNorm] * 2
    assert Actor(849, 29).hidden == (512, 256, 128)
    torch.testing.assert_close(actor.std, torch.ones(4))
    obs = torch.randn(256, 10)
    det = actor(obs, deterministic=True)
    torch.testing.assert_close(det, torch.tanh(actor.mean(obs)))
    a, pre = actor.sample(obs, torch.Generator().manual_seed(1))
    assert a.abs().max() < 1 and torch.equal(a, torch.tanh(pre))
    # reparameterised: the sample's spread follows std and gradients reach log_std
    spread = (pre - actor.mean(obs)).detach().std()
    assert 0.8 < float(spread) < 1.2
    a.sum().backward()
    assert actor.log_std.grad is not None and actor.log_std.grad.abs().sum() > 0
    again = Actor.from_state_dict(actor.state_dict())
    torch.testing.assert_close(again.deterministic(obs), det)


def test_critic():
    critic = Critic(10, hidden=(8, 8))
    assert [type(m) for m in critic.body] == [nn.Linear, nn.ELU, nn.LayerNorm] * 2
    assert Critic(849).hidden == (256, 256)
    obs = torch.randn(7, 10)
    assert critic(obs).shape == (7,)
    torch.testing.assert_close(Critic.from_state_dict(critic.state_dict())(obs), critic(obs))


def test_normalizer_statistics_and_fold():
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, (1000, 5)) * np.array([1, 10, 0.1, 1, 1])
    norm = RunningNormalizer(5, eps=1e-5, clip=5.0)
    for chunk in np.array_split(x, 7):
        norm.update(torch.as_tensor(chunk, dtype=torch.float32))
    bad = torch.full((3, 5), float("nan"))
    norm.update(bad)  # skipped
    np.testing.assert_allclose(norm.mean.numpy(), x.astype(np.float32).astype(np.float64).mean(0), rtol=1e-9)
    np.testing.assert_allclose(norm.var.numpy(), x.astype(np.float32).astype(np.float64).var(0), rtol=1e-9)
    assert float(norm.count) == 1000
    norm.float()
    assert norm.mean.dtype == torch.float64  # accumulators stay float64
    xt = torch.as_tensor(x, dtype=torch.float32) * 3.0  # some entries clip
    f = norm.folded()
    folded = torch.clamp((xt - f["mean"].float()) / f["std"].float(), -float(f["clip"]), float(f["clip"]))
    torch.testing.assert_close(norm(xt), folded)
    assert float(norm(xt).abs().max()) == 5.0
    again = RunningNormalizer.from_state_dict(norm.state_dict())
    torch.testing.assert_close(again(xt), norm(xt))
    torch.testing.assert_close(norm.denormalize(norm(xt[:10] / 3)), xt[:10] / 3, rtol=1e-5, atol=1e-4)
