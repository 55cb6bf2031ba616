"""Wall-clock cost of bundling: full SHAC iterations with and without BCG at the paper's config.

Two ``Trainer``s with the same seed and config (default 64 envs, horizon 32, kappa 300, dance), one
plain, one with BCG (B 10, H 2, sigma_p 1 cm, sigma_v 2 cm/s, tau 400 N); after ``--warmup``
iterations each (kernel loading, buffer recording, first bucket simulators), ``--iterations`` timed
iterations are run round-robin (plain, BCG, plain, ...) so both see the same machine load. Reports
wall-clock and process CPU seconds per iteration (mean and median; with one torch thread and Warp's
single-threaded CPU kernels the CPU time is the compute cost, robust to other jobs on a shared
machine) of each, their ratios, the BCG transition's forward time,
bundles started, bundled env-steps and simulator rows per iteration. JSON to
bench/results/bcg_overhead.json; prints ``name.metric: value`` lines.

    python bench/bcg_overhead.py [--envs 64] [--horizon 32] [--iterations 4] [--warmup 1]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
from bench_common import make_trainer

from bcg_deploy.fileio import atomic_write_json
from bcg_deploy.training.runner import Trainer

RESULTS = Path(__file__).resolve().parent / "results"
BCG_KEYS = ("bcg_starts", "bcg_bundled_envs", "bcg_branch_rows", "bcg_sim_rows", "bcg_row_overhead", "bcg_time_s")


def _trainer(args, bundle: bool, out_dir: str) -> Trainer:
    return make_trainer(args, out_dir, kappa=args.kappa, iterations=args.warmup + args.iterations, bundle=bundle)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="dance")
    ap.add_argument("--envs", type=int, default=64)
    ap.add_argument("--horizon", type=int, default=32)
    ap.add_argument("--kappa", type=float, default=300.0)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", nargs="*", default=[], help="extra config overrides a.b=v")
    ap.add_argument("--out", type=Path, default=RESULTS / "bcg_overhead.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {"plain": _trainer(args, False, f"{tmp}/plain"), "bcg": _trainer(args, True, f"{tmp}/bcg")}
        rows: dict[str, list[dict]] = {"plain": [], "bcg": []}
        for _ in range(args.warmup):
            for tr in trainers.values():
                tr.step()
        for _ in range(args.iterations):
            for name, tr in trainers.items():
                c0 = time.process_time()
                m = tr.step()
                m["cpu_s"] = time.process_time() - c0
                rows[name].append(m)
    out: dict = {"settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}
    for name, ms in rows.items():
        secs = [m["time_s"] for m in ms]
        cpu = [m["cpu_s"] for m in ms]
        out[name] = {
            "seconds_per_iteration_mean": statistics.fmean(secs),
            "seconds_per_iteration_median": statistics.median(secs),
            "seconds": secs,
            "cpu_seconds_per_iteration_mean": statistics.fmean(cpu),
            "cpu_seconds_per_iteration_median": statistics.median(cpu),
            "cpu_seconds": cpu,
            "env_steps_per_s": args.envs * args.horizon / statistics.fmean(secs),
            "reward_mean": statistics.fmean(m["reward"] for m in ms),
        }
        for key in BCG_KEYS:
            if key in ms[0]:
                out[name][f"{key}_per_iteration"] = statistics.fmean(m[key] for m in ms)
    out["ratio_bcg_over_plain_mean"] = (
        out["bcg"]["seconds_per_iteration_mean"] / out["plain"]["seconds_per_iteration_mean"]
    )
    out["ratio_bcg_over_plain_median"] = (
        out["bcg"]["seconds_per_iteration_median"] / out["plain"]["seconds_per_iteration_median"]
    )
    out["cpu_ratio_bcg_over_plain_mean"] = (
        out["bcg"]["cpu_seconds_per_iteration_mean"] / out["plain"]["cpu_seconds_per_iteration_mean"]
    )
    out["cpu_ratio_bcg_over_plain_median"] = (
        out["bcg"]["cpu_seconds_per_iteration_median"] / out["plain"]["cpu_seconds_per_iteration_median"]
    )
    out["bundled_env_step_fraction"] = out["bcg"].get("bcg_bundled_envs_per_iteration", 0.0) / (
        args.envs * args.horizon
    )
    out["seconds"] = time.perf_counter() - t0
    out["machine"] = {"torch_threads": torch.get_num_threads(), "platform": platform.platform()}
    atomic_write_json(args.out, out)
    for name in ("plain", "bcg"):
        print(f"{name}.seconds_per_iteration: {out[name]['seconds_per_iteration_mean']:.3f}")
        print(f"{name}.cpu_seconds_per_iteration: {out[name]['cpu_seconds_per_iteration_mean']:.3f}")
    print(f"cpu_ratio_bcg_over_plain: {out['cpu_ratio_bcg_over_plain_mean']:.3f}")
    ratio, med = out["ratio_bcg_over_plain_mean"], out["ratio_bcg_over_plain_median"]
    print(f"ratio_bcg_over_plain: {ratio:.3f} (median {med:.3f})")
    for key in BCG_KEYS:
        if f"{key}_per_iteration" in out["bcg"]:
            print(f"bcg.{key}_per_iteration: {out['bcg'][f'{key}_per_iteration']:.3f}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
