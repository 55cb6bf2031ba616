"""One critic regression step (forward, backward, sanitise and clip, Adam) of the paper's 3-critic ensemble.

    python bench/critic_step.py [--rows 256 512] [--steps 40] [--repeats 2]

The critic updates are half of a SHAC iteration at the paper's size (16 passes x 4 minibatches of 512 rows
of 849 values through 3 critics [256, 256]; 256 rows per rank on 2 ranks). Peers measured in the same run,
interleaved ``--repeats`` times, one torch thread: torch's default Adam with per-tensor sanitise and clip (the
trainer before the fused optimiser), the fused Adam with the gradients in one flat buffer as the trainer runs
them (``shac.fused_adam``, ``FlatGrads``), and the same with the forward pass under bf16 autocast
(``shac.critic_bf16``). Reports milliseconds per step (best of the repeats, and every
repeat), the ratios to the default-Adam peer, and whether the CPU reports AMX / AVX-512 bf16. Writes
bench/results/critic_step.json and prints ``name.metric: value`` lines.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch

from bcg_deploy.fileio import atomic_write_json
from bcg_deploy.training.algorithms.shac import clip_and_sanitize, fused_adam
from bcg_deploy.training.device import cpu_flags
from bcg_deploy.training.networks import CriticEnsemble
from bcg_deploy.training.parallel.distributed import World
from bcg_deploy.training.parallel.flat_grads import FlatGrads

RESULTS = Path(__file__).resolve().parent / "results"
PEERS = ("adam", "fused", "fused_bf16")


def _ms_per_step(peer: str, rows: int, steps: int) -> float:
    torch.manual_seed(0)
    critic = CriticEnsemble(849, (256, 256), 3)
    params = list(critic.parameters())
    if peer == "adam":
        opt = torch.optim.Adam(params, lr=2e-3, betas=(0.7, 0.95))
    else:
        opt = fused_adam(params, 2e-3, (0.7, 0.95))
    x, y = torch.randn(rows, 849), torch.randn(rows)
    flat = FlatGrads(params, World(env_sizes=[1]), "critic") if peer != "adam" else None

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=peer == "fused_bf16"):
            pred = critic.each(x)
        loss = (pred.float() - y).square().sum(dim=-1).sum() / rows
        if flat is None:
            opt.zero_grad(set_to_none=True)
            loss.backward()
            clip_and_sanitize(params, 10.0)
        else:
            flat.zero_()
            loss.backward()
            flat.sanitize_and_clip_(10.0)
        opt.step()

    for _ in range(3):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t0) / steps * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=RESULTS / "critic_step.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    bf16_flags = sorted(f for f in cpu_flags() if f.startswith(("amx", "avx512_bf16")))
    result: dict = {"cpu": platform.processor() or platform.machine(), "cpu_bf16_flags": bf16_flags, "rows": {}}
    for rows in args.rows:
        runs = {p: [] for p in PEERS}
        for _ in range(args.repeats):  # interleaved, so that a busy spell hits every peer
            for p in PEERS:
                runs[p].append(_ms_per_step(p, rows, args.steps))
        best = {p: min(v) for p, v in runs.items()}
        result["rows"][rows] = {
            "ms_per_step": best,
            "ms_per_step_runs": runs,
            "over_adam": {p: best[p] / best["adam"] for p in PEERS},
            "ms_per_iteration_64_steps": {p: 64 * best[p] for p in PEERS},
        }
        for p in PEERS:
            print(f"critic_step.rows{rows}.{p}.ms_per_step: {best[p]:.2f} (x{best[p] / best['adam']:.2f})")
    atomic_write_json(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
