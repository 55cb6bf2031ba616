"""The same perturbed starts in MuJoCo and in the training simulator: is a MuJoCo fall a transfer gap (the
policy survives that start in training) or a start the policy never learned to recover from?

For each run.pt: the checkpoint is exported by the real exporter, replayed in MuJoCo ``--runs`` times without
options (each run from its own seeded perturbation of the reference's first frame, as ``bcgd sim2sim`` does),
and each of those exact starts (the same root offset, roll / pitch / yaw and joint offsets) is run in the
training simulator too (``training.evaluate.first_episodes``: nominal parameters, no pushes, no observation
noise, no stray termination, deterministic actions). Printed per run: its start, and whether and when it
fell in each simulator. Writes ``bench/results/start_check.json``.

    python bench/start_check.py fight=runs/s17/fight_3000/run.pt --runs 20
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch
from bench_common import named_checkpoints

from bcg_deploy.errors import run_script
from bcg_deploy.export import ExportConfig, export_policy
from bcg_deploy.fileio import atomic_write_json
from bcg_deploy.sim2sim import Sim2SimConfig, run_sim2sim
from bcg_deploy.sim2sim.runner import prepare, run_streams
from bcg_deploy.training.evaluate import first_episodes, load_policy

RESULTS = Path(__file__).resolve().parent / "results"


def check(name: str, path: Path, runs: int, seed: int, tmp: Path) -> dict:
    cfg, motion, actor, norm, iteration = load_policy(path)
    exported = export_policy(ExportConfig(checkpoint=path, output=tmp / f"{name}.onnx"))
    sim_cfg = Sim2SimConfig(runs=runs, seed=seed)
    setup = prepare(exported.path, sim_cfg)  # its init_noise: the amplitudes sim2sim read from the ONNX
    report = run_sim2sim(exported.path, sim_cfg, setup=setup)
    starts = [setup.init_noise.draw(run_streams(seed, i)["init"], setup.spec.num_joints) for i in range(runs)]
    for r, s in zip(report.runs, starts, strict=True):  # the draws re-made here are the runs' own
        assert r.initial_perturbation == s.summary(), (r.index, r.initial_perturbation, s.summary())
    noise = {k: torch.as_tensor(np.stack([getattr(s, k) for s in starts])) for k in ("pos", "rpy", "joints")}
    rows = first_episodes(cfg, motion, actor, norm, torch.zeros(runs, dtype=torch.long), start_noise=noise)
    out = []
    for r, s, t in zip(report.runs, starts, rows, strict=True):
        out.append({
            "run": r.index,
            "roll_pitch_yaw_rad": [float(a) for a in s.rpy],
            "mujoco": {"fell": r.fell, "fall_time_s": r.fall_time_s, "e_track_cm": r.e_track_cm},
            "training_sim": {"fell": t["end"] == "fall", "end": t["end"], "end_s": t["end_s"],
                             "tracking_error_cm": t["tracking_error_cm"]},
        })  # fmt: skip
    both = sum(o["mujoco"]["fell"] and o["training_sim"]["fell"] for o in out)
    return {
        "path": str(path),
        "iteration": iteration,
        "clip": motion.name,
        "runs": runs,
        "seed": seed,
        "mujoco_falls": sum(o["mujoco"]["fell"] for o in out),
        "training_sim_falls": sum(o["training_sim"]["fell"] for o in out),
        "falls_in_both": both,
        "rows": out,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="NAME=path/to/run.pt")
    ap.add_argument("--runs", dest="num_runs", type=int, default=20, help="seeded MuJoCo runs (sim2sim --runs)")
    ap.add_argument("--seed", type=int, default=0, help="sim2sim --seed")
    ap.add_argument("--out", type=Path, default=RESULTS / "start_check.json")
    args = ap.parse_args()
    out: dict = {"runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in named_checkpoints(args.runs):  # every path checked before the first export
            res = check(name, path, args.num_runs, args.seed, Path(tmp))
            out["runs"][name] = res
            print(f"{name} ({path}, iteration {res['iteration']}, clip {res['clip']})")
            for o in res["rows"]:
                mj, tr = o["mujoco"], o["training_sim"]
                rpy = ", ".join(f"{a:+.3f}" for a in o["roll_pitch_yaw_rad"])
                mj_s = f"falls at {mj['fall_time_s']:.2f} s" if mj["fell"] else "stands"
                tr_s = f"falls at {tr['end_s']:.2f} s" if tr["fell"] else f"{tr['end']} at {tr['end_s']:.2f} s"
                print(f"  run {o['run']:2d}  start rpy ({rpy})  MuJoCo: {mj_s:16s} training sim: {tr_s}")
            print(f"{name}.mujoco_falls: {res['mujoco_falls']}/{res['runs']}")
            print(f"{name}.training_sim_falls: {res['training_sim_falls']}/{res['runs']}")
            print(f"{name}.falls_in_both: {res['falls_in_both']}")
    atomic_write_json(args.out, out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    run_script(main)
