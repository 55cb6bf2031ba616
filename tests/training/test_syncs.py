"""The host-sync counter: what it counts (and what not) on CPU."""

from __future__ import annotations

import pytest
import torch

from bcg_deploy.training.syncs import SyncCounter


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
