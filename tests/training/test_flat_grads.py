"""FlatGrads: gradients as views of one buffer, against torch's per-tensor oracles."""

from __future__ import annotations

import torch

from bcg_deploy.training.parallel.distributed import World
from bcg_deploy.training.parallel.flat_grads import FlatGrads

SHAPES = [(4, 3), (3,), (2, 2), (5,)]


def _params() -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.zeros(s, dtype=torch.float64)) for s in SHAPES]


def test_sanitize_and_clip_matches_torch_clip_grad_norm_with_non_finite_entries_zeroed():
    """Oracle: the same gradients with the non-finite entries set to 0, then torch.nn.utils.clip_grad_norm_."""
    gen = torch.Generator().manual_seed(0)
    for scale, max_norm, poison in ((100.0, 1.0, None), (0.01, 1.0, None), (50.0, 10.0, "nan"), (3.0, 1.0, "inf"),
                                    (3.0, 1.0, "-inf")):  # fmt: skip
        grads = [scale * torch.randn(s, generator=gen, dtype=torch.float64) for s in SHAPES]
        ours, ref = _params(), _params()
        fg = FlatGrads(ours, World(env_sizes=[1]), "t")
        fg.zero_()
        for p, q, g in zip(ours, ref, grads, strict=True):
            p.grad.copy_(g)
            q.grad = g.clone()
        if poison is not None:
            ours[2].grad[1, 0] = float(poison)
            ref[2].grad[1, 0] = 0.0
        norm, bad = fg.sanitize_and_clip_(max_norm)
        ref_norm = torch.nn.utils.clip_grad_norm_(ref, max_norm)
        assert bool(bad) == (poison is not None)
        torch.testing.assert_close(norm, ref_norm, rtol=1e-12, atol=0.0)
        for p, q in zip(ours, ref, strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-12, atol=0.0)


def test_autograd_accumulates_into_the_buffer_and_zero_starts_afresh():
    """After zero_ + backward, every .grad is a view of the one buffer and equals torch.autograd.grad; a second
    zero_ + backward gives the same (nothing carried over); a .grad set to None is bound again by zero_."""
    gen = torch.Generator().manual_seed(1)
    params = _params()
    with torch.no_grad():
        for p in params:
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
    fg = FlatGrads(params, World(env_sizes=[1]), "t")

    def loss() -> torch.Tensor:
        return sum((p.sin() * (i + 1)).square().sum() for i, p in enumerate(params))

    ref = torch.autograd.grad(loss(), params)
    for _ in range(2):
        fg.zero_()
        loss().backward()
        for p, g in zip(params, ref, strict=True):
            assert p.grad.untyped_storage().data_ptr() == fg.buffer.untyped_storage().data_ptr()
            torch.testing.assert_close(p.grad, g, rtol=1e-15, atol=0.0)
        params[1].grad = None
    summed = fg.sum_over_ranks_(torch.tensor(2.5, dtype=torch.float64))  # one process: the loss as given
    assert float(summed) == 2.5 and summed.data_ptr() != fg.buffer.data_ptr()
