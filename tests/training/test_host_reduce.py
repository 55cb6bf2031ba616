"""The shared-memory sum over the ranks of one machine against gloo's all-reduce (real processes)."""

from __future__ import annotations

import os
import platform
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bcg_deploy.training.parallel.distributed import free_port
from bcg_deploy.training.parallel.host_reduce import TSO_MACHINES, HostReducer, SpinBarrier

pytestmark = pytest.mark.skipif(not HostReducer.available(), reason="no writable /dev/shm on this machine")
TSO_ONLY = pytest.mark.skipif(platform.machine() not in TSO_MACHINES, reason="the spin barrier is for x86-64")


def test_spin_barrier_meets_and_a_missing_rank_fails_after_the_timeout():
    """Two ranks (threads on one flags tensor) pass 200 barriers in step; alone, a rank raises after timeout_s."""
    flags = torch.zeros(2, dtype=torch.int64)
    seen: list[int] = []

    def rank1() -> None:
        b = SpinBarrier(flags, 1, timeout_s=10.0)
        for _ in range(200):
            b.wait()
            seen.append(int(flags.min()))

    t = threading.Thread(target=rank1)
    t.start()
    b0 = SpinBarrier(flags, 0, timeout_s=10.0)
    for i in range(200):
        b0.wait()
        assert int(flags.min()) >= i + 1  # nobody passes before everybody arrived
    t.join()
    assert len(seen) == 200
    alone = SpinBarrier(torch.zeros(2, dtype=torch.int64), 0, timeout_s=0.3)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="did not arrive within 0.3 s"):
        alone.wait()
    assert 0.3 <= time.monotonic() - t0 < 5.0


def _worker(rank: int, size: int, port: int, out: str, spin: bool) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=size)
    try:
        red = HostReducer.join(rank, size, spin=spin)
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


@pytest.mark.parametrize(
    "size, spin", [(2, False), (3, False), pytest.param(2, True, marks=TSO_ONLY), pytest.param(3, True, marks=TSO_ONLY)]
)
def test_host_sum_equals_the_sum_on_every_rank_and_leaves_no_files(tmp_path, size, spin):
    """With gloo's barrier and, on x86-64, the shared-memory spin barrier between the phases."""
    out = str(tmp_path / "r")
    mp.start_processes(_worker, args=(size, free_port(), out, spin), nprocs=size, start_method="spawn")
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
