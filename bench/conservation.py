"""Energy and momentum of the passive free-floating G1 (no gravity, no PD) under our integrator.

    python bench/conservation.py [--envs 8] [--seconds 2] [--out bench/results/conservation.json]

Random states: base anywhere with a random orientation, joints within half their range, base linear
velocity up to 1 m/s, base angular and joint rates up to 2 rad/s. For each env the largest relative
deviation over the run of: total (kinetic) energy; linear momentum; angular momentum about the CoM and
about the world origin (norm of the change / norm of the initial value). Energy and momenta are
evaluated by MuJoCo (mj_energyVel, mj_subtreeVel) on the simulated states. Both bias-velocity
options of the Moreau step and ``integrator="rk4"``, at two physics dt each, are measured (the convergence
order); MuJoCo's own Euler, implicitfast
and RK4 integrators on the same states (actuation and constraints disabled) are the peer.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import mujoco
import numpy as np
import torch
import warp as wp

from bcg_deploy.diffsim import SimConfig, Simulator
from bcg_deploy.fileio import atomic_write_json
from bcg_deploy.robots import load_robot


def passive_states(num_envs: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    robot = load_robot("g1")
    rng = np.random.default_rng(seed)
    q = np.zeros((num_envs, 36))
    q[:, :3] = rng.uniform(-2, 2, (num_envs, 3))
    quat = rng.normal(size=(num_envs, 4))
    q[:, 3:7] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
    mid, half = robot.joint_range.mean(1), 0.25 * (robot.joint_range[:, 1] - robot.joint_range[:, 0])
    q[:, 7:] = rng.uniform(mid - half, mid + half, (num_envs, 29))
    qd = np.concatenate([rng.uniform(-1, 1, (num_envs, 3)), rng.uniform(-2, 2, (num_envs, 32))], axis=1)
    return q, qd


class Meter:
    """Energy and momenta of a state, by MuJoCo."""

    def __init__(self):
        self.m = load_robot("g1").load_model(scene=False)
        self.m.opt.gravity[:] = 0.0
        self.m.opt.enableflags |= mujoco.mjtEnableBit.mjENBL_ENERGY
        self.d = mujoco.MjData(self.m)

    def __call__(self, q: np.ndarray, qd: np.ndarray) -> dict:
        m, d = self.m, self.d
        d.qpos[:], d.qvel[:] = q, qd
        mujoco.mj_forward(m, d)
        mujoco.mj_subtreeVel(m, d)
        lin = d.subtree_linvel[1] * m.body_subtreemass[1]
        ang_com = d.subtree_angmom[1].copy()
        return {
            "energy": float(d.energy[0] + d.energy[1]),
            "linear": lin.copy(),
            "angular_com": ang_com,
            "angular_origin": ang_com + np.cross(d.subtree_com[1], lin),
        }


def drift(bias_velocity: str, dt: float, seconds: float, num_envs: int, seed: int = 3, integrator="moreau") -> dict:
    robot = load_robot("g1")
    cfg = SimConfig(
        num_envs=num_envs, dtype="float64", physics_dt=dt, gravity=False, bias_velocity=bias_velocity, contact=False,
        integrator=integrator, pd_damping="explicit",
    )  # fmt: skip
    sim = Simulator(robot, cfg)
    sim.set_env_params(act_kp=np.zeros(29), act_kd=np.zeros(29))
    meter = Meter()
    q0, qd0 = passive_states(num_envs, seed)
    ref = [meter(q0[e], qd0[e]) for e in range(num_envs)]
    worst = {k: 0.0 for k in ("energy", "linear", "angular_com", "angular_origin")}
    q, qd = torch.tensor(q0), torch.tensor(qd0)
    target = torch.zeros(num_envs, 29, dtype=torch.float64)
    for _ in range(round(seconds / sim.control_dt)):
        with torch.no_grad():
            s = sim.step(q, qd, target)
        q, qd = s.q, s.qd
        for e in range(num_envs):
            now = meter(q[e].numpy(), qd[e].numpy())
            for k in worst:
                dev = np.linalg.norm(np.subtract(now[k], ref[e][k])) / np.linalg.norm(ref[e][k])
                worst[k] = max(worst[k], float(dev))
    return worst


def mujoco_drift(integrator: str, dt: float, seconds: float, num_envs: int, seed: int = 3) -> dict:
    """The same measurement on MuJoCo's own integrator (the peer): actuation and constraints disabled."""
    m = load_robot("g1").load_model(scene=False)
    m.opt.gravity[:] = 0.0
    m.opt.timestep = dt
    m.opt.integrator = getattr(mujoco.mjtIntegrator, f"mjINT_{integrator.upper()}")
    m.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_ACTUATION | mujoco.mjtDisableBit.mjDSBL_CONSTRAINT
    d = mujoco.MjData(m)
    meter = Meter()
    q0, qd0 = passive_states(num_envs, seed)
    worst = {k: 0.0 for k in ("energy", "linear", "angular_com", "angular_origin")}
    steps_per_check = round(0.02 / dt)
    for e in range(num_envs):
        ref = meter(q0[e], qd0[e])
        mujoco.mj_resetData(m, d)
        d.qpos[:], d.qvel[:] = q0[e], qd0[e]
        for _ in range(round(seconds / 0.02)):
            mujoco.mj_step(m, d, nstep=steps_per_check)
            now = meter(d.qpos, d.qvel)
            for k in worst:
                dev = np.linalg.norm(np.subtract(now[k], ref[k])) / np.linalg.norm(ref[k])
                worst[k] = max(worst[k], float(dev))
    return worst


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "conservation.json"))
    args = p.parse_args()
    wp.config.quiet = True
    rows = []
    for bias_velocity in ("start", "midpoint"):
        for dt in (0.005, 0.0025):
            w = drift(bias_velocity, dt, args.seconds, args.envs)
            rows.append({"integrator": "moreau", "bias_velocity": bias_velocity, "physics_dt": dt, **w})
            print(" ".join([f"{bias_velocity}.dt{dt}"] + [f"{k}: {v:.3g}" for k, v in w.items()]))
    for dt in (0.005, 0.0025):
        w = drift("start", dt, args.seconds, args.envs, integrator="rk4")
        rows.append({"integrator": "rk4", "physics_dt": dt, **w})
        print(" ".join([f"rk4.dt{dt}"] + [f"{k}: {v:.3g}" for k, v in w.items()]))
    peers = []
    for integrator in ("euler", "implicitfast", "rk4"):
        w = mujoco_drift(integrator, 0.005, args.seconds, args.envs)
        peers.append({"mujoco_integrator": integrator, "physics_dt": 0.005, **w})
        print(" ".join([f"mujoco.{integrator}.dt0.005"] + [f"{k}: {v:.3g}" for k, v in w.items()]))
    report = {
        "envs": args.envs,
        "seconds": args.seconds,
        "max_relative_deviation": rows,
        "mujoco_max_relative_deviation": peers,
    }
    out = Path(args.out)
    atomic_write_json(out, report)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
