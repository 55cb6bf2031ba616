"""The paper's results table (METHOD.md section 7) for our own policies: falls, E_track and Delta d per motion.

    python bench/results_table.py run=runs/run/run.pt jump=runs/jump/run.pt fight=runs/fight/run.pt \
        dance=runs/dance/run.pt [--runs 5] [--noise 1.0] [--out bench/results/results_table.json]

For each ``motion=run.pt`` (any subset of the four, or other names):
- the checkpoint is exported to a temporary ONNX by the real exporter (its parity check included);
- MuJoCo (``bcgd sim2sim``, the library call): ``--runs`` seeded runs without options ("clean": each from
  an initial state perturbed like training's resets) and ``--runs`` seeded runs with sensor noise at
  ``--noise`` x the training levels; falls (root below 0.3 m), E_track (global mean per-body position
  error, cm) and mean foot penetration while in contact (mm);
- the training simulator (``training.evaluate.evaluate_policy``): the same deterministic actor with
  nominal physics (no randomisation, pushes or noise), ``--eval-envs`` envs from seeded start phases,
  for the whole clip: falls (and episodes ended by ``env.max_tracking_error``, if the run used it),
  E_track and foot penetration;
- Delta d = penetration in the training simulator minus in MuJoCo (the clean runs' mean), as the paper
  defines it.
Prints one markdown table with the paper's figures beside ours and writes JSON.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch
from bench_common import named_checkpoints

from bcg_deploy.errors import run_script
from bcg_deploy.export import ExportConfig, export_policy
from bcg_deploy.fileio import atomic_write_json
from bcg_deploy.sim2sim import Sim2SimConfig, run_sim2sim
from bcg_deploy.training.evaluate import evaluate_checkpoint

# METHOD.md section 7: kappa 300, SHAC + BCG
PAPER = {
    "falls": "0/5",
    "e_track_cm": {"run": 34.1, "jump": 18.6, "fight": 13.5, "dance": 18.5},
    "delta_d_mm": (2.9, 3.4),
}


def _mujoco(onnx_path: Path, runs: int, noise: float) -> dict:
    """sim2sim's aggregate (falls, mean fall time, per-metric mean/std) without options and with noise,
    ``runs`` seeded runs each."""
    settings = {"clean": Sim2SimConfig(runs=runs), "noise": Sim2SimConfig(runs=runs, noise_scale=noise)}
    return {name: run_sim2sim(onnx_path, cfg).aggregate for name, cfg in settings.items()}


def _row(motion: str, checkpoint: Path, args: argparse.Namespace, tmp: Path) -> dict:
    t0 = time.perf_counter()
    exported = export_policy(ExportConfig(checkpoint=checkpoint, output=tmp / f"{motion}.onnx"))
    mj = _mujoco(exported.path, args.runs, args.noise)
    ev = evaluate_checkpoint(checkpoint, num_envs=args.eval_envs, steps=args.eval_steps, nominal=True)
    pen_train, pen_mj = ev["foot_penetration_mm"], mj["clean"]["foot_penetration_mm"]["mean"]
    return {
        "checkpoint": str(checkpoint),
        "iteration": ev["iteration"],
        "parity_max_abs_err": exported.parity["max_abs_err"],
        "mujoco": mj,
        "training_sim": ev,
        "delta_d_mm": None if pen_train is None or pen_mj is None else pen_train - pen_mj,
        "wall_s": time.perf_counter() - t0,
    }


def _fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def _pm(agg: dict) -> str:
    """E_track mean +/- std of a sim2sim aggregate."""
    return f"{_fmt(agg['e_track_cm']['mean'])} +/- {_fmt(agg['e_track_cm']['std'])}"


def _markdown(rows: dict, noise: float) -> str:
    lines = [
        f"| motion | iteration | MuJoCo falls (clean) | E_track clean (cm) | falls, noise {noise:g} | "
        f"E_track noise (cm) | training-sim falls | Delta d (mm) | paper E_track (cm) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for motion, r in rows.items():
        c, n, t = r["mujoco"]["clean"], r["mujoco"]["noise"], r["training_sim"]
        fell = f"{c['falls']}/{c['runs']}" + (f" (mean {c['mean_fall_time_s']:.1f} s)" if c["falls"] else "")
        lines.append(
            f"| {motion} | {r['iteration']} | {fell} | {_pm(c)} | {n['falls']}/{n['runs']} | {_pm(n)} | "
            f"{t['falls']} ({t['strayed']} strayed) in {t['num_envs']} envs | {_fmt(r['delta_d_mm'], '.2f')} | "
            f"{_fmt(PAPER['e_track_cm'].get(motion))} |"
        )
    lo, hi = PAPER["delta_d_mm"]
    lines.append(f"\nPaper, kappa 300: {PAPER['falls']} falls on all four motions, Delta d {lo} - {hi} mm.")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoints", nargs="+", help="motion=path/to/run.pt")
    ap.add_argument("--runs", type=int, default=5, help="seeded MuJoCo runs per setting (clean, noise)")
    ap.add_argument("--noise", type=float, default=1.0, help="sensor noise, x the training levels")
    ap.add_argument("--eval-envs", type=int, default=8, help="training-simulator envs")
    ap.add_argument("--eval-steps", type=int, default=750, help="training-simulator control steps (750: 15 s)")
    ap.add_argument("--out", type=Path, default=Path("bench/results/results_table.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    pairs = named_checkpoints(args.checkpoints)  # every path before the first export
    rows = {}
    with tempfile.TemporaryDirectory(prefix="bcgd_results_") as tmp:
        for motion, path in pairs:
            rows[motion] = _row(motion, path, args, Path(tmp))
            print(f"{motion}: done in {rows[motion]['wall_s']:.0f} s", flush=True)
    doc = {
        "protocol": {"runs": args.runs, "noise_scale": args.noise, "eval_envs": args.eval_envs},
        "paper": PAPER,
        "rows": rows,
        "loadavg_after": os.getloadavg(),
    }
    print(_markdown(rows, args.noise))
    atomic_write_json(args.out, doc)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    run_script(main)
