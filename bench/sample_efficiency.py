"""Sample efficiency on one motion at kappa 300: PPO, plain SHAC and SHAC + BCG, reward and E_track against
env steps and against wall-clock (the paper's headline: SHAC + BCG reaches PPO's reward with over 10x fewer
samples, 6.1 M nominal env steps against PPO's 295 M).

    python bench/sample_efficiency.py --ppo runs/dance_ppo --shac runs/dance_shac --bcg runs/dance_bcg
    python bench/sample_efficiency.py --bcg runs/dance_bcg --train ppo shac --budget-s 1800 600

Each method is a training run directory (``metrics.jsonl`` + ``config.yaml``, as ``bcgd train`` writes them);
a method named in ``--train`` without a directory is trained here first, with the library's defaults for
that method (PPO: the paper's settings, ``bcgd train --algo ppo``; SHAC: ``bcgd train``), for its
wall-clock budget in seconds (``--budget-s``, one per ``--train`` entry), then saved. All runs must be on
the same motion and kappa. Env steps per iteration are ``num_envs x horizon`` (SHAC) and
``num_envs x num_steps_per_env`` (PPO); wall-clock is the sum of the logged iteration times.

Figures (curves smoothed over ``--smooth-steps`` env steps):
- the reference: SHAC + BCG's reward, E_track and episode length at min(6.1 M, its last) env steps;
- for PPO and plain SHAC: the env steps (and wall-clock) at which they first reach that reward (and that
  E_track) while also surviving as long as the reference (episode length), or ``null`` when their budget
  ends first; their reward, E_track and episode length at the end of the budget;
- each run's final run.pt evaluated the same way (``training.evaluate.evaluate_checkpoint``: deterministic,
  training simulator, the same seeded starts): E_track, falls, episode length;
- PPO's budget as a fraction of the paper's 4096 x 24 x 3000 = 295 M env steps.
The reward is each run's own ADD reward (its own discriminator: an untrained one pays about 1.39 a step),
and a training rollout's E_track is measured only while the robot is up (an early faller's error stays
small), hence the episode-length condition; the evaluation is the like-for-like figure. Writes
bench/results/sample_efficiency.json and .png; prints ``name.metric: value`` lines.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import yaml

from bcg_deploy.fileio import atomic_write_json
from bcg_deploy.training.config import TrainConfig, apply_overrides, ppo_defaults
from bcg_deploy.training.logger import read_metrics

RESULTS = Path(__file__).resolve().parent / "results"
PAPER_BCG_STEPS = 6.1e6
PAPER_PPO_STEPS = 4096 * 24 * 3000
METHODS = ("ppo", "shac", "bcg")
LABELS = {"ppo": "PPO (rsl_rl)", "shac": "plain SHAC", "bcg": "SHAC + BCG"}


def _train(method: str, args, budget_s: float, out: Path) -> Path:
    """Train ``method`` with the library defaults for ``budget_s`` seconds of iterations into ``out``."""
    cfg = ppo_defaults(TrainConfig()) if method == "ppo" else TrainConfig()
    sets = [f"motion.task={args.task}", f"sim.kappa={args.kappa}", f"runner.out_dir={out}", "runner.tensorboard=false"]
    apply_overrides(cfg, [*sets, f"bcg.enabled={method == 'bcg'}", *args.set])
    if method == "ppo":
        from bcg_deploy.training.ppo import PPOTrainer

        tr = PPOTrainer(cfg)
    else:
        from bcg_deploy.training.runner import Trainer

        tr = Trainer(cfg)
    t0 = time.perf_counter()
    try:
        while time.perf_counter() - t0 < budget_s and tr.iteration < cfg.runner.iterations:
            m = tr.step()
            print(
                f"train.{method}.iteration {m['iteration']}: reward {m['reward']:.3f} {m['tracking_error_cm']:.1f} cm"
            )
        tr.save()
    finally:
        tr.logger.close()
    return out


def _curve(run_dir: Path) -> dict:
    """Per-iteration env steps, wall-clock, reward and E_track of a run, with its identity."""
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    rows = read_metrics(run_dir)
    if not rows:
        raise SystemExit(f"error: {run_dir}: no metrics.jsonl rows (expected a bcgd train run directory)")
    algo = cfg.get("algo", "shac")
    per_iter = cfg["env"]["num_envs"] * (cfg["ppo"]["num_steps_per_env"] if algo == "ppo" else cfg["shac"]["horizon"])
    num = lambda k: np.array([float(r.get(k, math.nan)) for r in rows])  # noqa: E731
    return {
        "run_dir": str(run_dir),
        "algo": algo,
        "bcg": bool(cfg.get("bcg", {}).get("enabled", False)),
        "task": cfg["motion"]["csv"] or cfg["motion"]["task"],
        "kappa": float(cfg["sim"]["kappa"]),
        "num_envs": int(cfg["env"]["num_envs"]),
        "steps_per_iteration": per_iter,
        "iterations": len(rows),
        "steps": num("iteration") * per_iter,
        "wall_s": np.cumsum(num("time_s")),
        "reward": num("reward"),
        "e_track_cm": num("tracking_error_cm"),
        "episode_length": num("episode_length"),
    }


def _smooth(steps: np.ndarray, y: np.ndarray, window: float) -> np.ndarray:
    """Mean of the finite y over the last ``window`` env steps (at least the current iteration)."""
    out = np.full_like(y, np.nan)
    for i, s in enumerate(steps):
        seg = y[(steps > s - window) & (steps <= s)]
        seg = seg[np.isfinite(seg)]
        out[i] = seg.mean() if seg.size else np.nan
    return out


def _first(c: dict, key: str, target: dict, better_high: bool) -> dict | None:
    """The first iteration whose smoothed ``key`` reaches ``target[key]`` while its smoothed episode length
    is at least ``target["episode_length"]``: its env steps and wall-clock."""
    y = c[f"{key}_smooth"]
    ok = y >= target[key] if better_high else y <= target[key]
    hit = np.nonzero(ok & (c["episode_length_smooth"] >= target["episode_length"]))[0]
    if hit.size == 0:
        return None
    i = int(hit[0])
    return {"env_steps": float(c["steps"][i]), "wall_s": float(c["wall_s"][i]), "iteration": i + 1}


def _summary(c: dict) -> dict:
    return {
        k: c[k] for k in ("run_dir", "algo", "bcg", "task", "kappa", "num_envs", "steps_per_iteration", "iterations")
    } | {
        "env_steps": float(c["steps"][-1]),
        "wall_s": float(c["wall_s"][-1]),
        "final_reward": float(c["reward_smooth"][-1]),
        "final_e_track_cm": float(c["e_track_cm_smooth"][-1]),
        "final_episode_length": float(c["episode_length_smooth"][-1]),
    }


def _evaluate(run_dir: str, args) -> dict | None:
    """The run's run.pt in the training simulator (deterministic, seeded starts), or None without one."""
    from bcg_deploy.training.evaluate import evaluate_checkpoint

    path = Path(run_dir) / "run.pt"
    if not path.exists() or args.eval_envs <= 0:
        return None
    r = evaluate_checkpoint(path, num_envs=args.eval_envs, steps=args.eval_steps)
    keys = ("tracking_error_cm", "episode_length", "falls", "episodes_ended", "iteration", "num_envs", "steps")
    return {k: r[k] for k in keys}


def _plot(curves: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 2, figsize=(11, 10))
    for (row, key, unit), (col, x, xlabel) in (
        (r, c)
        for r in (
            (0, "reward", "reward per step"),
            (1, "e_track_cm", "E_track (cm)"),
            (2, "episode_length", "episode length (steps)"),
        )
        for c in ((0, "steps", "env steps"), (1, "wall_s", "wall-clock (s)"))
    ):
        ax = axes[row, col]
        for m, c in curves.items():
            xs = c[x] / (1e6 if x == "steps" else 1.0)
            (line,) = ax.plot(xs, c[key], alpha=0.25)
            ax.plot(xs, c[f"{key}_smooth"], color=line.get_color(), label=LABELS[m])
        ax.set_xlabel(xlabel.replace("env steps", "env steps (M)"))
        ax.set_ylabel(unit)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    task = next(iter(curves.values()))["task"]
    fig.suptitle(f"{task}, kappa {next(iter(curves.values()))['kappa']:g}: PPO vs plain SHAC vs SHAC + BCG")
    fig.tight_layout()
    from io import BytesIO

    from bcg_deploy.fileio import atomic_write_bytes

    buf = BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for m in METHODS:
        p.add_argument(f"--{m}", type=Path, default=None, help=f"{LABELS[m]} run directory")
    p.add_argument("--train", nargs="*", default=[], choices=METHODS, help="methods to train here (no directory)")
    p.add_argument("--budget-s", nargs="*", type=float, default=[], help="wall-clock budget per --train entry (s)")
    p.add_argument("--work-dir", type=Path, default=Path("runs/sample_efficiency"))
    p.add_argument("--task", default="dance")
    p.add_argument("--kappa", type=float, default=300.0)
    p.add_argument("--set", nargs="*", default=[], help="config overrides for the runs trained here")
    p.add_argument("--smooth-steps", type=float, default=2e5, help="smoothing window (env steps)")
    p.add_argument("--eval-envs", type=int, default=16, help="envs of the final evaluation (0: none)")
    p.add_argument("--eval-steps", type=int, default=250, help="control steps of the final evaluation")
    p.add_argument("--out", type=Path, default=RESULTS / "sample_efficiency.json")
    args = p.parse_args()
    if len(args.budget_s) != len(args.train):
        raise SystemExit("error: --budget-s: expected one budget (s) per --train method")
    dirs = {m: getattr(args, m) for m in METHODS}
    for m, budget in zip(args.train, args.budget_s, strict=True):
        if dirs[m] is not None:
            raise SystemExit(f"error: --train {m}: a run directory is given (--{m}); train or read, not both")
        dirs[m] = _train(m, args, budget, args.work_dir / m)
    curves = {m: _curve(d) for m, d in dirs.items() if d is not None}
    if "bcg" not in curves:
        raise SystemExit("error: --bcg: the SHAC + BCG run is the reference (a run directory or --train bcg)")
    ids = {(c["task"], c["kappa"]) for c in curves.values()}
    if len(ids) != 1:
        raise SystemExit(f"error: runs differ in motion or kappa: {sorted(ids)} (expected one motion, one kappa)")
    for c in curves.values():
        for k in ("reward", "e_track_cm", "episode_length"):
            c[f"{k}_smooth"] = _smooth(c["steps"], c[k], args.smooth_steps)
    ref = curves["bcg"]
    i_ref = int(np.searchsorted(ref["steps"], min(PAPER_BCG_STEPS, ref["steps"][-1]), side="right") - 1)
    target = {"env_steps": float(ref["steps"][i_ref]), "reward": float(ref["reward_smooth"][i_ref])}
    target["e_track_cm"] = float(ref["e_track_cm_smooth"][i_ref])
    target["episode_length"] = float(ref["episode_length_smooth"][i_ref])
    report = {"smooth_steps": args.smooth_steps, "reference_shac_bcg": target, "methods": {}}
    for m, c in curves.items():
        s = _summary(c)
        if m != "bcg":
            s["reaches_reference_reward"] = _first(c, "reward", target, better_high=True)
            s["reaches_reference_e_track"] = _first(c, "e_track_cm", target, better_high=False)
        s["evaluation"] = _evaluate(s["run_dir"], args)
        report["methods"][m] = s
    if "ppo" in curves:
        ppo = report["methods"]["ppo"]
        ppo["paper_env_steps"] = PAPER_PPO_STEPS
        ppo["fraction_of_paper_budget"] = ppo["env_steps"] / PAPER_PPO_STEPS
    atomic_write_json(args.out, report)
    _plot(curves, args.out.with_suffix(".png"))
    print(f"reference.shac_bcg.env_steps: {target['env_steps']:.0f}")
    print(f"reference.shac_bcg.reward: {target['reward']:.3f}")
    print(f"reference.shac_bcg.e_track_cm: {target['e_track_cm']:.1f}")
    print(f"reference.shac_bcg.episode_length: {target['episode_length']:.1f}")
    for m, s in report["methods"].items():
        print(f"{m}.env_steps: {s['env_steps']:.0f}  ({s['iterations']} iterations, {s['wall_s']:.0f} s)")
        print(f"{m}.final_reward: {s['final_reward']:.3f}")
        print(f"{m}.final_e_track_cm: {s['final_e_track_cm']:.1f}")
        print(f"{m}.final_episode_length: {s['final_episode_length']:.1f}")
        ev = s["evaluation"]
        if ev is not None:
            print(
                f"{m}.eval: E_track {ev['tracking_error_cm']:.1f} cm, episode length {ev['episode_length']:.1f}, "
                f"falls {ev['falls']} ({ev['num_envs']} envs x {ev['steps']} steps, iteration {ev['iteration']})"
            )
        for k in ("reaches_reference_reward", "reaches_reference_e_track"):
            if k in s:
                hit = s[k]
                print(f"{m}.{k}: " + ("not within its budget" if hit is None else f"{hit['env_steps']:.0f} env steps"))
    if "ppo" in report["methods"]:
        print(f"ppo.fraction_of_paper_budget: {report['methods']['ppo']['fraction_of_paper_budget']:.4f}")
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
