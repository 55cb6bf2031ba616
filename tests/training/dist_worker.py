"""One rank (or the single-process reference) of the data-parallel equivalence test.

    [BCGD_TEST_DTYPE=float64] python tests/training/dist_worker.py OUT.pt ENVS HORIZON ITERATIONS [ENV_STREAMS]

As a rank it reads torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); without them it is
one process with ENV_STREAMS random streams. BCGD_TEST_OVERRIDES: more config overrides (space-separated).
It runs ITERATIONS plain SHAC updates (BCG's perturbations come from a stream per process, so only its
distribution, not each draw, is independent of the split) and saves the actor and critic parameters (rank 0
/ the single process only; with adaptive starts every rank saves its start distribution).
"""

from __future__ import annotations

import os
import sys

import torch

from bcg_deploy.training.config import TrainConfig, apply_overrides
from bcg_deploy.training.parallel.distributed import shutdown, world_from_env
from bcg_deploy.training.runner import Trainer


def main() -> None:
    out, envs, horizon, iterations = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    streams = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    dtype = os.environ.get("BCGD_TEST_DTYPE", "float32")
    torch.set_num_threads(int(os.environ.get("BCGD_TEST_THREADS", "1")))
    cfg = apply_overrides(
        TrainConfig(),
        [f"env.num_envs={envs}", f"shac.horizon={horizon}", "runner.tensorboard=false",
         f"runner.out_dir={out}.run", f"runner.env_streams={streams}", "runner.iterations=100",
         "shac.critic_iterations=4", f"sim.dtype={dtype}", "bcg.enabled=false",
         *os.environ.get("BCGD_TEST_OVERRIDES", "").split()],
    )  # fmt: skip
    world = world_from_env(envs, "cpu")
    tr = Trainer(cfg, world=world)
    for _ in range(iterations):
        tr.step()
    sampler = tr.env.start_sampler
    if sampler is not None and not world.is_main:  # every rank's adaptive start distribution
        torch.save({"start_failures": sampler.failures.clone()}, f"{out}.rank{world.rank}")
    if world.is_main:
        torch.save(
            {
                "actor": {k: v.clone() for k, v in tr.shac.actor.state_dict().items()},
                "actor_grad": {k: p.grad.clone() for k, p in tr.shac.actor.named_parameters()},
                "critic": {k: v.clone() for k, v in tr.shac.critic.state_dict().items()},
                "obs_mean": tr.shac.obs_normalizer.mean.clone(),
                "ret_var": tr.shac.ret_normalizer.var.clone(),
                "add_mean_abs": tr.add.norm.mean_abs.clone(),
                "metrics": tr.last_metrics,
                **({"start_failures": sampler.failures.clone()} if sampler is not None else {}),
            },
            out,
        )
    shutdown()


if __name__ == "__main__":
    main()
