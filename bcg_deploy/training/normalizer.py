"""Running mean / std normaliser (SHAC / rsl_rl style) with float64 accumulators.

API summary:

- ``RunningNormalizer(size, eps=1e-5, clip=5.0)``: ``nn.Module``; buffers (all float64, all in the
  ``state_dict``): ``mean`` [size], ``var`` [size] (population variance), ``count`` [], ``eps`` [],
  ``clip`` [].
- ``update(x)``: merge a batch ``x`` [..., size] into the statistics (Chan's parallel algorithm,
  computed in float64, no gradient). Non-finite rows are skipped. ``update_moments(n, mean, m2)`` merges
  a batch given by its count, mean and sum of squared deviations (exact merges across processes).
- ``forward(x) -> clamp((x - mean) / sqrt(var + eps), -clip, clip)`` in ``x.dtype`` (gradient flows
  to ``x``). ``denormalize(y)`` is the inverse without the clamp.
- ``folded() -> {"mean", "std", "clip"}`` (float64 tensors, ``std = sqrt(var + eps)``): the affine map
  the exporter bakes into the graph: ``clamp((x - mean) / std, -clip, clip)`` == ``forward(x)``.
- ``RunningNormalizer.from_state_dict(sd)`` rebuilds one with the right size.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn


class RunningNormalizer(nn.Module):
    """Per-feature running mean / variance; see the module docstring."""

    def __init__(self, size: int, eps: float = 1e-5, clip: float = 5.0) -> None:
        super().__init__()
        f64 = torch.float64
        self.size = int(size)
        self.register_buffer("mean", torch.zeros(self.size, dtype=f64))
        self.register_buffer("var", torch.ones(self.size, dtype=f64))
        self.register_buffer("count", torch.zeros((), dtype=f64))
        self.register_buffer("eps", torch.tensor(float(eps), dtype=f64))
        self.register_buffer("clip", torch.tensor(float(clip), dtype=f64))

    def _apply(self, fn, recurse=True):  # keep the accumulators float64 under .to(dtype) / .float()
        out = super()._apply(fn, recurse)
        for name in ("mean", "var", "count", "eps", "clip"):
            setattr(self, name, getattr(self, name).to(torch.float64))
        return out

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge the rows of ``x`` [..., size] (non-finite rows skipped)."""
        x = x.detach().reshape(-1, self.size).to(torch.float64)
        x = x[torch.isfinite(x).all(dim=1)]
        n = x.shape[0]
        if n == 0:
            return
        b_mean = x.mean(0)
        self.update_moments(torch.tensor(float(n), dtype=torch.float64), b_mean, (x - b_mean).square().sum(0))

    @torch.no_grad()
    def update_moments(self, n: torch.Tensor, b_mean: torch.Tensor, b_m2: torch.Tensor) -> None:
        """Merge a batch given by its moments: count ``n``, mean [size], M2 = sum of squared deviations
        [size] (float64; e.g. merged over data-parallel ranks). A batch of count 0 changes nothing."""
        n = n.to(self.count)
        tot = self.count + n
        some = n > 0  # decided on the device: no host read (a CUDA sync) per merge
        safe = torch.where(some, tot, torch.ones_like(tot))
        delta = b_mean.to(self.mean) - self.mean
        new_mean = self.mean + delta * (n / safe)
        m2 = self.var * self.count + b_m2.to(self.mean) + delta.square() * (self.count * n / safe)
        self.mean.copy_(torch.where(some, new_mean, self.mean))
        self.var.copy_(torch.where(some, m2 / safe, self.var))
        self.count.copy_(tot)

    def std(self) -> torch.Tensor:
        return torch.sqrt(self.var + self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = self.mean.to(x.dtype)
        std = self.std().to(x.dtype)
        c = self.clip.to(x.dtype)  # a tensor bound: no host read of the clip per call
        return torch.clamp((x - mean) / std, -c, c)

    def denormalize(self, y: torch.Tensor) -> torch.Tensor:
        return y * self.std().to(y.dtype) + self.mean.to(y.dtype)

    def folded(self) -> dict[str, torch.Tensor]:
        """``{"mean", "std", "clip"}``: forward(x) == clamp((x - mean) / std, -clip, clip)."""
        return {"mean": self.mean.clone(), "std": self.std(), "clip": self.clip.clone()}

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, torch.Tensor]) -> RunningNormalizer:
        norm = cls(int(sd["mean"].shape[0]))
        norm.load_state_dict(dict(sd))
        return norm
