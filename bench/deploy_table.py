"""Deployable policies in MuJoCo: falls under everything the robot brings, and clean tracking, per model.

    python bench/deploy_table.py run=runs/run/run.pt jump=runs/jump/run.pt [--runs 20] [--clean-runs 5] \
        [--mjcf mjlab=PATH/g1.xml] [--out bench/results/deploy_table.json]

For each ``name=run.pt`` the checkpoint is exported with its own profile's defaults (``bcgd export run.pt``:
a deploy profile's stack files), then replayed by ``bcgd sim2sim`` (the library call, through the stack's
runtime behaviour that sim2sim models for that export) on our G1 model and on every ``--mjcf`` model:
- ``--clean-runs`` runs without injections (each from a seeded perturbation of the first frame, like
  training's resets): falls and E_track (global mean per-body position error, cm), against the paper's;
- ``--runs`` runs with ``--noise 1 --latency 0:20 --randomize --push`` (the training's sensor noise, 0-20 ms
  of action latency redrawn every control step, the training's domain-randomisation ranges, pushes every
  1-3 s): falls, when, and each fallen run's friction draw.
Prints one markdown table and writes JSON (every run's metrics and draws).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench_common import named_checkpoints

from bcg_deploy.errors import run_script
from bcg_deploy.export import ExportConfig, export_policy
from bcg_deploy.fileio import atomic_write_json
from bcg_deploy.sim2sim import Sim2SimConfig, run_sim2sim

PAPER_E_TRACK_CM = {"run": 34.1, "jump": 18.6, "fight": 13.5, "dance": 18.5}
FULL = {"noise_scale": 1.0, "latency_ms": (0.0, 20.0), "randomize": True, "push": True}


def _settings(runs: int, clean_runs: int, mjcf: str | None) -> dict[str, Sim2SimConfig]:
    return {
        "clean": Sim2SimConfig(runs=clean_runs, mjcf=mjcf),
        "full": Sim2SimConfig(runs=runs, mjcf=mjcf, **FULL),
    }


def _summary(report) -> dict:  # noqa: ANN001 - sim2sim.Report
    runs = report.runs
    fallen = [r for r in runs if r.fell]
    agg = report.aggregate
    return {
        "falls": len(fallen),
        "runs": len(runs),
        "fall_times_s": [r.fall_time_s for r in fallen],
        "fallen_friction": [(r.randomization or {}).get("friction") for r in fallen],
        "e_track_cm": agg["e_track_cm"],
        "foot_penetration_mm": agg["foot_penetration_mm"],
        "model": report.settings.get("model") or report.settings.get("mjcf") or "bcgd g1",
        "stack": report.settings.get("stack"),
    }


def _row(name: str, checkpoint: Path, args: argparse.Namespace, tmp: Path) -> dict:
    (tmp / name).mkdir()
    exported = export_policy(ExportConfig(checkpoint=checkpoint, output=tmp / name / "policy.onnx"))
    models = {"bcgd": None, **dict(m.split("=", 1) for m in args.mjcf)}
    out: dict = {"checkpoint": str(checkpoint), "onnx_profile": exported.profile, "models": {}}
    for model, mjcf in models.items():
        t0 = time.perf_counter()
        res = {
            k: _summary(run_sim2sim(exported.path, cfg))
            for k, cfg in _settings(args.runs, args.clean_runs, mjcf).items()
        }
        res["wall_s"] = time.perf_counter() - t0
        out["models"][model] = res
    return out


def _markdown(rows: dict) -> str:
    lines = [
        "| motion | model | clean: falls, E_track cm (paper) | noise + latency 0-20 ms + randomize + push: falls "
        "| fallen at friction |",
        "|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        for model, res in row["models"].items():
            c, f = res["clean"], res["full"]
            paper = PAPER_E_TRACK_CM.get(name.split("@")[0])
            e = c["e_track_cm"]
            lines.append(
                f"| {name} | {model} | {c['falls']}/{c['runs']}, {e['mean']:.1f} +/- {e['std']:.1f}"
                f"{f' ({paper})' if paper else ''} | {f['falls']}/{f['runs']} | "
                f"{', '.join(f'{x:.2f}' for x in f['fallen_friction'] if x is not None) or '-'} |"
            )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoints", nargs="+", help="NAME=path/to/run.pt")
    p.add_argument("--runs", type=int, default=20, help="runs with every injection")
    p.add_argument("--clean-runs", type=int, default=5, help="runs without injections")
    p.add_argument("--mjcf", action="append", default=[], help="NAME=PATH of another G1 model (repeatable)")
    p.add_argument("--out", type=Path, default=Path("bench/results/deploy_table.json"))
    args = p.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, ckpt in named_checkpoints(args.checkpoints):
            rows[name] = _row(name, ckpt, args, Path(tmp))
            print("\n".join(_markdown({name: rows[name]}).splitlines()[2:]), flush=True)
    print(_markdown(rows))
    atomic_write_json(args.out, {"settings": {"full": {**FULL, "latency_ms": list(FULL["latency_ms"])}}, "rows": rows})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    run_script(main)
