"""Data-parallel training over torch.distributed (gloo on CPU, NCCL on CUDA).

Each rank simulates its contiguous share of the run's envs (``World.env_sizes``) with its own random
streams (``training.rng``). The losses are written so that summing every rank's gradient gives the
gradient of the single-process loss over all envs (SHAC divides by the global env count, the critic by
the global minibatch size, ADD weights its terms by the rank's share), so ``World.all_reduce_grads``
sums. Normaliser statistics are merged exactly (counts, means, M2) by ``merge_moments``. Rank 0 alone
writes files; checkpoints hold the whole run's env state (``merge_env_states`` / ``split_env_state``),
so a run resumes at another world size with its envs re-split.

The processes are started by ``launch_local`` (``bcgd train --nproc N``) or by torchrun (the same
``bcgd train`` entry point, across machines); either way a rank finds its place in the environment
variables torchrun defines (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT). ``World`` with
``size == 1`` is the single-process run: every collective is a no-op.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from bcg_deploy.errors import BcgdError
from bcg_deploy.rundir import held_fds
from bcg_deploy.training.parallel.host_reduce import HostReducer
from bcg_deploy.training.rng import even_split

MIN_ENVS_PER_RANK = 8
"""``--nproc`` by default: one rank per core, but no fewer envs than this per rank."""
COLLECTIVE_TIMEOUT_S = 25.0
"""A collective that waits longer than this (a hung or stopped peer) fails the rank."""
INTERRUPTED_EXIT = 130
"""Exit code of a rank stopped by Ctrl-C (after the ranks agreed on the stop and saved)."""
STOP_SIGNAL = signal.SIGUSR1
"""What ``launch_local`` sends its ranks when it is asked to stop (SIGINT or SIGTERM sent to it alone, by
``kill``, ``timeout`` or a job scheduler): stop at the next iteration boundary, saved. Unlike a second
SIGINT it is idempotent, so the ranks of a terminal's Ctrl-C, which got SIGINT themselves, see one request."""
SAME_REQUEST_S = 1.0
"""Stop signals this close together are one request, not a "stop at once": GNU ``timeout`` sends its signal
to the command and then to the command's process group, so the command gets it twice."""
LOST_PEERS_EXIT = 3
"""Exit code of a rank whose collective failed because another rank died or hung."""
LAUNCHED_ENV = "BCGD_LOCAL_LAUNCH"
"""Set for the ranks ``launch_local`` starts: the launcher reports a failure, the ranks stay quiet."""
PER_RANK_KEYS = frozenset({"generator", "rng"})
"""Entries of an env state that are per process (random streams), not per env."""


@dataclass
class World:
    """This process's place in a data-parallel run (``size == 1``: a single process)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    env_sizes: list[int] = field(default_factory=list)
    """Envs of every rank, in rank order (contiguous blocks of the run's envs)."""
    host: HostReducer | None = None
    """Shared-memory sums for gradients when every rank runs on this machine's CPU (``host_reduce``)."""

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def total_envs(self) -> int:
        return sum(self.env_sizes)

    @property
    def local_envs(self) -> int:
        return self.env_sizes[self.rank]

    @property
    def env_offset(self) -> int:
        return sum(self.env_sizes[: self.rank])

    # ------------------------------------------------------------------ collectives

    def all_reduce_(self, t: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """In place: the sum (or max) of ``t`` over ranks."""
        if self.distributed:
            dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
        return t

    def all_gather(self, t: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's ``t`` (same shape on every rank), in rank order."""
        if not self.distributed:
            return [t]
        out = [torch.empty_like(t) for _ in range(self.size)]
        dist.all_gather(out, t.contiguous())
        return out

    def all_gather_object(self, obj: Any) -> list[Any]:
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def gather_object(self, obj: Any) -> list[Any] | None:
        """Every rank's ``obj`` on rank 0 (None elsewhere)."""
        if not self.distributed:
            return [obj]
        out: list[Any] | None = [None] * self.size if self.is_main else None
        dist.gather_object(obj, out, dst=0)
        return out

    def broadcast_params_(self, params: Sequence[torch.Tensor]) -> None:
        """Rank 0's values of ``params`` everywhere (one flat broadcast)."""
        if not self.distributed or not params:
            return
        flat = torch.cat([p.detach().reshape(-1) for p in params])
        dist.broadcast(flat, src=0)
        _unflatten_into(flat, [p.data for p in params])

    def all_reduce_grads(
        self, params: Sequence[torch.Tensor], extra: torch.Tensor | None = None
    ) -> torch.Tensor | None:
        """Sum the gradients of ``params`` (None counts as 0) and ``extra`` over ranks, in one collective.

        Returns the summed ``extra`` (e.g. the loss), which rides along in the same buffer.
        """
        if not self.distributed:
            return extra
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        parts = [g.reshape(-1) for g in grads]
        if extra is not None:
            parts.append(extra.detach().reshape(-1).to(grads[0].dtype if grads else extra.dtype))
        flat = self.sum_buffer_(torch.cat(parts), "")
        n = flat.numel() - (extra.numel() if extra is not None else 0)
        for p, g in zip(params, _split(flat[:n], grads), strict=True):
            if p.grad is None:
                p.grad = g.clone()
            else:
                p.grad.copy_(g)
        return flat[n:].reshape(extra.shape).to(extra.dtype) if extra is not None else None

    def sum_buffer(self, name: str, n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """A zeroed 1-D tensor of ``n`` entries that ``sum_buffer_`` sums over the ranks in place: this rank's
        shared-memory slot when sums go through ``host`` (no copy in or out of a staging buffer), else a plain
        tensor. Collective on first use of ``name``."""
        if self.host is not None and torch.device(device).type == "cpu":
            return self.host.slot(n, dtype, name).zero_()
        return torch.zeros(n, dtype=dtype, device=device)

    def sum_buffer_(self, buf: torch.Tensor, name: str) -> torch.Tensor:
        """In place: ``buf`` summed over the ranks; returns ``buf``. From ``sum_buffer(name, ...)`` it is summed
        where it lies; any other contiguous 1-D tensor is copied through the shared-memory slot of ``name``."""
        if not self.distributed:
            return buf
        if self.host is not None and buf.device.type == "cpu":
            return self.host.sum_(buf, name)
        dist.all_reduce(buf)
        return buf

    def barrier(self, timeout_s: float = 600.0) -> None:
        """Wait for every rank (a long timeout: set-up and kernel compilation take different times)."""
        if self.distributed:
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=timeout_s), wait_all_ranks=True)


def _split(flat: torch.Tensor, like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    out, i = [], 0
    for t in like:
        out.append(flat[i : i + t.numel()].view_as(t))
        i += t.numel()
    return out


def _unflatten_into(flat: torch.Tensor, targets: Sequence[torch.Tensor]) -> None:
    for t, v in zip(targets, _split(flat, targets), strict=True):
        t.copy_(v)


# ---------------------------------------------------------------------------------------------
# set-up


def world_from_env(num_envs: int, device: str, host_reduce: bool = True) -> World:
    """Join the process group described by torchrun's environment variables (or a single process).

    ``host_reduce``: when every rank runs on this machine (LOCAL_WORLD_SIZE == WORLD_SIZE) on the CPU, sum
    gradients through shared memory (``HostReducer``) instead of gloo's sockets."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return World(env_sizes=[int(num_envs)])
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if num_envs < size:
        raise BcgdError(f"env.num_envs {num_envs} cannot be split over {size} ranks (need at least 1 env per rank)")
    if not dist.is_initialized():
        backend = "nccl" if device.startswith("cuda") else "gloo"
        dist.init_process_group(
            backend, rank=rank, world_size=size, timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S)
        )
    one_host = int(os.environ.get("LOCAL_WORLD_SIZE", "0")) == size
    host = None
    if host_reduce and one_host and not device.startswith("cuda") and HostReducer.available():
        host = HostReducer.join(rank, size, timeout_s=COLLECTIVE_TIMEOUT_S)
    return World(rank=rank, size=size, local_rank=local_rank, env_sizes=even_split(num_envs, size), host=host)


def default_nproc(num_envs: int, device: str) -> int:
    """One rank per available core (per GPU on CUDA), with at least ``MIN_ENVS_PER_RANK`` envs each."""
    if device.startswith("cuda"):
        cores = max(torch.cuda.device_count(), 1) if torch.cuda.is_available() else 1
    else:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, num_envs // MIN_ENVS_PER_RANK))


def shutdown() -> None:
    """Leave the process group together (a rank tearing down its connections while a peer still uses them
    makes gloo abort the peer)."""
    if not dist.is_initialized():
        return
    try:
        dist.barrier()
    except RuntimeError:  # a peer is gone already: nothing to wait for
        pass
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------
# exact statistics merges


def moments(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(count, mean, M2) of the rows of ``x`` [n, d] in float64 (count 0: zeros)."""
    x = x.to(torch.float64)
    n = torch.full((), float(x.shape[0]), dtype=torch.float64, device=x.device)  # a fill: no host copy
    if x.shape[0] == 0:
        z = torch.zeros(x.shape[1:], dtype=torch.float64, device=x.device)
        return n, z, z.clone()
    mean = x.mean(0)
    return n, mean, (x - mean).square().sum(0)


def merge_moments(parts: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]):
    """Chan's pairwise merge of (count, mean, M2) triples, in order."""
    n, mean, m2 = parts[0]
    for nb, mb, m2b in parts[1:]:
        tot = n + nb
        if float(tot) == 0.0:
            continue
        delta = mb - mean
        mean = mean + delta * (nb / tot)
        m2 = m2 + m2b + delta.square() * (n * nb / tot)
        n = tot
    return n, mean, m2


def world_moments(world: World, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(count, mean, M2) of the rows of ``x`` over every rank (exact, rank order)."""
    n, mean, m2 = moments(x)
    if not world.distributed:
        return n, mean, m2
    flat = torch.cat([n.reshape(1), mean.reshape(-1), m2.reshape(-1)])
    parts = world.all_gather(flat)
    d = mean.numel()
    return merge_moments([(p[0], p[1 : 1 + d].view_as(mean), p[1 + d :].view_as(mean)) for p in parts])


# ---------------------------------------------------------------------------------------------
# env state across world sizes


def merge_env_states(states: Sequence[dict]) -> dict:
    """One global env state from every rank's (env tensors concatenated; random streams as lists)."""
    first = states[0]
    out: dict = {}
    for k, v in first.items():
        vals = [s[k] for s in states]
        if k in PER_RANK_KEYS:
            out[k] = vals
        elif isinstance(v, dict):
            out[k] = merge_env_states(vals)
        elif isinstance(v, torch.Tensor):
            out[k] = torch.cat(vals) if v.dim() > 0 else v
        else:
            out[k] = v
    return out


def split_env_state(state: dict, sizes: Sequence[int], rank: int) -> dict:
    """Rank ``rank``'s part of a global env state for the split ``sizes``.

    Random streams are kept only when the stored run had the same number of ranks; otherwise they are
    dropped (the envs continue on fresh streams)."""
    lo = sum(sizes[:rank])
    hi = lo + sizes[rank]
    total = sum(sizes)
    out: dict = {}
    for k, v in state.items():
        if k in PER_RANK_KEYS:
            streams = v if isinstance(v, list) else [v]
            if len(streams) == len(sizes):
                out[k] = streams[rank]
        elif isinstance(v, dict):
            out[k] = split_env_state(v, sizes, rank)
        elif isinstance(v, torch.Tensor) and v.dim() > 0:
            if v.shape[0] != total:
                raise BcgdError(f"checkpoint env state {k!r} has {v.shape[0]} envs, this run has {total}")
            out[k] = v[lo:hi]
        else:
            out[k] = v
    return out


# ---------------------------------------------------------------------------------------------
# local launcher (bcgd train --nproc N)


def launched_rank() -> bool:
    """Whether this process is a rank started by ``launch_local``."""
    return os.environ.get(LAUNCHED_ENV) == "1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a local rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch_local(argv: Sequence[str], nproc: int, stop_grace_s: float = 10.0, save_wait_s: float = 120.0) -> int:
    """Run ``python -m bcg_deploy.cli <argv>`` as ``nproc`` ranks on this machine; supervise them.

    The first rank that exits non-zero stops the others (SIGTERM, then SIGKILL after ``stop_grace_s``);
    the return value is 0 when every rank succeeded, else that rank's exit code (a signal as 128 + n).
    SIGINT or SIGTERM to this process (a terminal's Ctrl-C reaches the ranks too, as one process group) is
    passed on as ``STOP_SIGNAL``: the ranks stop at the iteration boundary and save, given ``save_wait_s``;
    the return value is then 128 + the signal. A second one stops the ranks at once.
    """
    port = free_port()
    procs: list[subprocess.Popen] = []
    base = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(nproc)}
    base["LOCAL_WORLD_SIZE"] = str(nproc)
    asked = StopRequest()
    with _catching((signal.SIGINT, signal.SIGTERM), lambda signum, frame: asked.note(signum)):
        for r in range(nproc):
            env = {**base, "RANK": str(r), "LOCAL_RANK": str(r), LAUNCHED_ENV: "1"}
            # the run folder's lock (rundir) goes with them: it lives while any of them does
            procs.append(
                subprocess.Popen([sys.executable, "-m", "bcg_deploy.cli", *argv], env=env, pass_fds=held_fds())
            )
        failed: tuple[int, int] | None = None
        while failed is None and not asked.requested:
            codes = [p.poll() for p in procs]
            bad = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if bad and all(c == INTERRUPTED_EXIT for _, c in bad):  # Ctrl-C reached the ranks: they saved
                asked.note(signal.SIGINT)
            elif bad:
                failed = first_cause(bad)
            elif all(c == 0 for c in codes):
                return 0
            else:
                time.sleep(0.2)
        if failed is None:
            _signal(procs, STOP_SIGNAL)
            deadline = time.monotonic() + save_wait_s
            while not asked.again and time.monotonic() < deadline and any(p.poll() is None for p in procs):
                time.sleep(0.2)
    _stop(procs, stop_grace_s)
    if failed is None:
        return 128 + int(asked.signum)
    rank, code = failed
    raise RankFailed(rank, code)


def first_cause(failed: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """Of the (rank, exit code) pairs seen failed at one poll, the one to report: the lowest rank that did not
    only die of another's death. A rank that lost its peers (``LOST_PEERS_EXIT``) or was aborted by its runtime
    (SIGABRT: gloo's threads call std::terminate when a peer's connection vanishes) is a consequence whenever
    another rank failed too."""
    consequence = (LOST_PEERS_EXIT, -int(signal.SIGABRT))
    return min(failed, key=lambda rc: (rc[1] in consequence, rc[0]))


class StopRequest:
    """Stop signals taken as requests: the first one asks for a stop; another within ``SAME_REQUEST_S`` of it
    is the same request; a later one asks again (``again``: stop at once). Used by the launcher and the
    trainer's signal handlers.

    In a data-parallel run the ranks stop at the same iteration: each sends its ``requested`` with the
    iteration's statistics and ``agree`` records whether any rank had asked. ``due`` follows that decision
    alone; a request noted after this rank's flag went out (a handler runs when the main thread is back from
    the collective) stays ``requested`` and goes out with the next iteration's."""

    def __init__(self) -> None:
        self.requested = False
        self.again = False
        self.signum = signal.SIGINT
        self._at = 0.0
        self._agreed: bool | None = None  # None: no collective decision (one process, PPO)

    def agree(self, any_rank: bool) -> None:
        """Record the ranks' decision at an iteration boundary (whether any rank had ``requested``)."""
        self._agreed = bool(any_rank)

    @property
    def due(self) -> bool:
        """Stop at this iteration boundary: the ranks' decision, or this process's request without one."""
        return self.requested if self._agreed is None else self._agreed

    def note(self, signum: int) -> bool:
        """Record a stop signal; True when it asks again."""
        now = time.monotonic()
        if not self.requested:
            self.requested, self.signum, self._at = True, signal.Signals(signum), now
        elif now - self._at >= SAME_REQUEST_S:
            self.again = True
        return self.again


@contextlib.contextmanager
def _catching(signums: Sequence[int], handler: Any) -> Iterator[None]:
    """``handler`` for ``signums`` inside the block (main thread only; elsewhere signals cannot be caught)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, handler) for s in signums}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _signal(procs: Sequence[subprocess.Popen], signum: int) -> None:
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signum)


class RankFailed(Exception):
    """A rank of a local data-parallel run exited non-zero (``code`` < 0: killed by signal -code)."""

    def __init__(self, rank: int, code: int) -> None:
        self.rank, self.code = rank, code
        if code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
        elif code == LOST_PEERS_EXIT:
            how = f"lost the other ranks (a rank hung for {COLLECTIVE_TIMEOUT_S:g} s or its connection broke)"
        else:
            how = f"exited with code {code}"
        super().__init__(f"training rank {rank} {how}")

    @property
    def exit_code(self) -> int:
        return 128 - self.code if self.code < 0 else self.code


def _stop(procs: Sequence[subprocess.Popen], grace_s: float) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        left = max(deadline - time.monotonic(), 0.0)
        try:
            p.wait(timeout=left)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
