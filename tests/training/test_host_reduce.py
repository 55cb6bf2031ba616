"""The shared-memory sum over the ranks of one machine against gloo's all-reduce (real processes)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bcg_deploy.training.distributed import free_port
from bcg_deploy.training.host_reduce import HostReducer

pytestmark = pytest.mark.skipif(not HostReducer.available(), reason="no writable /dev/shm on this machine")


def _worker(rank: int, size: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=size)
    try:
        red = HostReducer.join(rank, size)
        results = {}
        for n, dtype in ((1, torch.float32), (7, torch.float64), (100_003, torch.float32), (7, torch.float64)):
            g = torch.Generator().manual_seed(1000 * rank + n)
            x = torch.randn(n, generator=g, dtype=dtype)
            ref = x.clone()
            dist.all_reduce(ref)
            exact = sum(torch.randn(n, generator=torch.Generator().manual_seed(1000 * k + n), dtype=dtype).double()
                        for k in range(size))  # fmt: skip
            results[(n, str(dtype))] = (red.sum_(x).clone(), ref, exact)
            slot = red.slot(n, dtype, "grads")  # summed in place, as FlatGrads does: nothing copied in
            slot.copy_(torch.randn(n, generator=torch.Generator().manual_seed(1000 * rank + n), dtype=dtype))
            assert torch.equal(red.sum_(slot, "grads"), results[(n, str(dtype))][0])
        leftovers = sorted(p.name for p in Path("/dev/shm").glob(f"bcgd-{red.tag}-*"))
        torch.save({"results": results, "leftovers": leftovers, "tag": red.tag}, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("size", [2, 3])
def test_host_sum_equals_the_sum_on_every_rank_and_leaves_no_files(tmp_path, size):
    out = str(tmp_path / "r")
    mp.start_processes(_worker, args=(size, free_port(), out), nprocs=size, start_method="spawn")
    per_rank = [torch.load(f"{out}.{r}", weights_only=False) for r in range(size)]
    for key, (ours, gloo, exact) in per_rank[0]["results"].items():
        tol = 1e-6 if "float32" in key[1] else 1e-13
        torch.testing.assert_close(ours.double(), exact, rtol=tol, atol=tol)
        torch.testing.assert_close(ours, gloo, rtol=tol, atol=tol)
        if size == 2:  # a + b in either order: gloo's sum bit for bit
            assert torch.equal(ours, gloo), key
        for other in per_rank[1:]:  # the same result on every rank, bit for bit
            assert torch.equal(other["results"][key][0], ours), key
    assert all(not r["leftovers"] for r in per_rank)  # unlinked once mapped
