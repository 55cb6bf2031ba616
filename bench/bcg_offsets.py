"""The distribution of BCG's joint-space branch offsets, and how often a per-joint clamp would bind.

BCG (METHOD.md section 4, ``training/algorithms/bcg.py``) maps Cartesian foot perturbations (sigma_p 1 cm, sigma_v
2 cm/s) to joint offsets dq = J+ dp, dqd = J+ dv through the damped pseudoinverse of the foot's 3 x 6
positional Jacobian. An earlier version of the paper's parameter table lists |dq| <= 0.1 rad and
|dqd| <= 0.5 rad/s (``bcg.max_dq`` / ``bcg.max_dqd``, off by default). This bench records the offsets
of every bundle start (by wrapping ``BundledTransition._offsets``) at the paper's config (64 envs,
horizon 32, kappa 300, BCG defaults, no clamp) for each motion and policy case:

- ``untrained``: a fresh ``Trainer`` (seed ``--seed``), ``--iterations`` full SHAC + BCG iterations;
- ``trained`` (``--checkpoint TASK=PATH``): that checkpoint's networks (actor, normalisers, critics,
  discriminator) in a fresh ``Trainer`` on TASK's motion (the LAFAN1 window when a library is
  registered), ``--iterations`` rollout windows without updates (frozen policy);
- ``trained_own_clip``: the checkpoint resumed as stored (its own clip, env states, normalisers),
  ``--iterations`` rollout windows without updates.

Per case: bundle starts, perturbed legs, the fraction of perturbed |dq| entries > ``--max-dq`` and of
|dqd| > ``--max-dqd``, percentiles (50/90/99/max) of the max-over-joints |dq| and |dqd| of each branch,
per-joint maxima and which joint carries each branch's largest offset, the knee angle of the legs with
and without an offset above the bound (and their J's smallest singular value), and what the clamp
would do to the foot: the fraction of branches it would change, and over those |J clamp(dq)| / |J dq|
and the cosine between J clamp(dq) and J dq (J dq ~ the drawn dp). The ankle roll offsets are always 0
(the foot origin lies on that hinge's axis) and count in the entry fractions as the table's 6 joints.
JSON to bench/results/bcg_offsets.json; prints ``name.metric: value`` lines.

    python bench/bcg_offsets.py [--tasks run jump fight dance] [--iterations 2]
        [--checkpoint dance=runs/s5/dance_bcg_1200/run.pt]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from bench_common import make_trainer, write_report

from bcg_deploy.training import checkpoint as ckpt_io
from bcg_deploy.training.algorithms.bcg import BundledTransition, foot_jacobian
from bcg_deploy.training.run_files import resume_config
from bcg_deploy.training.runner import Trainer

RESULTS = Path(__file__).resolve().parent / "results"
PCTS = (50, 90, 99, 100)


class OffsetRecorder:
    """Wraps a ``BundledTransition``'s ``_offsets``: keeps, per bundle start, the start states' leg
    configuration, the triggering feet, the foot Jacobians and the offsets (float64, on the CPU)."""

    def __init__(self, tr: BundledTransition) -> None:
        self.tr = tr
        self.records: list[dict[str, np.ndarray]] = []
        self._orig = tr._offsets
        tr._offsets = self._wrapped  # instance attribute: only this transition is wrapped

    def _wrapped(self, q: torch.Tensor, feet: torch.Tensor, per_foot: tuple[int, ...]):  # noqa: ANN202
        dq, dqd = self._orig(q, feet, per_foot)
        tr = self.tr
        jac = torch.stack(
            [foot_jacobian(tr.kin, q, c, k) for c, k in zip(tr.chains, tr._chain_consts, strict=True)], dim=1
        )
        self.records.append(
            {
                "q": q.detach().double().cpu().numpy(),
                "feet": feet.detach().cpu().numpy(),
                "jac": jac.cpu().numpy(),  # [n, F, 3, 6]
                "dq": dq.cpu().numpy(),
                "dqd": dqd.cpu().numpy(),
            }
        )
        return dq, dqd


def _pcts(x: np.ndarray) -> dict[str, float]:
    if x.size == 0:
        return {("max" if p == 100 else f"p{p}"): float("nan") for p in PCTS}
    return {("max" if p == 100 else f"p{p}"): float(np.percentile(x, p)) for p in PCTS}


def summarize(
    records: list[dict], tr: BundledTransition, joint_names: tuple[str, ...], max_dq: float, max_dqd: float
) -> dict:
    """The statistics of the recorded offsets (see the module docstring)."""
    chains = tr.chains
    qpos = [np.asarray(c.qpos) for c in chains]
    dof = [np.asarray(c.dof) for c in chains]
    starts = sum(r["dq"].shape[0] for r in records)
    knee_cols = [next(j for j in c.qpos if "knee" in joint_names[j - 7]) for c in chains]
    # per (start, perturbed leg): [B, 6] blocks of offsets; per (start, branch): max over the perturbed joints
    leg_dq, leg_dqd, leg_knee, leg_jac, leg_joint = [], [], [], [], []
    branch_dq, branch_dqd, branch_argmax = [], [], []
    for r in records:
        for i in range(r["dq"].shape[0]):
            cols_q = np.concatenate([qpos[f] for f in range(len(chains)) if r["feet"][i, f]])
            cols_v = np.concatenate([dof[f] for f in range(len(chains)) if r["feet"][i, f]])
            a_q, a_v = np.abs(r["dq"][i][:, cols_q]), np.abs(r["dqd"][i][:, cols_v])
            branch_dq.append(a_q.max(1))
            branch_dqd.append(a_v.max(1))
            branch_argmax.append(cols_q[a_q.argmax(1)] - 7)
            for f in range(len(chains)):
                if r["feet"][i, f]:
                    leg_dq.append(r["dq"][i][:, qpos[f]])
                    leg_dqd.append(r["dqd"][i][:, dof[f]])
                    leg_knee.append(r["q"][i, knee_cols[f]])
                    leg_jac.append(r["jac"][i, f])
                    leg_joint.append(qpos[f] - 7)
    if not leg_dq:
        return {"bundle_starts": starts, "perturbed_legs": 0}
    dq_l, dqd_l = np.stack(leg_dq), np.stack(leg_dqd)  # [L, B, 6]
    jac_l, knee = np.stack(leg_jac), np.asarray(leg_knee)  # [L, 3, 6], [L]
    joints = np.stack(leg_joint)  # [L, 6] joint indices
    b_dq, b_dqd, b_arg = np.concatenate(branch_dq), np.concatenate(branch_dqd), np.concatenate(branch_argmax)
    # the Cartesian displacement the clamp keeps, per (leg, branch) it changes
    cart = np.einsum("lij,lbj->lbi", jac_l, dq_l)
    cart_c = np.einsum("lij,lbj->lbi", jac_l, np.clip(dq_l, -max_dq, max_dq))
    bind_q = (np.abs(dq_l) > max_dq).any(-1)
    kept_q = np.linalg.norm(cart_c, axis=-1)[bind_q] / np.linalg.norm(cart, axis=-1)[bind_q]
    cos_q = (cart_c * cart).sum(-1)[bind_q] / np.maximum(
        np.linalg.norm(cart_c, axis=-1) * np.linalg.norm(cart, axis=-1), 1e-300
    )[bind_q]
    cart_v = np.einsum("lij,lbj->lbi", jac_l, dqd_l)
    cart_vc = np.einsum("lij,lbj->lbi", jac_l, np.clip(dqd_l, -max_dqd, max_dqd))
    bind_v = (np.abs(dqd_l) > max_dqd).any(-1)
    kept_v = np.linalg.norm(cart_vc, axis=-1)[bind_v] / np.linalg.norm(cart_v, axis=-1)[bind_v]
    leg_over = bind_q.any(-1)
    sig = np.linalg.svd(jac_l, compute_uv=False)[:, -1]  # smallest singular value of J, m/rad
    names = np.asarray(joint_names)
    arg_names, arg_counts = np.unique(names[b_arg], return_counts=True)
    order = np.argsort(-arg_counts)
    per_joint = {}
    flat_j, flat_q, flat_v = joints[:, None, :].repeat(dq_l.shape[1], 1), np.abs(dq_l), np.abs(dqd_l)
    for j in np.unique(joints):
        m = flat_j == j
        per_joint[str(names[j])] = {
            "dq_p99": float(np.percentile(flat_q[m], 99)),
            "dq_max": float(flat_q[m].max()),
            "dqd_p99": float(np.percentile(flat_v[m], 99)),
            "dqd_max": float(flat_v[m].max()),
            "frac_dq_over": float((flat_q[m] > max_dq).mean()),
        }
    big = names[joints.reshape(-1)[np.abs(dq_l).max(1).reshape(-1).argmax()]]
    return {
        "bundle_starts": starts,
        "perturbed_legs": int(dq_l.shape[0]),
        "branches": int(b_dq.size),
        "frac_dq_entries_over": float((np.abs(dq_l) > max_dq).mean()),
        "frac_dqd_entries_over": float((np.abs(dqd_l) > max_dqd).mean()),
        "frac_branches_dq_clamped": float(bind_q.mean()),
        "frac_branches_dqd_clamped": float(bind_v.mean()),
        "frac_legs_any_branch_dq_clamped": float(leg_over.mean()),
        "branch_max_dq": _pcts(b_dq),
        "branch_max_dqd": _pcts(b_dqd),
        "largest_dq_joint": str(big),
        "branch_argmax_joint_share": {str(arg_names[k]): float(arg_counts[k] / b_arg.size) for k in order},
        "per_joint": per_joint,
        "knee_angle_legs_over": _pcts(knee[leg_over]),
        "knee_angle_legs_within": _pcts(knee[~leg_over]),
        "sigma_min_legs_over": _pcts(sig[leg_over]),
        "sigma_min_legs_within": _pcts(sig[~leg_over]),
        "clamp_dq_cartesian_ratio": _pcts(kept_q),
        "clamp_dq_cartesian_cosine": _pcts(cos_q),
        "clamp_dqd_cartesian_ratio": _pcts(kept_v),
    }


def _load_networks(tr: Trainer, ck: dict) -> None:
    """A checkpoint's networks and normalisers into a fresh ``Trainer`` (its env, motion and RNG stay)."""
    s = tr.shac
    s.actor.load_state_dict(ck["actor"])
    s.obs_normalizer.load_state_dict(ck["obs_normalizer"])
    s.critic.load_member_state_dicts(ck["critics"])
    s.target_critic.load_member_state_dicts(ck["target_critics"])
    s.ret_normalizer.load_state_dict(ck["shac_state"]["ret_normalizer"])
    tr.add.disc.load_state_dict(ck["discriminator"])
    tr.add.norm.load_state_dict(ck["add_normalizer"])


def run_case(args, task: str, case: str, ckpt: Path | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        if case == "untrained":
            targs = argparse.Namespace(**{**vars(args), "task": task})
            tr = make_trainer(targs, tmp, kappa=args.kappa, iterations=max(args.iterations, 2), bundle=True)
        else:  # the checkpoint's own config (BCG without a clamp), on TASK's motion or its own clip
            cfg = resume_config(ckpt)
            cfg.runner.out_dir, cfg.runner.tensorboard = tmp, False
            cfg.bcg.enabled, cfg.bcg.max_dq, cfg.bcg.max_dqd = True, None, None
            if case == "trained":
                cfg.motion.task, cfg.motion.csv = task, None
                tr = Trainer(cfg)
                _load_networks(tr, ckpt_io.load_checkpoint(ckpt, tr.robot))
            else:
                tr = Trainer(cfg, resume=ckpt)
        if not isinstance(tr.env.transition, BundledTransition):
            raise SystemExit(f"{task}/{case}: the run's transition is not BCG")
        rec = OffsetRecorder(tr.env.transition)
        ckpt_iteration = int(ckpt_io.load_checkpoint(ckpt)["iteration"]) if ckpt else None
        t0 = time.perf_counter()
        metrics = []
        for _ in range(args.iterations):
            if case == "untrained":
                m = tr.step()
            else:
                roll = tr.shac.rollout(tr.env)  # frozen policy: the window's states, no update
                m = dict(roll.stats.get("transition", {}))
                del roll
            metrics.append({k: float(m.get(k, 0.0)) for k in ("bcg_starts", "episode_length", "falls")})
        secs = time.perf_counter() - t0
        out = summarize(rec.records, tr.env.transition, tr.robot.joint_names, args.max_dq, args.max_dqd)
        src = tr.motion.source
        out.update(
            {
                "task": task,
                "case": case,
                "checkpoint": str(ckpt) if ckpt else None,
                "checkpoint_iteration": ckpt_iteration,
                "motion": {"name": tr.motion.name, "source": {k: str(v) for k, v in src.items()}},
                "windows": args.iterations,
                "bcg_starts_per_window": [m["bcg_starts"] for m in metrics],
                "seconds": secs,
            }
        )
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["run", "jump", "fight", "dance"])
    ap.add_argument("--envs", type=int, default=64)
    ap.add_argument("--horizon", type=int, default=32)
    ap.add_argument("--kappa", type=float, default=300.0)
    ap.add_argument("--iterations", type=int, default=2, help="SHAC iterations / rollout windows per case")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-dq", type=float, default=0.1, help="the bound counted against, rad (paper's early table)")
    ap.add_argument("--max-dqd", type=float, default=0.5, help="the bound counted against, rad/s")
    ap.add_argument(
        "--checkpoint",
        action="append",
        default=[],
        metavar="TASK=PATH",
        help="a trained run.pt for TASK (repeatable): adds the trained and trained_own_clip cases",
    )
    ap.add_argument("--no-own-clip", action="store_true", help="skip the trained_own_clip case")
    ap.add_argument("--untrained", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", nargs="*", default=[], help="extra config overrides a.b=v")
    ap.add_argument("--out", type=Path, default=RESULTS / "bcg_offsets.json")
    args = ap.parse_args()
    ckpts: dict[str, Path] = {}
    for item in args.checkpoint:
        task, sep, path = item.partition("=")
        if not sep or not Path(path).is_file():
            ap.error(f"--checkpoint {item!r}: expected TASK=PATH of an existing run.pt")
        ckpts[task] = Path(path)
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    results = []
    for task in args.tasks:
        cases = (["untrained"] if args.untrained else []) + (["trained"] if task in ckpts else [])
        if task in ckpts and not args.no_own_clip:
            cases.append("trained_own_clip")
        for case in cases:
            r = run_case(args, task, case, ckpts.get(task))
            results.append(r)
            _print(r)
    write_report(
        args.out,
        "BCG joint-space branch offsets per bundle start (no clamp), against |dq| <= max_dq and |dqd| <= max_dqd",
        args,
        results,
        time.perf_counter() - t0,
    )
    print(f"wrote {args.out}")


def _print(r: dict) -> None:
    k = f"{r['task']}.{r['case']}"
    src = r["motion"]["source"]
    print(f"{k}.motion: {r['motion']['name']} ({src.get('kind', '?')} {src.get('file', '')} {src.get('start_s', '')})")
    for key in ("bundle_starts", "perturbed_legs", "branches"):
        print(f"{k}.{key}: {r.get(key, 0)}")
    if not r.get("perturbed_legs"):
        return
    for key in (
        "frac_dq_entries_over",
        "frac_dqd_entries_over",
        "frac_branches_dq_clamped",
        "frac_branches_dqd_clamped",
        "frac_legs_any_branch_dq_clamped",
    ):
        print(f"{k}.{key}: {r[key]:.4f}")
    for key in (
        "branch_max_dq",
        "branch_max_dqd",
        "clamp_dq_cartesian_ratio",
        "clamp_dq_cartesian_cosine",
        "knee_angle_legs_over",
        "knee_angle_legs_within",
        "sigma_min_legs_over",
        "sigma_min_legs_within",
    ):
        print(f"{k}.{key}: " + "  ".join(f"{p} {v:.4g}" for p, v in r[key].items()))
    top = next(iter(r["branch_argmax_joint_share"].items()))
    print(f"{k}.largest_dq_joint: {r['largest_dq_joint']}  (most frequent branch argmax: {top[0]} {top[1]:.2f})")


if __name__ == "__main__":
    main()
