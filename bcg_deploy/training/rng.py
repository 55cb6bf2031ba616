"""Per-env random streams for data-parallel training.

The envs of a run are split into contiguous shards, each drawing from its own ``torch.Generator``
seeded from ``(seed, shard)``. A rank of a data-parallel run owns one shard (its envs); a single
process owns one shard by default, or several (``runner.env_shards``) to reproduce a data-parallel
run's envs exactly. Every env-side draw (reset phase and noise, domain randomisation, pushes,
observation noise, the actor's sampling noise) goes through ``EnvRandom`` so that an env's
randomness depends only on its shard, not on how many processes simulate the run.

``EnvRandom(seed, sizes, first_shard, device)``; ``rows(idx)`` -> a ``Draw`` for the envs ``idx``
(sorted local indices, or None for all); ``Draw.rand / randn / randint`` return [n, *shape] with the
rows in env order; ``state_dict()`` / ``load_state_dict()``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

_SHARD_STRIDE = 0x9E3779B1  # odd 32-bit constant: distinct shard seeds for nearby run seeds


def shard_seed(seed: int, shard: int) -> int:
    """Seed of one shard's stream (shard 0 of seed s is s itself)."""
    return (int(seed) + int(shard) * _SHARD_STRIDE) % (2**63)


def common_seed(seed: int) -> int:
    """Seed of the stream every rank shares (critic minibatch permutations)."""
    return (int(seed) * 31 + 0xC0FFEE) % (2**63)


def even_split(total: int, parts: int) -> list[int]:
    """``total`` envs over ``parts`` shards, the first ``total % parts`` one larger."""
    base, extra = divmod(int(total), int(parts))
    return [base + (1 if i < extra else 0) for i in range(parts)]


class Draw:
    """Draws for a fixed set of env rows, one block per shard, concatenated in env order."""

    def __init__(self, gens: Sequence[torch.Generator | None], counts: Sequence[int], device: torch.device) -> None:
        self._parts = [(g, int(c)) for g, c in zip(gens, counts, strict=True) if int(c) > 0]
        self.n = sum(c for _, c in self._parts)
        self.device = device

    def _cat(self, blocks: list[torch.Tensor], shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        if len(blocks) == 1:
            return blocks[0]
        if not blocks:
            return torch.empty((0, *shape), dtype=dtype, device=self.device)
        return torch.cat(blocks)

    def rand(self, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """U[0, 1) of shape [n, *shape]."""
        b = [torch.rand((c, *shape), generator=g, dtype=dtype, device=self.device) for g, c in self._parts]
        return self._cat(b, shape, dtype)

    def uniform(self, lo: Any, hi: Any, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """U[lo, hi) of shape [n, *shape] (``lo``/``hi`` scalars or broadcastable tensors)."""
        return lo + (hi - lo) * self.rand(*shape, dtype=dtype)

    def randn(self, *shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """N(0, 1) of shape [n, *shape]."""
        b = [torch.randn((c, *shape), generator=g, dtype=dtype, device=self.device) for g, c in self._parts]
        return self._cat(b, shape, dtype)

    def randint(self, low: int, high: int, *shape: int) -> torch.Tensor:
        """Integers in [low, high) of shape [n, *shape] (long)."""
        b = [torch.randint(low, high, (c, *shape), generator=g, device=self.device) for g, c in self._parts]
        return self._cat(b, shape, torch.long)


class EnvRandom:
    """The random streams of this process's envs; see the module docstring."""

    def __init__(
        self, seed: int, sizes: Sequence[int], first_shard: int = 0, device: str | torch.device = "cpu"
    ) -> None:
        self.device = torch.device(device)
        self.sizes = [int(s) for s in sizes]
        self.first_shard = int(first_shard)
        self.num_envs = sum(self.sizes)
        self.generators = []
        for i in range(len(self.sizes)):
            g = torch.Generator(device=self.device)
            g.manual_seed(shard_seed(seed, self.first_shard + i))
            self.generators.append(g)
        self._bounds = torch.tensor([0, *torch.tensor(self.sizes).cumsum(0).tolist()], device=self.device)
        self._all = Draw(self.generators, self.sizes, self.device)

    def rows(self, idx: torch.Tensor | None = None) -> Draw:
        """A ``Draw`` for the sorted local env indices ``idx`` (None: every env)."""
        if idx is None:
            return self._all
        if len(self.sizes) == 1:
            return Draw(self.generators, [int(idx.numel())], self.device)
        shard = torch.bucketize(idx, self._bounds[1:], right=True)
        counts = torch.bincount(shard, minlength=len(self.sizes)).tolist()
        return Draw(self.generators, counts, self.device)

    def state_dict(self) -> dict[str, Any]:
        return {
            "first_shard": self.first_shard,
            "sizes": list(self.sizes),
            "generators": [g.get_state() for g in self.generators],
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        if list(d["sizes"]) != self.sizes or int(d["first_shard"]) != self.first_shard:
            raise ValueError(f"env random streams for shards {d['sizes']} do not match this run's {self.sizes}")
        for g, s in zip(self.generators, d["generators"], strict=True):
            g.set_state(s)
