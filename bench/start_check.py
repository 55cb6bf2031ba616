"""The same perturbed starts in MuJoCo and in the training simulator: is a MuJoCo fall a transfer gap (the
policy survives that start in training) or a start the policy never learned to recover from?

For each run.pt: the checkpoint is exported by the real exporter, replayed in MuJoCo ``--runs`` times without
options (each run from its own seeded perturbation of the reference's first frame, as ``bcgd sim2sim`` does),
and each of those exact starts (the same root offset, roll / pitch / yaw and joint offsets) is run in the
training simulator too (``training.evaluate.first_episodes``: nominal parameters, no pushes, no observation
noise, no stray termination, deterministic actions). Printed per run: its start, and whether and when it
fell in each simulator. Writes ``bench/results/start_check.json``.

``--trace RUN`` follows one of those starts control step by control step in both simulators (the policy
driving each, from the same state): the base roll and pitch (rad, world frame), and per foot the normal
contact force (N, the largest over the control step's physics steps, summed over the foot's contact
spheres): where the two simulators part, and what the feet carry when they do.

    python bench/start_check.py fight=runs/s17/fight_3000/run.pt --runs 20
    python bench/start_check.py fight=runs/s17/fight_3000/run.pt --runs 20 --trace 3
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path

import mujoco
import numpy as np
import torch
from bench_common import named_checkpoints

from bcg_deploy.errors import BcgdError, run_script
from bcg_deploy.export import ExportConfig, export_policy
from bcg_deploy.fileio import atomic_write_json
from bcg_deploy.rotations import quat_numpy as quat
from bcg_deploy.sim2sim import Sim2SimConfig, run_sim2sim
from bcg_deploy.sim2sim.runner import run_streams, simulate_run
from bcg_deploy.sim2sim.setup import Sim2SimSetup, prepare
from bcg_deploy.training.evaluate import first_episodes, load_policy

RESULTS = Path(__file__).resolve().parent / "results"


def roll_pitch(q: np.ndarray) -> tuple[float, float]:
    """Roll and pitch (rad) of a base quaternion (w x y z), ZYX Euler angles in the world frame."""
    r = quat.to_matrix(np.asarray(q, dtype=np.float64))
    return float(np.arctan2(r[2, 1], r[2, 2])), float(-np.arcsin(np.clip(r[2, 0], -1.0, 1.0)))


def mujoco_trace(setup: Sim2SimSetup, sim_cfg: Sim2SimConfig, run: int) -> list[dict]:
    """Per control step of MuJoCo run ``run``: base roll / pitch and each foot's normal contact force."""
    m = setup.model
    feet = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, b) for b in setup.spec.foot_bodies]
    floor = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "floor")
    rows: list[dict] = []
    force = np.zeros(len(feet))
    f6 = np.zeros(6)

    def physics(i: int, target: np.ndarray, d: mujoco.MjData) -> None:
        per_foot = np.zeros(len(feet))
        for c in range(d.ncon):
            con = d.contact[c]
            if floor not in (con.geom1, con.geom2):
                continue
            body = m.geom_bodyid[con.geom2 if con.geom1 == floor else con.geom1]
            if body in feet:
                mujoco.mj_contactForce(m, d, c, f6)
                per_foot[feet.index(body)] += f6[0]  # the normal component (contact frame)
        np.maximum(force, per_foot, out=force)

    def control(k: int, m_: mujoco.MjModel, d: mujoco.MjData) -> None:
        r, p = roll_pitch(d.qpos[3:7])
        rows.append({"roll": r, "pitch": p, "foot_force_n": force.tolist()})
        force[:] = 0.0

    simulate_run(setup, sim_cfg, run, on_control_step=control, on_physics_step=physics)
    return rows


def training_trace(row: int) -> tuple[list[dict], Callable]:
    """The same per-step series for env ``row`` of a ``first_episodes`` batch: the rows, and the ``on_step``
    that fills them until that env's first episode ends (the step that ends it has no pose: it is reset)."""
    rows: list[dict] = []

    def step(env, out) -> None:
        if rows and rows[-1]["roll"] is None:
            return
        ended = bool(out.done[row])
        r, p = (None, None) if ended else roll_pitch(env.q[row, 3:7].double().cpu().numpy())
        rows.append({"roll": r, "pitch": p, "foot_force_n": out.info["foot_force"][row].double().tolist()})

    return rows, step


def start_noise(starts: list) -> dict[str, torch.Tensor]:
    """sim2sim's drawn starts (``InitDraw``) as ``first_episodes``' ``start_noise`` batch."""
    return {k: torch.as_tensor(np.stack([getattr(s, k) for s in starts])) for k in ("pos", "rpy", "joints")}


def outcome_text(mj: dict, tr: dict) -> tuple[str, str]:
    """How a start ended in MuJoCo (``fell``, ``fall_time_s``) and in training (``fell``, ``end``, ``end_s``)."""
    mj_s = f"falls at {mj['fall_time_s']:.2f} s" if mj["fell"] else "stands"
    tr_s = f"falls at {tr['end_s']:.2f} s" if tr["fell"] else f"{tr['end']} at {tr['end_s']:.2f} s"
    return mj_s, tr_s


def check(name: str, path: Path, runs: int, seed: int, tmp: Path, trace: int | None = None) -> dict:
    cfg, motion, actor, norm, iteration = load_policy(path)
    exported = export_policy(ExportConfig(checkpoint=path, output=tmp / f"{name}.onnx"))
    sim_cfg = Sim2SimConfig(runs=runs, seed=seed)
    setup = prepare(exported.path, sim_cfg)  # its init_noise: the amplitudes sim2sim read from the ONNX
    report = run_sim2sim(exported.path, sim_cfg, setup=setup)
    starts = [setup.init_noise.draw(run_streams(seed, i)["init"], setup.spec.num_joints) for i in range(runs)]
    for r, s in zip(report.runs, starts, strict=True):  # the draws re-made here are the runs' own
        assert r.initial_perturbation == s.summary(), (r.index, r.initial_perturbation, s.summary())
    noise = start_noise(starts)
    traced, on_step = training_trace(trace) if trace is not None else (None, None)
    rows = first_episodes(cfg, motion, actor, norm, torch.zeros(runs, dtype=torch.long), start_noise=noise,
                          on_step=on_step)  # fmt: skip
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
    if trace is not None:  # MuJoCo's run again, with hooks: run_sim2sim's runs may be in other processes
        traced = {"run": trace, "mujoco": mujoco_trace(setup, sim_cfg, trace), "training_sim": traced}
    return {
        "path": str(path),
        "iteration": iteration,
        "control_dt": setup.control_dt,
        "clip": motion.name,
        "runs": runs,
        "seed": seed,
        "mujoco_falls": sum(o["mujoco"]["fell"] for o in out),
        "training_sim_falls": sum(o["training_sim"]["fell"] for o in out),
        "falls_in_both": both,
        "rows": out,
        "trace": traced,
    }


def print_trace(trace: dict, dt: float) -> None:
    """The trace as a table, up to 10 control steps past the simulator whose run ends first."""
    mj, tr = trace["mujoco"], trace["training_sim"]
    print(f"run {trace['run']} step by step: MuJoCo / training simulator")
    print("  t (s) |  roll (rad)   |  pitch (rad)  | left foot Fz (N) | right foot Fz (N)")

    def cell(rows: list[dict], k: int, key: str, i: int | None = None) -> str:
        v = rows[k][key] if k < len(rows) else None
        v = v if i is None or v is None else v[i]
        return "     -" if v is None else f"{v:+6.3f}" if i is None else f"{v:6.0f}"

    for k in range(min(max(len(mj), len(tr)), min(len(mj), len(tr)) + 10)):
        left = f"{cell(mj, k, 'foot_force_n', 0)} {cell(tr, k, 'foot_force_n', 0)}"
        right = f"{cell(mj, k, 'foot_force_n', 1)} {cell(tr, k, 'foot_force_n', 1)}"
        print(f"  {(k + 1) * dt:5.2f} | {cell(mj, k, 'roll')} {cell(tr, k, 'roll')} | "
              f"{cell(mj, k, 'pitch')} {cell(tr, k, 'pitch')} | {left}    | {right}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="NAME=path/to/run.pt")
    ap.add_argument("--runs", dest="num_runs", type=int, default=20, help="seeded MuJoCo runs (sim2sim --runs)")
    ap.add_argument("--seed", type=int, default=0, help="sim2sim --seed")
    ap.add_argument("--trace", type=int, default=None, metavar="RUN", help="follow run RUN step by step")
    ap.add_argument("--out", type=Path, default=RESULTS / "start_check.json")
    args = ap.parse_args()
    if args.trace is not None and not 0 <= args.trace < args.num_runs:
        raise BcgdError(f"--trace {args.trace}: expected a run index in [0, {args.num_runs})")
    out: dict = {"runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in named_checkpoints(args.runs):  # every path checked before the first export
            res = check(name, path, args.num_runs, args.seed, Path(tmp), args.trace)
            out["runs"][name] = res
            print(f"{name} ({path}, iteration {res['iteration']}, clip {res['clip']})")
            for o in res["rows"]:
                mj, tr = o["mujoco"], o["training_sim"]
                rpy = ", ".join(f"{a:+.3f}" for a in o["roll_pitch_yaw_rad"])
                mj_s, tr_s = outcome_text(mj, tr)
                print(f"  run {o['run']:2d}  start rpy ({rpy})  MuJoCo: {mj_s:16s} training sim: {tr_s}")
            print(f"{name}.mujoco_falls: {res['mujoco_falls']}/{res['runs']}")
            print(f"{name}.training_sim_falls: {res['training_sim_falls']}/{res['runs']}")
            print(f"{name}.falls_in_both: {res['falls_in_both']}")
            if res["trace"] is not None:
                print_trace(res["trace"], res["control_dt"])
    atomic_write_json(args.out, out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    run_script(main)
