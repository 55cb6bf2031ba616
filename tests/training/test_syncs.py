"""The host-sync counter: what it counts (and what not) on CPU; ``read_once``; and the traced syncs of one
training iteration on the CUDA code path against the budget of 50."""

from __future__ import annotations

import pytest
import torch

from bcg_deploy.training.config import TrainConfig, apply_overrides
from bcg_deploy.training.parallel.syncs import SyncCounter, read_once
from bcg_deploy.training.runner import Trainer


def test_counts_each_host_read_kind():
    x = torch.arange(6.0)
    m = x > 2
    with SyncCounter("trace") as sc:
        bool(m.any())
        int(x.sum())
        float(x.sum())
        x.sum().item()
        x.tolist()
        x.cpu()
        torch.equal(x, x)
        m.nonzero()
        _ = x[m]
        x[m] = 0.0
        torch.where(m)
        torch.tensor([1.0, 2.0], device="cpu")
        x.repeat_interleave(torch.tensor([1, 2, 1, 1, 1, 1]))
    assert sc.by_kind == {
        "bool": 1, "int": 1, "float": 1, "item": 1, "tolist": 1, "cpu": 1, "equal": 1,
        "nonzero": 2, "mask_index": 2, "from_host": 1, "repeat_interleave": 1,
    }  # fmt: skip
    assert sc.count == 13
    site, n = sc.sites.most_common(1)[0]
    assert site.startswith("tests/training/test_syncs.py:") or "test_syncs.py:" in site


def test_device_side_ops_are_not_counted():
    x = torch.randn(8, 3)
    idx = torch.tensor([0, 2, 5])
    m = x[:, 0] > 0
    with SyncCounter("trace") as sc:
        y = torch.where(m[:, None], x, torch.zeros_like(x))
        y = y.index_select(0, idx) + x[idx]
        x.to(torch.float64)
        x.to("cpu")  # already on the host: no copy
        torch.zeros(3, device="cpu")
        torch.as_tensor(x, device="cpu")
        opt = torch.optim.Adam([torch.nn.Parameter(torch.ones(2))])
        opt.param_groups[0]["params"][0].grad = torch.ones(2)
        opt.step()  # the step counter lives on the host by design
    assert sc.count == 0, sc.summary()


def test_summary_and_mode_validation():
    with SyncCounter("trace") as sc:
        for _ in range(3):
            bool(torch.ones(1))
    s = sc.summary(top=1)
    assert s["mode"] == "trace" and s["count"] == 3 and s["by_kind"] == {"bool": 3} and len(s["top_sites"]) == 1
    with pytest.raises(ValueError, match="mode"):
        SyncCounter("gpu")
    assert SyncCounter("auto").mode == ("cuda" if torch.cuda.is_available() else "trace")


def test_read_once_reads_every_tensor_in_one_sync_and_keeps_types():
    tree = {"a": torch.tensor(0.1), "b": [torch.arange(6).reshape(2, 3), torch.tensor([True, False])], "c": 3}
    tree["d"] = (torch.zeros(2, 0), torch.tensor(7, dtype=torch.int64))
    with SyncCounter("trace") as sc:
        host = read_once(tree)
    assert sc.count == 1
    want = {"a": torch.tensor(0.1).item(), "b": [[[0, 1, 2], [3, 4, 5]], [True, False]], "c": 3, "d": ([[], []], 7)}
    assert host == want
    assert type(host["d"][1]) is int and type(host["b"][1][0]) is bool


SYNC_BUDGET = 50


@pytest.mark.parametrize("bcg", [False, True], ids=["plain", "bcg"])
def test_an_iteration_at_horizon_32_costs_at_most_50_traced_syncs(tmp_path, tiny_motion, bcg):
    """The CUDA code path (``env.fixed_shapes``) of one SHAC iteration at the paper's horizon and critic
    schedule (16 x 4 steps), traced on the CPU: at most 50 host syncs. The count depends on neither the number
    of envs nor the network sizes (2 envs and small networks here, for speed)."""
    cfg = apply_overrides(TrainConfig(), [
        "env.num_envs=2", "shac.horizon=32", "shac.actor_hidden=16,16", "shac.critic_hidden=16", "add.hidden=16,16",
        "runner.tensorboard=false", f"runner.out_dir={tmp_path}", f"bcg.enabled={str(bcg).lower()}",
    ])  # fmt: skip
    assert (cfg.shac.critic_iterations, cfg.shac.critic_minibatches) == (16, 4)
    tr = Trainer(cfg, motion=tiny_motion)
    tr.env.fixed_shapes = True
    tr.step()  # warm-up: first buffers, optimiser state
    with SyncCounter("trace") as sc:
        tr.step()
    assert sc.count <= SYNC_BUDGET, sc.summary(top=20)
