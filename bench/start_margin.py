"""How far a policy's first-frame start can be tilted or shifted before it falls, in MuJoCo and in the
training simulator: the margin behind the falls ``start_check.py`` counts.

One axis of sim2sim's initial-state perturbation (``roll``, ``pitch``, ``yaw`` in rad, world frame; ``x``,
``y``, ``z`` in m) is swept over ``--values`` (default: -2 to +2 times the reset noise's amplitude on that
axis, read from the ONNX metadata like ``bcgd sim2sim``), on top of the unperturbed start, or with ``--run
R`` on top of sim2sim's seeded run R (its other offsets kept). Each start runs over the whole clip in MuJoCo
(``bcgd sim2sim``'s runner, no options) and, from exactly the same state, in the training simulator
(``training.evaluate.first_episodes``: nominal parameters, deterministic actions, no stray termination).
Printed per value: whether and when each falls; per side, the smallest |value| that falls in each
simulator. Writes ``bench/results/start_margin.json``.

    python bench/start_margin.py fight=runs/s17/fight_3000/run.pt --axis roll
    python bench/start_margin.py fight=runs/s17/fight_3000/run.pt --axis roll --run 3 --values 0.04,0.05,0.06
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import torch
from bench_common import named_checkpoints
from start_check import outcome_text, start_noise

from bcg_deploy.errors import BcgdError, run_script
from bcg_deploy.export import ExportConfig, export_policy
from bcg_deploy.fileio import atomic_write_json
from bcg_deploy.sim2sim import Sim2SimConfig
from bcg_deploy.sim2sim.injection import InitDraw
from bcg_deploy.sim2sim.runner import run_streams, simulate_run
from bcg_deploy.sim2sim.setup import prepare
from bcg_deploy.training.evaluate import first_episodes, load_policy

RESULTS = Path(__file__).resolve().parent / "results"
AXES = {"x": ("pos", 0), "y": ("pos", 1), "z": ("pos", 2), "roll": ("rpy", 0), "pitch": ("rpy", 1), "yaw": ("rpy", 2)}


def swept(base: InitDraw, axis: str, values: list[float]) -> list[InitDraw]:
    """Copies of ``base`` with component ``axis`` replaced by each value."""
    field, i = AXES[axis]
    out = []
    for v in values:
        arr = getattr(base, field).copy()
        arr[i] = v
        out.append(dataclasses.replace(base, **{field: arr}))
    return out


def first_fall(values: list[float], fell: list[bool], side: int) -> float | None:
    """The smallest |value| on ``side`` (+1 or -1) whose start falls, or None."""
    hits = [abs(v) for v, f in zip(values, fell, strict=True) if f and v * side > 0]
    return min(hits) if hits else None


def sweep(name: str, path: Path, axis: str, values: list[float] | None, run: int | None, tmp: Path) -> dict:
    cfg, motion, actor, norm, iteration = load_policy(path)
    exported = export_policy(ExportConfig(checkpoint=path, output=tmp / f"{name}.onnx"))
    sim_cfg = Sim2SimConfig(runs=1 if run is None else run + 1)
    setup = prepare(exported.path, sim_cfg)  # its init_noise: the amplitudes sim2sim read from the ONNX
    j = setup.spec.num_joints
    if run is None:
        base = InitDraw(np.zeros(3), np.zeros(3), np.zeros(j))
    else:
        base = setup.init_noise.draw(run_streams(sim_cfg.seed, run)["init"], j)
    if values is None:
        field, i = AXES[axis]
        amp = (setup.init_noise.pos if field == "pos" else setup.init_noise.rot)[i]
        values = [float(v) for v in np.round(np.linspace(-2.0, 2.0, 17) * amp, 6)]
    starts = swept(base, axis, values)
    mj = [simulate_run(setup, sim_cfg, 0 if run is None else run, start=s) for s in starts]
    frames = torch.zeros(len(starts), dtype=torch.long)
    tr = first_episodes(cfg, motion, actor, norm, frames, start_noise=start_noise(starts))
    rows = [
        {"value": v, "mujoco": {"fell": r.fell, "fall_time_s": r.fall_time_s},
         "training_sim": {"fell": t["end"] == "fall", "end": t["end"], "end_s": t["end_s"]}}
        for v, r, t in zip(values, mj, tr, strict=True)
    ]  # fmt: skip
    margin = {}
    for sim in ("mujoco", "training_sim"):
        fell = [row[sim]["fell"] for row in rows]
        margin[sim] = {"negative": first_fall(values, fell, -1), "positive": first_fall(values, fell, +1)}
    return {
        "path": str(path),
        "iteration": iteration,
        "clip": motion.name,
        "axis": axis,
        "base": "unperturbed" if run is None else {"run": run, **base.summary()},
        "rows": rows,
        "first_fall": margin,
    }


def parse_values(text: str | None) -> list[float] | None:
    if text is None:
        return None
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise BcgdError(f"--values {text}: expected comma-separated numbers") from None
    if not all(np.isfinite(values)):
        raise BcgdError(f"--values {text}: expected finite numbers")
    return values


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="NAME=path/to/run.pt")
    ap.add_argument("--axis", choices=sorted(AXES), default="roll")
    ap.add_argument("--values", default=None, help="comma-separated (rad or m); default +/-2x the reset noise")
    ap.add_argument("--run", type=int, default=None, help="on top of sim2sim's seeded run RUN (seed 0)")
    ap.add_argument("--out", type=Path, default=RESULTS / "start_margin.json")
    args = ap.parse_args()
    values = parse_values(args.values)
    if args.run is not None and args.run < 0:
        raise BcgdError(f"--run {args.run}: expected a run index >= 0")
    out: dict = {"runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in named_checkpoints(args.runs):  # every path checked before the first export
            res = sweep(name, path, args.axis, values, args.run, Path(tmp))
            out["runs"][name] = res
            print(f"{name} ({path}, iteration {res['iteration']}, clip {res['clip']}), {args.axis} from {res['base']}")
            for row in res["rows"]:
                mj, tr = row["mujoco"], row["training_sim"]
                mj_s, tr_s = outcome_text(mj, tr)
                print(f"  {args.axis} {row['value']:+.4f}  MuJoCo: {mj_s:16s} training sim: {tr_s}")
            for sim, m in res["first_fall"].items():
                print(f"{name}.{sim}.first_fall: negative {m['negative']}, positive {m['positive']}")
    atomic_write_json(args.out, out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    run_script(main)
