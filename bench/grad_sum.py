"""The per-step gradient sum of the critic regression over 2 ranks of one machine, with sanitise and clip.

    python bench/grad_sum.py [--steps 64] [--repeats 3] [--ranks 2]

At the paper's size every critic step sums the 3-critic ensemble's 854k gradients over the ranks, zeroes
their non-finite entries and clips them to a total norm (64 times per SHAC iteration). Peers, measured in
the same processes, interleaved ``--repeats`` times, one torch thread per rank:
- ``per_tensor_gloo_barrier``: the per-tensor path (``World.all_reduce_grads``: flatten, copy
  into the shared-memory slot, two gloo barriers, copy back and unflatten; then ``shac.clip_and_sanitize``,
  per tensor, with torch's inf-norm);
- ``flat_gloo_barrier``: ``FlatGrads`` (the gradients are this rank's slot: no copies in or out; sanitise and
  clip over one tensor) with gloo's barrier;
- ``flat_spin_barrier``: ``FlatGrads`` with ``SpinBarrier`` (x86-64 only; what the trainer uses there);
- ``gloo_barrier`` and ``spin_barrier``: the barrier alone.
Reports milliseconds per step (best repeat, and every repeat) and per iteration (x 64). Writes
bench/results/grad_sum.json and prints ``name.metric: value`` lines.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

RESULTS = Path(__file__).resolve().parent / "results"


def _worker(rank: int, size: int, port: int, steps: int, repeats: int, out: str) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=size)
    from bcg_deploy.training.algorithms.shac import clip_and_sanitize
    from bcg_deploy.training.networks import CriticEnsemble
    from bcg_deploy.training.parallel.distributed import World
    from bcg_deploy.training.parallel.flat_grads import FlatGrads
    from bcg_deploy.training.parallel.host_reduce import TSO_MACHINES, HostReducer

    sizes = [32] * size
    gloo = World(rank=rank, size=size, env_sizes=sizes, host=HostReducer.join(rank, size, spin=False))
    spin_ok = platform.machine() in TSO_MACHINES
    spin = (
        World(rank=rank, size=size, env_sizes=sizes, host=HostReducer.join(rank, size, spin=True)) if spin_ok else None
    )
    loss = torch.tensor(1.0)
    nets = {}

    def grads_of(key: str) -> list[torch.Tensor]:
        if key not in nets:
            torch.manual_seed(rank)
            params = list(CriticEnsemble(849, (256, 256), 3).parameters())
            for p in params:
                p.grad = torch.randn_like(p)
            nets[key] = params
        return nets[key]

    flat = {"gloo": FlatGrads(grads_of("flat_gloo"), gloo, "g")}
    if spin is not None:
        flat["spin"] = FlatGrads(grads_of("flat_spin"), spin, "g")

    def per_tensor() -> None:
        params = grads_of("per_tensor")
        gloo.all_reduce_grads(params, loss)
        clip_and_sanitize(params, 10.0)

    def flat_step(kind: str):  # noqa: ANN202
        def f() -> None:
            flat[kind].sum_over_ranks_(loss)
            flat[kind].sanitize_and_clip_(10.0)

        return f

    peers = {"per_tensor_gloo_barrier": per_tensor, "flat_gloo_barrier": flat_step("gloo"),
             "gloo_barrier": gloo.host.barrier}  # fmt: skip
    if spin is not None:
        peers.update(flat_spin_barrier=flat_step("spin"), spin_barrier=spin.host.barrier)
    runs: dict[str, list[float]] = {k: [] for k in peers}
    for _ in range(repeats):
        for name, f in peers.items():
            for _ in range(5):
                f()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(steps):
                f()
            runs[name].append((time.perf_counter() - t0) / steps * 1e3)
    if rank == 0:
        Path(out).write_text(json.dumps(runs))
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--out", type=Path, default=RESULTS / "grad_sum.json")
    args = ap.parse_args()
    from bcg_deploy.fileio import atomic_write_json
    from bcg_deploy.training.parallel.distributed import free_port

    tmp = Path(tempfile.mkdtemp(prefix="bcgd_gs_")) / "runs.json"
    mp.start_processes(_worker, args=(args.ranks, free_port(), args.steps, args.repeats, str(tmp)),
                       nprocs=args.ranks, start_method="spawn")  # fmt: skip
    runs = json.loads(tmp.read_text())
    best = {k: min(v) for k, v in runs.items()}
    result = {
        "machine": platform.machine(),
        "ranks": args.ranks,
        "steps": args.steps,
        "ms_per_step": best,
        "ms_per_step_runs": runs,
        "ms_per_iteration_64_steps": {k: 64 * v for k, v in best.items()},
    }
    for k, v in best.items():
        print(f"grad_sum.{k}.ms_per_step: {v:.3f}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
