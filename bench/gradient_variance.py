"""Policy-gradient variance of plain SHAC vs SHAC + BCG (the paper's Fig. 3 quantity).

For each contact stiffness kappa: one policy (the SHAC actor, critics, discriminator and normalisers of
a ``Trainer`` built with ``--seed``; optionally after ``--warmup`` plain SHAC iterations at that kappa)
is frozen, and ``--samples`` actor-loss gradients of one SHAC window are drawn with each estimator.
Sample r uses seed ``seed + 1000 + r`` for both estimators (same reset phases and noise, same
exploration and observation noise; the BCG perturbations come from the transition's own generator,
also seeded with it), so the two estimators see the same windows. Reported per kappa and estimator:
the summed sample variance sum_j Var_r(g_j) over all actor parameters (unbiased), the mean gradient
norm, the median / max per-sample norm, bundle counts; and the ratio BCG / plain with a paired
bootstrap 95 % interval (resampling the windows). Writes JSON to bench/results/gradient_variance.json
and prints ``name.metric: value`` lines.

With ``--local SIGMA`` every sample runs the same window (one seed: same resets, noise and BCG
perturbations) from an initial state whose pelvis heights differ by N(0, SIGMA^2): the variance is then
the gradient's sensitivity to a tiny change of state, the stiffness that bundling is meant to average out
(METHOD.md section 1), without the spread between windows.

With ``--clamp MAX_DQ MAX_DQD`` a third estimator, SHAC + BCG with the joint-space clamp of the branch
offsets (``bcg.max_dq`` / ``bcg.max_dqd``), runs every window with the same seeds (and the same
perturbation draws) as the unclamped BCG; its variance ratio to BCG gets its own paired bootstrap.

    python bench/gradient_variance.py [--kappas 50 300] [--envs 16] [--horizon 32] [--samples 32]
        [--clamp 0.1 0.5]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from bench_common import make_trainer, write_report

from bcg_deploy.training.algorithms.bcg import BundledTransition
from bcg_deploy.training.env.imitation import SimTransition, TransitionOut
from bcg_deploy.training.runner import Trainer

RESULTS = Path(__file__).resolve().parent / "results"


class NoPhysicsTransition(SimTransition):
    """Diagnostic: the plain step with its inputs and outputs detached, so the gradient keeps only the
    terms that do not pass through the simulator (e.g. the action-rate penalty)."""

    def __call__(self, q: torch.Tensor, qd: torch.Tensor, q_target: torch.Tensor) -> TransitionOut:
        with torch.no_grad():
            s = self.sim.step(q, qd, q_target)
        return TransitionOut(s.q, s.qd, s.foot_force)


def _sample_gradient(tr: Trainer, transition, seed: int, dz: np.ndarray | None = None) -> tuple[np.ndarray, dict]:
    """The actor-loss gradient of one SHAC window from fresh resets drawn with ``seed``; ``dz`` [E] (m), if
    given, is added to every env's initial pelvis height."""
    env, shac = tr.env, tr.shac
    env.transition = transition
    if isinstance(transition, BundledTransition):
        transition.generator.manual_seed(seed)
    torch.manual_seed(seed)
    env.reset()
    if dz is not None:
        q = env.q.clone()
        q[:, 2] += torch.as_tensor(dz, dtype=q.dtype, device=q.device)
        env.q = q
    roll = shac.rollout(env)
    shac.actor.zero_grad(set_to_none=True)
    roll.actor_loss.backward()
    g = torch.cat([p.grad.flatten() for p in shac.actor.parameters()]).double()
    stats = dict(roll.stats.get("transition", {}))
    stats["loss"] = float(roll.actor_loss.detach())
    stats["finite"] = bool(torch.isfinite(g).all())
    return torch.nan_to_num(g).numpy(), stats


def summed_variance(g: np.ndarray) -> float:
    """sum_j Var_r(g[r, j]) (unbiased) of gradient samples g [R, P]."""
    return float(g.var(axis=0, ddof=1).sum())


def bootstrap_ratio(a: np.ndarray, b: np.ndarray, n: int, seed: int) -> tuple[float, float, np.ndarray]:
    """Paired bootstrap of summed_variance(b) / summed_variance(a) (same resampled windows); 95 % interval."""
    rng = np.random.default_rng(seed)
    r = a.shape[0]
    out = np.empty(n)
    for i in range(n):
        idx = rng.integers(0, r, r)
        den = summed_variance(a[idx])
        out[i] = summed_variance(b[idx]) / den if den > 0 else np.nan  # a resample of one repeated window
    lo, hi = np.nanpercentile(out, [2.5, 97.5])
    return float(lo), float(hi), out


def _estimator_top_ratio(gp: np.ndarray, gb: np.ndarray) -> float:
    """The variance ratio after dropping, from each estimator, its sample farthest from its mean."""

    def drop(g: np.ndarray) -> np.ndarray:
        return np.delete(g, int(((g - g.mean(0)) ** 2).sum(1).argmax()), axis=0)

    return summed_variance(drop(gb)) / summed_variance(drop(gp))


def _estimator_summary(g: np.ndarray, stats: list[dict], seconds: float, names: list[tuple[str, int]]) -> dict:
    norms = np.linalg.norm(g, axis=1)
    var = g.var(axis=0, ddof=1)
    bounds = np.cumsum([0] + [n for _, n in names])
    dev = ((g - g.mean(0)) ** 2).sum(1)
    s = {
        "summed_variance": float(var.sum()),
        "summed_variance_without_top_sample": summed_variance(np.delete(g, int(dev.argmax()), axis=0)),
        "summed_variance_by_tensor": {
            name: float(var[a:b].sum()) for (name, _), a, b in zip(names, bounds[:-1], bounds[1:], strict=True)
        },
        "mean_gradient_norm": float(np.linalg.norm(g.mean(axis=0))),
        "sample_norm_median": float(np.median(norms)),
        "sample_norm_max": float(norms.max()),
        "share_of_variance_top_sample": float(
            ((g - g.mean(0)) ** 2).sum(1).max() / max(((g - g.mean(0)) ** 2).sum(), 1e-300)
        ),
        "non_finite_samples": int(sum(not x["finite"] for x in stats)),
        "mean_loss": float(np.mean([x["loss"] for x in stats])),
        "seconds_per_sample": seconds / len(stats),
    }
    for key in ("bcg_starts", "bcg_bundled_envs", "bcg_sim_rows"):
        if key in stats[0]:
            s[f"{key}_per_window"] = float(np.mean([x[key] for x in stats]))
    return s


def run_kappa(args, kappa: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        tr = make_trainer(args, tmp, kappa=kappa, iterations=max(args.warmup, 1), bundle=False)
        t0 = time.perf_counter()
        for _ in range(args.warmup):
            tr.step()
        warm = time.perf_counter() - t0
        if args.std is not None:
            with torch.no_grad():
                tr.shac.actor.log_std.fill_(float(np.log(args.std)))
        names = [(n, p.numel()) for n, p in tr.shac.actor.named_parameters()]
        plain = SimTransition(tr.env.sim)
        bundled = BundledTransition(tr.cfg.bcg, tr.env)
        estimators = {"plain": plain, "bcg": bundled}
        if args.clamp:
            clamped = dataclasses.replace(tr.cfg.bcg, max_dq=args.clamp[0], max_dqd=args.clamp[1])
            estimators["bcg_clamped"] = BundledTransition(clamped, tr.env)
        if args.no_physics:
            estimators["no_physics"] = NoPhysicsTransition(tr.env.sim)
        grads: dict[str, list] = {n: [] for n in estimators}
        stats: dict[str, list] = {n: [] for n in estimators}
        secs = {n: 0.0 for n in estimators}
        for r in range(args.samples):
            seed = args.seed + 1000 + (0 if args.local else r)
            dz = None
            if args.local:
                dz = np.random.default_rng(args.seed + 5000 + r).normal(0.0, args.local, tr.env.num_envs)
            for name, transition in estimators.items():
                t = time.perf_counter()
                g, st = _sample_gradient(tr, transition, seed, dz)
                secs[name] += time.perf_counter() - t
                grads[name].append(g)
                stats[name].append(st)
        gp, gb = np.stack(grads["plain"]), np.stack(grads["bcg"])
        lo, hi, _ = bootstrap_ratio(gp, gb, args.bootstrap, args.seed)
        cos = float(gp.mean(0) @ gb.mean(0) / max(np.linalg.norm(gp.mean(0)) * np.linalg.norm(gb.mean(0)), 1e-300))
        extra = {}
        if args.clamp:
            gc = np.stack(grads["bcg_clamped"])
            clo, chi, _ = bootstrap_ratio(gb, gc, args.bootstrap, args.seed)
            extra["bcg_clamped"] = _estimator_summary(gc, stats["bcg_clamped"], secs["bcg_clamped"], names)
            extra["ratio_clamped_over_bcg"] = summed_variance(gc) / summed_variance(gb)
            extra["ratio_clamped_over_bcg_ci95"] = [clo, chi]
            extra["ratio_clamped_over_plain"] = summed_variance(gc) / summed_variance(gp)
            extra["paired_cosine_median_clamped_bcg"] = float(
                np.median(
                    (gc * gb).sum(1) / np.maximum(np.linalg.norm(gc, axis=1) * np.linalg.norm(gb, axis=1), 1e-300)
                )
            )
        if args.no_physics:
            gn = np.stack(grads["no_physics"])
            extra["no_physics"] = _estimator_summary(gn, stats["no_physics"], secs["no_physics"], names)
            extra["no_physics_over_plain"] = summed_variance(gn) / summed_variance(gp)
        return {
            "kappa": kappa,
            "warmup_iterations": args.warmup,
            "warmup_seconds": warm,
            "num_parameters": int(gp.shape[1]),
            "plain": _estimator_summary(gp, stats["plain"], secs["plain"], names),
            "bcg": _estimator_summary(gb, stats["bcg"], secs["bcg"], names),
            "ratio_bcg_over_plain": summed_variance(gb) / summed_variance(gp),
            "ratio_ci95": [lo, hi],
            "ratio_without_each_top_sample": _estimator_top_ratio(gp, gb),
            "log10_ratio_per_sample_sq_norm_median": float(
                np.median(np.log10(((gb - gb.mean(0)) ** 2).sum(1) / ((gp - gp.mean(0)) ** 2).sum(1)))
            ),
            "cosine_mean_gradients": cos,
            # How much bundling changes each window's gradient, against the spread of the plain gradient over
            # windows: a ratio far below 1 means BCG cannot move the variance much either way.
            "paired_change_over_plain_variance": float(((gb - gp) ** 2).sum(1).mean() / summed_variance(gp)),
            "paired_cosine_median": float(
                np.median(
                    (gb * gp).sum(1) / np.maximum(np.linalg.norm(gb, axis=1) * np.linalg.norm(gp, axis=1), 1e-300)
                )
            ),
            **extra,
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kappas", type=float, nargs="+", default=[50.0, 300.0])
    ap.add_argument("--task", default="dance")
    ap.add_argument("--envs", type=int, default=16)
    ap.add_argument("--horizon", type=int, default=32)
    ap.add_argument("--samples", type=int, default=32, help="gradient samples per estimator (at least 4)")
    ap.add_argument("--warmup", type=int, default=0, help="plain SHAC iterations before freezing the policy")
    ap.add_argument("--std", type=float, default=None, help="set the policy's action std before measuring")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-physics", action="store_true", help="also the estimator with the simulator gradient cut")
    ap.add_argument(
        "--local",
        type=float,
        default=None,
        help="one window (same resets and noise) for every sample, which differ only by N(0, LOCAL^2) m added to "
        "each env's initial pelvis height: the gradient's sensitivity to the state (the stiffness BCG targets)",
    )
    ap.add_argument(
        "--clamp",
        type=float,
        nargs=2,
        default=None,
        metavar=("MAX_DQ", "MAX_DQD"),
        help="also SHAC + BCG with the joint-space clamp bcg.max_dq / bcg.max_dqd (rad, rad/s; the paper's early "
        "table: 0.1 0.5), paired with the unclamped BCG by seed",
    )
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", nargs="*", default=[], help="extra config overrides a.b=v (e.g. bcg.tau=300)")
    ap.add_argument("--out", type=Path, default=RESULTS / "gradient_variance.json")
    args = ap.parse_args()
    if args.samples < 4:
        ap.error(f"--samples must be at least 4 (a variance and its bootstrap interval), got {args.samples}")
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    results = [run_kappa(args, k) for k in args.kappas]
    write_report(
        args.out,
        "summed sample variance of the SHAC actor-loss gradient (all actor parameters), "
        "plain SHAC vs SHAC + BCG, same frozen policy and per-sample seeds",
        args,
        results,
        time.perf_counter() - t0,
    )
    for r in results:
        k = f"kappa{r['kappa']:g}"
        for name in ("plain", "bcg"):
            for key in ("summed_variance", "mean_gradient_norm", "sample_norm_median", "sample_norm_max"):
                print(f"{k}.{name}.{key}: {r[name][key]:.6g}")
        print(f"{k}.ratio_bcg_over_plain: {r['ratio_bcg_over_plain']:.4g}  ci95 {r['ratio_ci95'][0]:.4g} .. "
              f"{r['ratio_ci95'][1]:.4g}")  # fmt: skip
        print(f"{k}.bcg.bundles_per_window: {r['bcg'].get('bcg_starts_per_window', 0):.1f}")
        print(f"{k}.paired_change_over_plain_variance: {r['paired_change_over_plain_variance']:.4g}")
        print(f"{k}.paired_cosine_median: {r['paired_cosine_median']:.4g}")
        if "bcg_clamped" in r:
            c = r["bcg_clamped"]
            for key in ("summed_variance", "mean_gradient_norm", "sample_norm_median", "sample_norm_max"):
                print(f"{k}.bcg_clamped.{key}: {c[key]:.6g}")
            lo, hi = r["ratio_clamped_over_bcg_ci95"]
            print(f"{k}.ratio_clamped_over_bcg: {r['ratio_clamped_over_bcg']:.4g}  ci95 {lo:.4g} .. {hi:.4g}")
            print(f"{k}.ratio_clamped_over_plain: {r['ratio_clamped_over_plain']:.4g}")
            print(f"{k}.paired_cosine_median_clamped_bcg: {r['paired_cosine_median_clamped_bcg']:.4g}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
