"""The throughput bench's floor counts the critic regression's matmul operations as torch's counter does."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from bcg_deploy.training.networks import CriticEnsemble
from tests.conftest import load_script


@pytest.mark.parametrize(("obs_dim", "hidden", "num", "rows"), [(849, (256, 256), 3, 256), (37, (16, 8, 4), 2, 5)])
def test_critic_flops_match_torch_flop_counter(obs_dim: int, hidden: tuple[int, ...], num: int, rows: int) -> None:
    torch.manual_seed(0)
    critic = CriticEnsemble(obs_dim, hidden, num)
    x, y = torch.randn(rows, obs_dim), torch.randn(rows)
    with FlopCounterMode(display=False) as counter:
        loss = (critic.each(x) - y).square().sum()
        loss.backward()
    bench = load_script("bench/train_throughput.py")
    assert bench._critic_flops(obs_dim, hidden, num, rows) == counter.get_total_flops()
