"""bf16 critic regression against float32: learning curves and evaluation, with the seed spread as the yardstick.

    python bench/critic_precision.py                       # 16 envs, horizon 16, 300 iterations, seeds 0 1
    python bench/critic_precision.py --envs 64 --horizon 32 --iterations 200 --task dance

``shac.critic_bf16`` runs the forward pass of the critic regression under bf16 autocast (the actor, reward,
simulator and target critic stay float32). It may become a default only with a learning curve equal to
float32's, so this benchmark trains, with everything else equal, float32 with seeds 0 and 1 and bf16 with
seed 0 (``--bf16-seeds`` for more), and compares:

- the curves (reward, E_track, episode length, critic loss) averaged over the last ``--tail`` fraction of
  the iterations: bf16 minus float32 at the same seed, against float32 seed 1 minus seed 0 (the seed noise);
- each run's final run.pt in the training simulator (``evaluate_checkpoint``: deterministic, seeded starts);
- the critic regression's seconds per iteration (cProfile-free: the ``time_s`` of the iteration and a
  separate timing of ``SHAC.update_critic`` over the measured iterations).

``within_seed_noise`` is true for a metric when |bf16 - float32| <= |float32 seed 1 - float32 seed 0| (both at
their tail means) or, for the evaluation, when bf16's value lies within the float32 seeds' range widened by
their spread. Writes bench/results/critic_precision.json and prints ``name.metric: value`` lines.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_common import make_trainer

from bcg_deploy.fileio import atomic_write_json
from bcg_deploy.training.logger import read_metrics

RESULTS = Path(__file__).resolve().parent / "results"
CURVE_KEYS = ("reward", "tracking_error_cm", "episode_length", "critic_loss")
EVAL_KEYS = ("tracking_error_cm", "episode_length", "falls")


def _train(args, name: str, seed: int, bf16: bool, root: Path) -> dict:
    """One run: its per-iteration curves, the mean seconds of ``update_critic`` and of an iteration."""
    args.seed = seed
    out = root / name
    extra = [f"shac.critic_bf16={bf16}", f"bcg.enabled={args.bundle}"]
    tr = make_trainer(args, str(out), kappa=args.kappa, iterations=args.iterations, extra=extra)
    critic_s: list[float] = []
    update = tr.shac.update_critic

    def timed(roll):  # noqa: ANN001, ANN202
        t0 = time.perf_counter()
        r = update(roll)
        critic_s.append(time.perf_counter() - t0)
        return r

    tr.shac.update_critic = timed
    try:
        while tr.iteration < args.iterations:
            m = tr.step()
            if m["iteration"] % 50 == 0:
                print(f"train.{name}.iteration {m['iteration']}: reward {m['reward']:.3f}", flush=True)
        tr.save()
    finally:
        tr.logger.close()
    rows = read_metrics(out)
    curves = {k: [float(r.get(k, math.nan)) for r in rows] for k in (*CURVE_KEYS, "time_s")}
    return {
        "name": name,
        "seed": seed,
        "critic_bf16": bf16,
        "run_dir": str(out),
        "curves": curves,
        "critic_s_per_iteration": float(np.mean(critic_s[1:])) if len(critic_s) > 1 else math.nan,
        "s_per_iteration": float(np.nanmean(curves["time_s"][1:])),
    }


def _tail(run: dict, frac: float) -> dict:
    out = {}
    for k in CURVE_KEYS:
        y = np.asarray(run["curves"][k], dtype=float)
        y = y[-max(1, int(round(len(y) * frac))) :]
        out[k] = float(np.nanmean(y)) if np.isfinite(y).any() else math.nan
    return out


def _evaluate(run: dict, args) -> dict:
    from bcg_deploy.training.evaluate import evaluate_checkpoint

    r = evaluate_checkpoint(Path(run["run_dir"]) / "run.pt", num_envs=args.eval_envs, steps=args.eval_steps)
    return {k: float(r[k]) for k in EVAL_KEYS}


def _compare(fp: list[dict], bf: list[dict], key: str) -> dict:
    """bf16 against the float32 seeds for one metric: the differences and the verdict."""
    ref0, ref1 = fp[0][key], fp[1][key]
    noise = abs(ref1 - ref0)
    diffs = [b[key] - ref0 for b in bf]
    lo, hi = min(ref0, ref1) - noise, max(ref0, ref1) + noise
    return {
        "float32_seed0": ref0,
        "float32_seed1": ref1,
        "bf16": [b[key] for b in bf],
        "bf16_minus_float32": diffs,
        "seed_noise": noise,
        "within_seed_noise": all(lo <= b[key] <= hi for b in bf),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="dance")
    ap.add_argument("--envs", type=int, default=16)
    ap.add_argument("--horizon", type=int, default=16)
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--kappa", type=float, default=300.0)
    ap.add_argument("--bundle", action=argparse.BooleanOptionalAction, default=False, help="SHAC + BCG runs")
    ap.add_argument("--bf16-seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--tail", type=float, default=0.2, help="fraction of the last iterations averaged")
    ap.add_argument("--eval-envs", type=int, default=16)
    ap.add_argument("--eval-steps", type=int, default=500)
    ap.add_argument("--set", nargs="*", default=["env.max_tracking_error=0.5"], help="config overrides (all runs)")
    ap.add_argument("--out", type=Path, default=RESULTS / "critic_precision.json")
    ap.add_argument("--keep", type=Path, default=None, help="keep the run folders here (default: a temp dir)")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bcgd_critic_precision_"))
    runs = [_train(args, f"float32_seed{s}", s, False, root) for s in (0, 1)]
    runs += [_train(args, f"bf16_seed{s}", s, True, root) for s in args.bf16_seeds]
    for r in runs:
        r["tail"] = _tail(r, args.tail)
        r["evaluation"] = _evaluate(r, args)
    fp, bf = runs[:2], runs[2:]
    result = {
        "config": {k: getattr(args, k) for k in ("task", "envs", "horizon", "iterations", "kappa", "bundle", "tail")}
        | {"set": args.set, "eval_envs": args.eval_envs, "eval_steps": args.eval_steps},
        "runs": runs,
        "curves_tail": {k: _compare([r["tail"] for r in fp], [r["tail"] for r in bf], k) for k in CURVE_KEYS},
        "evaluation": {k: _compare([r["evaluation"] for r in fp], [r["evaluation"] for r in bf], k) for k in EVAL_KEYS},
        "critic_speedup": fp[0]["critic_s_per_iteration"] / np.mean([r["critic_s_per_iteration"] for r in bf]),
    }
    result["equal_within_seed_noise"] = all(
        v["within_seed_noise"] for part in ("curves_tail", "evaluation") for v in result[part].values()
    )
    atomic_write_json(args.out, result)
    for part in ("curves_tail", "evaluation"):
        for k, v in result[part].items():
            bf = ", ".join(f"{b:.4g}" for b in v["bf16"])
            ref = f"{v['float32_seed0']:.4g} / {v['float32_seed1']:.4g}"
            print(f"critic_precision.{part}.{k}: float32 {ref}, bf16 {bf}, within seed noise {v['within_seed_noise']}")
    for r in runs:
        print(f"critic_precision.{r['name']}.critic_s_per_iteration: {r['critic_s_per_iteration']:.3f}")
    print(f"critic_precision.critic_speedup: {result['critic_speedup']:.2f}")
    print(f"critic_precision.equal_within_seed_noise: {result['equal_within_seed_noise']}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
