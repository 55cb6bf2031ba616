"""Starting the ranks of a data-parallel run, and running one.

``bcgd train --nproc N`` runs its own command line again as N ranks on this machine (``--nnodes M``:
through torchrun, on every machine). Every one of these processes calls ``start_ranks(cfg, launch, argv)``:
in the process that launches, it starts the ranks, waits for them and returns their exit code; in a rank
(``WORLD_SIZE`` in its environment) it returns the rank's ``World`` to train with, ``run_rank`` around the
training. From Python, run ``training.run.train(cfg, world=world_from_env(...))`` in each process of your
own launcher (torchrun) instead.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bcg_deploy.errors import BcgdError
from bcg_deploy.training.config import TrainConfig
from bcg_deploy.training.parallel import distributed as dd
from bcg_deploy.training.run_files import stopped_run_note

LAUNCH_OPTIONS = ("--nproc", "--nnodes", "--node-rank", "--rdzv-endpoint")
"""The command-line options that say how to launch, left out of the ranks' own command line."""


@dataclass(frozen=True)
class Launch:
    """How a run is spread over processes.

    Attributes:
        nproc: ranks on this machine (None: ``distributed.default_nproc``, one per core with at least
            ``MIN_ENVS_PER_RANK`` envs each; PPO: 1).
        nnodes: machines (more than 1: started through torchrun's rendezvous).
        node_rank: this machine's index among them.
        rdzv_endpoint: HOST:PORT of machine 0 (needed with ``nnodes`` > 1).
    """

    nproc: int | None = None
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None


def start_ranks(cfg: TrainConfig, launch: Launch, argv: Sequence[str]) -> dd.World | int:
    """This process's ``World`` when it is a rank (started by ``--nproc`` or torchrun), or, after launching
    the ranks itself (``--nproc N`` on this machine, or torchrun for ``nnodes`` > 1) and waiting for them,
    their exit code (0: every rank finished). ``argv``: the command line the ranks run (``bcgd`` left out;
    the launch options are dropped from it, and it must name the run folder with ``--out``)."""
    nproc, nnodes, rdzv = launch.nproc, launch.nnodes, launch.rdzv_endpoint
    if "WORLD_SIZE" in os.environ:  # a rank: torchrun's (or our launcher's) environment
        return dd.world_from_env(cfg.env.num_envs, cfg.runner.device, cfg.runner.host_reduce)
    if nproc is not None and nproc < 1:
        raise BcgdError(f"--nproc {nproc}: expected at least 1")
    per_node = nproc if nproc is not None else dd.default_nproc(cfg.env.num_envs, cfg.runner.device)
    if cfg.algo == "ppo":
        per_node = 1 if nproc is None else nproc
    argv = without_launch_options(argv)  # the ranks run the same command, as ranks
    if nnodes > 1:
        if rdzv is None:
            raise BcgdError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (node 0's address)")
        if cfg.env.num_envs // (per_node * nnodes) < 1:
            raise BcgdError(f"env.num_envs {cfg.env.num_envs} cannot be split over {per_node * nnodes} ranks")
        from torch.distributed.run import main as torchrun

        torchrun(
            [f"--nnodes={nnodes}", f"--nproc-per-node={per_node}", f"--node-rank={launch.node_rank}",
             f"--rdzv-endpoint={rdzv}", "--max-restarts=0", "-m", "bcg_deploy.cli", *argv]
        )  # fmt: skip
        return 0
    if per_node <= 1:
        return dd.World(env_sizes=[cfg.env.num_envs])
    if cfg.env.num_envs < per_node:
        raise BcgdError(f"--nproc {per_node}: env.num_envs {cfg.env.num_envs} gives a rank no env")
    try:
        return dd.launch_local(argv, per_node)
    except dd.RankFailed as exc:
        raise BcgdError(f"{exc}; every rank stopped; {stopped_run_note(Path(cfg.runner.out_dir))}") from None


class LostPeers(Exception):
    """A rank's collective failed or timed out: the other ranks are gone (exit ``distributed.LOST_PEERS_EXIT``).
    ``reported``: the launcher of ``--nproc`` reports for all its ranks, so the rank itself says nothing."""

    def __init__(self, rank: int, cause: str, reported: bool) -> None:
        super().__init__(f"rank {rank}: lost the other ranks ({cause})")
        self.reported = reported


def run_rank(fn: Callable[[], Any], world: dd.World) -> Any:
    """``fn()`` (a rank's training), then the process group shut down; in a data-parallel run a
    ``RuntimeError`` (a collective that failed or timed out) becomes ``LostPeers``."""
    try:
        return fn()
    except RuntimeError as exc:
        if not world.distributed:
            raise
        msg = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise LostPeers(world.rank, msg, reported=dd.launched_rank()) from None
    finally:
        dd.shutdown()


def stop_signal_interrupts() -> None:
    """In a rank of ``bcgd train --nproc N``, the launcher's stop request before the trainer listens for it
    (set-up, first compile) interrupts, as Ctrl-C does: nothing has been trained to save."""
    if dd.launched_rank():
        signal.signal(dd.STOP_SIGNAL, signal.default_int_handler)


def without_launch_options(argv: Sequence[str]) -> list[str]:
    """``argv`` without the launch options and their values (torchrun would take them for its own)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in LAUNCH_OPTIONS:
            skip = True
        elif not a.startswith(tuple(f"{o}=" for o in LAUNCH_OPTIONS)):
            out.append(a)
    return out
