"""Learning comparison: plain SHAC vs SHAC + BCG at kappa 300 on the same task and budget.

Two ``Trainer``s with the same seed, config and iteration budget (so the same initial networks and the
same number of nominal env-steps), one plain, one with BCG (METHOD.md defaults unless ``--set``),
stepped round-robin (plain, BCG, plain, ...) so both see the same machine load. Per iteration: reward,
ADD reward, tracking error, episode length, actor gradient norm, cumulative wall-clock, bundles. At
the end both actors are evaluated deterministically (``training.evaluate.evaluate_policy``, same seeded
starts). Writes bench/results/bcg_learning.json and bcg_learning.png (reward and tracking error over
iterations and over wall-clock; raw and a moving average) and prints ``name.metric: value`` lines.

    python bench/bcg_learning.py [--task run] [--envs 32] [--horizon 32] [--iterations 120]
"""

from __future__ import annotations

import argparse
import math
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from bench_common import make_trainer

from bcg_deploy.fileio import atomic_write_json
from bcg_deploy.training.evaluate import evaluate_policy
from bcg_deploy.training.runner import Trainer

RESULTS = Path(__file__).resolve().parent / "results"
KEYS = ("reward", "reward_add", "tracking_error_cm", "episode_length", "actor_grad_norm", "falls", "time_s", "cpu_s")
BCG_KEYS = ("bcg_starts", "bcg_bundled_envs", "bcg_sim_rows")


def _trainer(args, bundle: bool, out_dir: str) -> Trainer:
    return make_trainer(args, out_dir, kappa=args.kappa, iterations=args.iterations, bundle=bundle)


def _evaluate(tr: Trainer, args) -> dict:
    norm = tr.shac.obs_normalizer if tr.cfg.shac.normalize_obs else None
    return evaluate_policy(tr.cfg, tr.motion, tr.shac.actor, norm, num_envs=args.eval_envs, steps=args.eval_steps)


def _moving(x: list[float], w: int) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    out = np.full_like(a, np.nan)
    for i in range(len(a)):
        seg = a[max(0, i - w + 1) : i + 1]
        seg = seg[np.isfinite(seg)]
        out[i] = seg.mean() if seg.size else np.nan
    return out


def _plot(curves: dict, path: Path, window: int, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7), constrained_layout=True)
    for name, color in (("plain", "tab:blue"), ("bcg", "tab:red")):
        c = curves[name]
        it = np.arange(1, len(c["reward"]) + 1)
        wall = np.cumsum(c["time_s"]) / 60.0
        label = "SHAC" if name == "plain" else "SHAC + BCG"
        for row, key, ylabel in ((0, "reward", "reward / step"), (1, "tracking_error_cm", "tracking error (cm)")):
            for col, x, xlabel in ((0, it, "iteration"), (1, wall, "wall-clock (min)")):
                ax = axes[row, col]
                ax.plot(x, c[key], color=color, alpha=0.25, lw=0.8)
                ax.plot(x, _moving(c[key], window), color=color, lw=1.8, label=label)
                ax.set_xlabel(xlabel)
                ax.set_ylabel(ylabel)
                ax.grid(alpha=0.3)
    axes[0, 0].legend()
    fig.suptitle(title)
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="run")
    ap.add_argument("--envs", type=int, default=32)
    ap.add_argument("--horizon", type=int, default=32)
    ap.add_argument("--iterations", type=int, default=120)
    ap.add_argument("--kappa", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--eval-envs", type=int, default=16)
    ap.add_argument("--eval-steps", type=int, default=250)
    ap.add_argument("--window", type=int, default=10, help="moving-average window of the plot and the summary")
    ap.add_argument("--set", nargs="*", default=[], help="extra config overrides a.b=v (both runs)")
    ap.add_argument("--out", type=Path, default=RESULTS / "bcg_learning.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    curves: dict[str, dict[str, list]] = {n: {k: [] for k in KEYS + BCG_KEYS} for n in ("plain", "bcg")}
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {"plain": _trainer(args, False, f"{tmp}/plain"), "bcg": _trainer(args, True, f"{tmp}/bcg")}
        initial = _evaluate(trainers["plain"], args)  # same seed: both start from these networks
        for it in range(args.iterations):
            for name, tr in trainers.items():
                c0 = time.process_time()
                m = tr.step()
                m["cpu_s"] = time.process_time() - c0
                for k in curves[name]:
                    if k in m:
                        curves[name][k].append(float(m[k]))
            if (it + 1) % 10 == 0:
                p, b = curves["plain"], curves["bcg"]
                print(f"iteration {it + 1}: reward plain {np.mean(p['reward'][-10:]):.3f} bcg "
                      f"{np.mean(b['reward'][-10:]):.3f}  track plain {np.nanmean(p['tracking_error_cm'][-10:]):.1f} "
                      f"bcg {np.nanmean(b['tracking_error_cm'][-10:]):.1f} cm", flush=True)  # fmt: skip
        final = {name: _evaluate(tr, args) for name, tr in trainers.items()}
    w = args.window
    summary = {}
    for name, c in curves.items():
        summary[name] = {
            "final_reward_mean_last_window": float(np.mean(c["reward"][-w:])),
            "final_tracking_error_cm_last_window": float(np.nanmean(c["tracking_error_cm"][-w:])),
            "final_episode_length_last_window": float(np.nanmean(c["episode_length"][-w:])),
            "best_reward_moving_average": float(np.nanmax(_moving(c["reward"], w))),
            "wall_clock_s": float(np.sum(c["time_s"])),
            "seconds_per_iteration": float(np.mean(c["time_s"])),
            "cpu_seconds_per_iteration": float(np.mean(c["cpu_s"])),
            "actor_grad_norm_median": float(np.nanmedian(c["actor_grad_norm"])),
            "actor_grad_norm_max": float(np.nanmax(c["actor_grad_norm"])),
            "evaluation": final[name],
        }
        if c["bcg_starts"]:
            summary[name]["bundles_per_iteration"] = float(np.mean(c["bcg_starts"]))
            summary[name]["bundled_env_step_fraction"] = float(np.mean(c["bcg_bundled_envs"])) / (
                args.envs * args.horizon
            )
    report = {
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "initial_evaluation": initial,
        "summary": summary,
        "curves": curves,
        "seconds": time.perf_counter() - t0,
        "machine": {"torch_threads": torch.get_num_threads(), "platform": platform.platform()},
    }
    atomic_write_json(args.out, report)
    title = (f"{args.task}, kappa {args.kappa:g}, {args.envs} envs x {args.horizon} steps, seed {args.seed}: "
             "plain SHAC vs SHAC + BCG")  # fmt: skip
    _plot(curves, args.out.with_suffix(".png"), w, title)
    for name, s in summary.items():
        for key, v in s.items():
            if isinstance(v, float) and math.isfinite(v):
                print(f"{name}.{key}: {v:.4g}")
        e = s["evaluation"]
        print(f"{name}.eval.tracking_error_cm: {e['tracking_error_cm']:.2f}  eval.episode_length: "
              f"{e['episode_length']:.1f}  eval.falls: {e['falls']}")  # fmt: skip
    print(f"initial.eval.tracking_error_cm: {initial['tracking_error_cm']:.2f}  episode_length "
          f"{initial['episode_length']:.1f}")  # fmt: skip
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
