"""The gradients of a fixed parameter list as views of one flat buffer (``FlatGrads``).

The critic regression takes 64 optimiser steps per SHAC iteration. Per step, zeroing the gradients, summing
them over the ranks, zeroing their non-finite entries and clipping them to a total norm cost about ten passes
over every parameter tensor when done tensor by tensor (and, over ranks, a flatten and an unflatten). With
every ``.grad`` a view of one buffer, autograd accumulates straight into that buffer and each of these is one
pass over one tensor; across the ranks of one machine the buffer is this rank's shared-memory slot
(``World.sum_buffer``), so the sum needs no copy in or out. Same values as the per-tensor path
(``shac.clip_and_sanitize`` + ``World.all_reduce_grads``) up to the order of the norm's summation.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from bcg_deploy.training.parallel.distributed import World


class FlatGrads:
    """``.grad`` of ``params`` bound to views of one buffer; a trailing entry carries a scalar (the loss) through
    the same sum over ranks."""

    def __init__(self, params: Sequence[torch.Tensor], world: World, name: str) -> None:
        self.params = list(params)
        self.world, self.name = world, name
        like = self.params[0]
        self.numel = sum(p.numel() for p in self.params)
        self.buffer = world.sum_buffer(name, self.numel + 1, like.dtype, like.device)
        self.flat = self.buffer[: self.numel]
        self._views: list[torch.Tensor] = []
        i = 0
        for p in self.params:
            self._views.append(self.flat[i : i + p.numel()].view_as(p))
            i += p.numel()
        self.bind()

    def bind(self) -> None:
        """(Re)attach every parameter's ``.grad`` to its view (e.g. after someone set it to None)."""
        for p, v in zip(self.params, self._views, strict=True):
            if p.grad is None or p.grad.data_ptr() != v.data_ptr():
                p.grad = v

    def zero_(self) -> None:
        """Zero every gradient (one fill of the buffer); autograd then accumulates into the views."""
        self.bind()
        self.buffer.zero_()

    def sum_over_ranks_(self, extra: torch.Tensor) -> torch.Tensor:
        """Sum the gradients and the 0-dim ``extra`` over the ranks in place; returns the summed ``extra``."""
        self.buffer[self.numel :].copy_(extra.detach().reshape(1))
        self.world.sum_buffer_(self.buffer, self.name)
        return self.buffer[self.numel].to(extra.dtype, copy=True)

    def sanitize_and_clip_(self, max_norm: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Zero the non-finite entries, then scale to the total 2-norm ``max_norm`` (torch's
        ``clip_grad_norm_`` rule: coefficient ``min(1, max_norm / (norm + 1e-6))``), on the device, no host
        read. Returns (the norm after zeroing, before clipping; whether any entry was non-finite), 0-dim."""
        flat = self.flat
        lo, hi = torch.aminmax(flat)  # NaN propagates, +-inf shows in one of them (an inf-norm is ~20x slower)
        bad = ~(torch.isfinite(lo) & torch.isfinite(hi))
        torch.nan_to_num_(flat, nan=0.0, posinf=0.0, neginf=0.0)
        norm = torch.linalg.vector_norm(flat)
        flat.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
        return norm, bad
