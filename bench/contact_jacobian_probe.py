"""Probe of one control step's Jacobian at a stored state (why BCG's gradient has outliers here).

Reads ``bench/fixtures/bcg_probe_state.json`` (q, qd, q_target and the env's physical parameters of a
branch state met by SHAC + BCG: a foot resting on its two heel spheres) and reports, in float64 at
kappa 300: the largest singular value of d(q+, qd+)/d(q_target) with implicit PD damping (default),
with 100x effort limits (saturation ruled out) and with explicit damping; central differences along
the top right-singular vector for shrinking steps (a derivative that grows like 1/h is a jump in the
forward map, not a steep slope); the same norm with 10, 30 and 100 Gauss-Seidel sweeps (a converging
solve would settle); and a 201-point scan of the worst input over +/-2e-5 rad with the
largest output step and the foot-sphere normal impulses on both sides of it. JSON to
bench/results/contact_jacobian_probe.json; prints ``name.metric: value`` lines.

    python bench/contact_jacobian_probe.py [--kappa 300] [--step scalar|component] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from bcg_deploy.diffsim import SimConfig, Simulator
from bcg_deploy.fileio import atomic_write_json
from bcg_deploy.robots import load_robot

RESULTS = Path(__file__).resolve().parent / "results"


def _sim(
    robot,
    state: dict,
    n: int,
    kappa: float,
    pd: str = "implicit",
    effort_scale: float = 1.0,
    sweeps: int = 10,
    step: str = "scalar",
) -> Simulator:
    cfg = SimConfig(
        num_envs=n, kappa=kappa, dtype="float64", pd_damping=pd, contact_iterations=sweeps, contact_step=step
    )
    sim = Simulator(robot, cfg)
    params = {k: torch.tensor(v, dtype=torch.float64)[None] for k, v in state["params"].items()}
    params["act_effort"] = torch.as_tensor(robot.effort_limit, dtype=torch.float64)[None] * effort_scale
    sim.set_env_params(**params)
    return sim


def _inputs(state: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return tuple(torch.tensor(state[k], dtype=torch.float64)[None] for k in ("q", "qd", "q_target"))


def jacobian(sim: Simulator, q, qd, qt) -> torch.Tensor:  # noqa: ANN001
    """d(q+, qd+)/d(q_target) [71, 29] of one control step."""
    qt = qt.clone().requires_grad_(True)
    s = sim.step(q, qd, qt)
    x = torch.cat((s.q, s.qd), -1)[0]
    return torch.stack([torch.autograd.grad(x[k], qt, retain_graph=True)[0][0] for k in range(x.shape[0])])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state", type=Path, default=Path(__file__).resolve().parent / "fixtures" / "bcg_probe_state.json")
    ap.add_argument("--kappa", type=float, default=300.0)
    ap.add_argument("--step", default="scalar", help="SimConfig.contact_step: scalar (default) or component")
    ap.add_argument("--out", type=Path, default=RESULTS / "contact_jacobian_probe.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    robot = load_robot("g1")
    state = json.loads(args.state.read_text())
    q, qd, qt = _inputs(state)
    out: dict = {"state": str(args.state), "kappa": args.kappa, "contact_step": args.step}
    sim = _sim(robot, state, 1, args.kappa, step=args.step)
    jac = jacobian(sim, q, qd, qt)
    _, sv, vh = torch.linalg.svd(jac)
    v = vh[0]
    out["sigma_max_implicit"] = float(sv[0])
    wide = _sim(robot, state, 1, args.kappa, effort_scale=100.0, step=args.step)
    out["sigma_max_implicit_effort_x100"] = float(torch.linalg.matrix_norm(jacobian(wide, q, qd, qt), 2))
    out["sigma_max_explicit"] = float(
        torch.linalg.matrix_norm(
            jacobian(_sim(robot, state, 1, args.kappa, pd="explicit", step=args.step), q, qd, qt), 2
        )
    )
    out["sigma_max_by_sweeps"] = {
        f"{pd}_{it}": float(
            torch.linalg.matrix_norm(
                jacobian(_sim(robot, state, 1, args.kappa, pd, sweeps=it, step=args.step), q, qd, qt), 2
            )
        )
        for pd in ("implicit", "explicit")
        for it in (10, 30, 100)
    }
    fd = []
    with torch.no_grad():
        for h in (1e-4, 1e-5, 1e-6, 1e-7):
            sp, sm = sim.step(q, qd, qt + h * v), sim.step(q, qd, qt - h * v)
            diff = (torch.cat((sp.q, sp.qd), -1) - torch.cat((sm.q, sm.qd), -1)) / (2 * h)
            fd.append({"h": h, "fd_norm": float(diff.norm()), "analytic_norm": float((jac @ v).norm())})
    out["central_differences"] = fd
    worst_in = int(v.abs().argmax())
    worst_out = int(torch.linalg.svd(jac)[0][:, 0].abs().argmax())
    n = 201
    scan = _sim(robot, state, n, args.kappa, step=args.step)
    eps = torch.linspace(-2e-5, 2e-5, n, dtype=torch.float64)
    e = torch.zeros(qt.shape[1], dtype=torch.float64)
    e[worst_in] = 1.0
    with torch.no_grad():
        s = scan.step(q.expand(n, -1), qd.expand(n, -1), qt + eps[:, None] * e)
    y = torch.cat((s.q, s.qd), -1)[:, worst_out]
    dy = y.diff()
    k = int(dy.abs().argmax())
    out["scan"] = {
        "input": f"q_target[{worst_in}] ({robot.joint_names[worst_in]})",
        "output": f"x[{worst_out}] (q then qd)",
        "range": [float(y.min()), float(y.max())],
        "largest_step": float(dy[k]),
        "median_abs_step": float(dy.abs().median()),
        "at": [float(eps[k]), float(eps[k + 1])],
        "normal_impulses_before": s.contact_impulse[k].tolist(),
        "normal_impulses_after": s.contact_impulse[k + 1].tolist(),
        "depth_mm": (1000 * s.contact_depth[k]).tolist(),
    }
    atomic_write_json(args.out, out)
    for key in ("sigma_max_implicit", "sigma_max_implicit_effort_x100", "sigma_max_explicit"):
        print(f"{key}: {out[key]:.4g}")
    for key, value in out["sigma_max_by_sweeps"].items():
        print(f"sigma_max.{key}_sweeps: {value:.4g}")
    for row in fd:
        print(f"fd.h{row['h']:g}: {row['fd_norm']:.4g} (analytic {row['analytic_norm']:.4g})")
    sc = out["scan"]
    lo, hi = sc["range"]
    print(f"scan: {sc['input']} over +/-2e-5 rad moves {sc['output']} over {lo:.4g} .. {hi:.4g}")
    print(f"scan.largest_step: {sc['largest_step']:.4g} (median {sc['median_abs_step']:.3g})")
    print(f"scan.impulses_before: {[round(x, 4) for x in sc['normal_impulses_before']]}")
    print(f"scan.impulses_after:  {[round(x, 4) for x in sc['normal_impulses_after']]}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
