"""Actor and critic networks (METHOD.md section 3).

API summary:

- ``mlp(in_dim, hidden)``: ``nn.Sequential`` of blocks Linear -> ELU -> LayerNorm.
- ``Actor(obs_dim, act_dim, hidden=(512, 256, 128), init_std=1.0)``: Gaussian policy on the
  NORMALISED observation. ``mean(obs)`` pre-tanh mean [B, A]; ``std`` learned per action
  (``log_std`` parameter, init log(init_std)); ``sample(obs, generator=None) -> (action, pre_tanh)``
  reparameterised (action = tanh(mean + std * eps), differentiable in obs and parameters);
  ``forward(obs, deterministic=False, generator=None) -> action`` in (-1, 1);
  ``deterministic(obs) = tanh(mean(obs))`` (what the ONNX runs).
- ``Critic(obs_dim, hidden=(256, 256))``: ``forward(obs) -> value [B]``.
- ``Actor.from_state_dict(sd)`` / ``Critic.from_state_dict(sd)``: rebuild with the sizes read from
  the weight shapes (a checkpoint needs no separate architecture record).
Small sizes (e.g. hidden=(32, 32)) are fine for tests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import nn

ACTOR_HIDDEN = (512, 256, 128)
CRITIC_HIDDEN = (256, 256)


def mlp(in_dim: int, hidden: Sequence[int]) -> nn.Sequential:
    """Hidden blocks Linear -> ELU -> LayerNorm (no output layer)."""
    layers: list[nn.Module] = []
    d = in_dim
    for h in hidden:
        layers += [nn.Linear(d, h), nn.ELU(), nn.LayerNorm(h)]
        d = h
    return nn.Sequential(*layers)


def _hidden_from(sd: Mapping[str, torch.Tensor]) -> tuple[int, tuple[int, ...]]:
    """(in_dim, hidden sizes) from the ``body.{3i}.weight`` shapes of an ``mlp`` state dict."""
    hidden, i = [], 0
    in_dim = int(sd["body.0.weight"].shape[1])
    while f"body.{3 * i}.weight" in sd:
        hidden.append(int(sd[f"body.{3 * i}.weight"].shape[0]))
        i += 1
    return in_dim, tuple(hidden)


class Actor(nn.Module):
    """Tanh-squashed Gaussian policy; see the module docstring."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int] = ACTOR_HIDDEN, init_std: float = 1.0):
        super().__init__()
        self.obs_dim, self.act_dim, self.hidden = int(obs_dim), int(act_dim), tuple(int(h) for h in hidden)
        self.body = mlp(obs_dim, self.hidden)
        self.mu = nn.Linear(self.hidden[-1] if self.hidden else obs_dim, act_dim)
        self.log_std = nn.Parameter(torch.full((act_dim,), math.log(init_std)))

    def mean(self, obs: torch.Tensor) -> torch.Tensor:
        return self.mu(self.body(obs))

    @property
    def std(self) -> torch.Tensor:
        return self.log_std.exp()

    def sample(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        mu = self.mean(obs)
        eps = torch.randn(mu.shape, generator=generator, dtype=mu.dtype, device=mu.device)
        pre = mu + self.std.to(mu.dtype) * eps
        return torch.tanh(pre), pre

    def deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.mean(obs))

    def forward(
        self, obs: torch.Tensor, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        return self.deterministic(obs) if deterministic else self.sample(obs, generator)[0]

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, torch.Tensor]) -> Actor:
        in_dim, hidden = _hidden_from(sd)
        actor = cls(in_dim, int(sd["mu.weight"].shape[0]), hidden)
        actor.load_state_dict(dict(sd))
        return actor


class Critic(nn.Module):
    """State-value MLP; see the module docstring."""

    def __init__(self, obs_dim: int, hidden: Sequence[int] = CRITIC_HIDDEN):
        super().__init__()
        self.obs_dim, self.hidden = int(obs_dim), tuple(int(h) for h in hidden)
        self.body = mlp(obs_dim, self.hidden)
        self.out = nn.Linear(self.hidden[-1] if self.hidden else obs_dim, 1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(obs))[..., 0]

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, torch.Tensor]) -> Critic:
        in_dim, hidden = _hidden_from(sd)
        critic = cls(in_dim, hidden)
        critic.load_state_dict(dict(sd))
        return critic
