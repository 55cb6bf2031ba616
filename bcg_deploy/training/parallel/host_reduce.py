"""Sums over the ranks of one machine through shared memory: the data-parallel gradient all-reduce on CPU.

gloo moves a CPU tensor through TCP sockets even between processes of one machine; at the paper's size
the critic's 64 gradient all-reduces of 854k floats per iteration cost 0.3-0.45 s on 2 ranks. Here every
rank copies its tensor into its slot of a buffer mapped by all of them (a file in /dev/shm, unlinked as
soon as every rank has mapped it, so nothing outlives the run), a barrier separates the phases, each rank
sums its 1/N chunk over the slots in rank order, and after a second barrier every rank copies the whole sum
back. Every rank gets the same result bit for bit.

The barrier: on x86-64 a counter per rank in the same shared memory (``SpinBarrier``; 2 of them per critic
step, 128 per SHAC iteration, where a gloo barrier costs 0.4-0.8 ms); elsewhere gloo's barrier, whose
socket calls also order the memory accesses on a CPU with a weaker memory model. Either way a dead or hung
peer fails the barrier after the collective timeout, as any collective does.
"""

from __future__ import annotations

import os
import platform
import time
import uuid
from pathlib import Path

import torch
import torch.distributed as dist

SHM_DIR = Path("/dev/shm")
TSO_MACHINES = ("x86_64", "AMD64")
"""CPUs with total store order: a rank that sees a peer's counter written after its data sees that data."""
SPINS_BEFORE_YIELD = 200


class SpinBarrier:
    """All ranks of one machine meet at counters in shared memory (``flags`` [size] int64, zero at first).

    Each ``wait`` a rank writes its next sequence number into its own entry, then waits until every entry
    has reached it: spinning first, then yielding the core to the scheduler (so an oversubscribed machine's
    slower rank is not starved). Correct where stores are seen in program order (``TSO_MACHINES``): the data a
    rank wrote before its counter is visible to a peer that saw the counter. A peer that does not arrive
    within ``timeout_s`` raises RuntimeError (a dead or hung rank), like a gloo collective's timeout."""

    def __init__(self, flags: torch.Tensor, rank: int, timeout_s: float) -> None:
        self.flags, self.rank, self.timeout_s = flags, int(rank), float(timeout_s)
        self.seq = 0

    def wait(self) -> None:
        self.seq += 1
        seq = self.seq
        self.flags[self.rank] = seq
        spins, deadline = 0, None
        while int(self.flags.min()) < seq:
            spins += 1
            if spins < SPINS_BEFORE_YIELD:
                continue
            os.sched_yield()
            now = time.monotonic()
            if deadline is None:
                deadline = now + self.timeout_s
            elif now > deadline:
                raise RuntimeError(f"shared-memory barrier: a rank did not arrive within {self.timeout_s:g} s")


class HostReducer:
    """Sum of a 1-D CPU tensor over the ``size`` ranks of one machine (all ranks call with equal shapes)."""

    def __init__(self, rank: int, size: int, tag: str, directory: Path = SHM_DIR) -> None:
        self.rank, self.size, self.tag, self.directory = int(rank), int(size), tag, Path(directory)
        self._buffers: dict[tuple[str, int, torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}
        self._spin: SpinBarrier | None = None

    @staticmethod
    def available(directory: Path = SHM_DIR) -> bool:
        """True where the shared-memory directory exists and is writable (Linux)."""
        return Path(directory).is_dir() and os.access(directory, os.W_OK)

    @classmethod
    def join(
        cls, rank: int, size: int, directory: Path = SHM_DIR, spin: bool | None = None, timeout_s: float = 25.0
    ) -> HostReducer:
        """Collective: a reducer with a tag rank 0 draws for this run. ``spin``: the phases are separated by a
        ``SpinBarrier`` (default: on ``TSO_MACHINES``) that fails after ``timeout_s``, else by gloo's barrier."""
        tag = [uuid.uuid4().hex[:16] if rank == 0 else None]
        dist.broadcast_object_list(tag, src=0)
        red = cls(rank, size, str(tag[0]), directory)
        if spin if spin is not None else platform.machine() in TSO_MACHINES:
            slots, _ = red._slots(1, torch.int64, "barrier")
            red._spin = SpinBarrier(slots[:, 0], rank, timeout_s)
        return red

    def barrier(self) -> None:
        """Wait for every rank (the spin barrier where there is one, else gloo's)."""
        if self._spin is not None:
            self._spin.wait()
        else:
            dist.barrier()

    def _slots(self, n: int, dtype: torch.dtype, name: str = "") -> tuple[torch.Tensor, torch.Tensor]:
        """(slots [size, n], sum [n]) for this name, length and dtype, mapped on first use (collective)."""
        key = (name, n, dtype)
        if key not in self._buffers:
            path = self.directory / f"bcgd-{self.tag}-{name}{n}-{str(dtype).removeprefix('torch.')}"
            count = (self.size + 1) * n
            if self.rank == 0:
                with open(path, "wb") as f:
                    f.truncate(count * torch.empty((), dtype=dtype).element_size())
            dist.barrier()
            flat = torch.from_file(str(path), shared=True, size=count, dtype=dtype)
            dist.barrier()
            if self.rank == 0:
                path.unlink(missing_ok=True)
            self._buffers[key] = (flat[: self.size * n].view(self.size, n), flat[self.size * n :])
        return self._buffers[key]

    def slot(self, n: int, dtype: torch.dtype, name: str) -> torch.Tensor:
        """This rank's slot [n] of the buffer ``name`` (collective on first use): a tensor written in place
        there (e.g. gradients accumulated into it by autograd) is summed by ``sum_`` without a copy in."""
        return self._slots(n, dtype, name)[0][self.rank]

    def sum_(self, t: torch.Tensor, name: str = "") -> torch.Tensor:
        """In place: ``t`` (contiguous, 1-D, on the CPU) summed over the ranks; returns ``t``. ``t`` may be
        this rank's ``slot(t.numel(), t.dtype, name)`` itself (then nothing is copied in)."""
        n = t.numel()
        slots, total = self._slots(n, t.dtype, name)
        if t.data_ptr() != slots[self.rank].data_ptr():
            slots[self.rank].copy_(t)
        self.barrier()
        lo, hi = self.rank * n // self.size, (self.rank + 1) * n // self.size
        part = total[lo:hi]
        part.copy_(slots[0, lo:hi])
        for k in range(1, self.size):
            part.add_(slots[k, lo:hi])
        self.barrier()
        t.copy_(total)
        return t
