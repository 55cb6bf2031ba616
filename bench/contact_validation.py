"""Validation of the smoothed contact model (issue: stiff contact in the Warp simulator).

Writes bench/results/contact_validation.json with:
  standing     the home pose at 10x PD gains dropped from 2 cm, 3 s, per kappa: summed vertical contact force
               over the last second / (m g), mean foot-sphere penetration (mm), pelvis height;
  friction     a standing robot given 1 m/s forward on mu = 0.5: measured deceleration / (mu g) (sliding);
               with mu = 1.2 and a 5 cm/s push: horizontal drift of the feet (mm) (sticking);
  mujoco       side by side with MuJoCo (same MJCF, dt, gains, initial state) for 2 s: pelvis heights and the
               mean foot penetration of both (the paper's Delta d);
  gradients    worst relative error of the simulator's gradients against float64 central differences on 20
               in-contact states, one control step, per kappa;
  stiffness    the variance over 64 samples (1 mm perturbations of the initial pelvis height) of
               d(pelvis vertical velocity after 0.3 s) / d(initial pelvis height), landing from 3 cm, per kappa.

    python bench/contact_validation.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import mujoco
import numpy as np
import torch

from bcg_deploy.diffsim import SimConfig, Simulator
from bcg_deploy.diffsim.checks import fd_gradient_check, in_contact_states, standing_state
from bcg_deploy.robots import load_robot

KAPPAS = (50.0, 100.0, 300.0, 1000.0)
G = 9.81
RESULTS = Path(__file__).resolve().parent / "results"


def _sim(robot, n: int, kappa: float, gain_scale: float = 1.0, **kw) -> Simulator:
    sim = Simulator(robot, SimConfig(num_envs=n, dtype="float64", kappa=kappa, **kw))
    if gain_scale != 1.0:
        sim.set_env_params(act_kp=gain_scale * robot.kp, act_kd=gain_scale * robot.kd)
    return sim


def _rollout(sim: Simulator, q, qd, seconds: float):
    """No-grad rollout with the PD targets at the home pose; yields (time, SimState) every control step."""
    robot = sim.robot
    qt = torch.tensor(np.tile(robot.default_joint_pos, (q.shape[0], 1)))
    q, qd = torch.as_tensor(q), torch.as_tensor(qd)
    steps = round(seconds / sim.control_dt)
    with torch.no_grad():
        for k in range(steps):
            st = sim.step(q, qd, qt)
            q, qd = st.q, st.qd
            yield (k + 1) * sim.control_dt, st


def _final(sim: Simulator, q, qd, seconds: float):
    """The state after ``seconds`` of ``_rollout``."""
    st = None
    for _, st in _rollout(sim, q, qd, seconds):  # noqa: B007
        pass
    return st


def standing(robot) -> dict:
    out = {}
    mg = robot.total_mass * G
    for kappa in KAPPAS:
        sim = _sim(robot, 1, kappa, gain_scale=10.0, substeps=1)  # one physics step per call: every impulse
        force, depth = [], []
        for t, st in _rollout(sim, *standing_state(robot, 1, drop=0.02), 3.0):
            if t > 2.0 + 1e-9:
                force.append(float(st.contact_impulse.sum()) / sim.cfg.physics_dt)
                depth.append(float(st.contact_depth.mean()))
        out[str(kappa)] = {
            "force_over_mg_last_second": float(np.mean(force) / mg),
            "mean_penetration_mm_last_second": 1000 * float(np.mean(depth)),
            "pelvis_height_m": float(st.q[0, 2]),
            "pelvis_tilt_rad": float(2 * np.arccos(min(1.0, abs(float(st.q[0, 3]))))),
        }
    pens = [out[str(k)]["mean_penetration_mm_last_second"] for k in KAPPAS]
    out["penetration_falls_with_kappa"] = bool(all(a > b for a, b in zip(pens, pens[1:], strict=False)))
    return out


def _settled(robot, mu: float, kappa: float = 300.0):
    sim = _sim(robot, 1, kappa, gain_scale=10.0, substeps=1)
    sim.set_env_params(friction=mu)
    st = _final(sim, *standing_state(robot, 1, drop=0.0), 0.5)
    return sim, st.q.numpy(), st.qd.numpy()


def _foot_xy(robot, q: np.ndarray) -> np.ndarray:
    m = robot.load_model(scene=False)
    d = mujoco.MjData(m)
    d.qpos[:] = q
    mujoco.mj_kinematics(m, d)
    return np.array([d.xpos[m.body(b).id, :2] for b in robot.foot_bodies])


def friction(robot) -> dict:
    mu = 0.5
    sim, q, qd = _settled(robot, mu)
    qd = qd.copy()
    qd[0, 0] += 1.0  # the whole robot sliding forward at 1 m/s (joint rates unchanged)
    ts, vx, ratio = [], [], []
    for t, st in _rollout(sim, q, qd, 0.15):
        # CoM velocity from the linear momentum (the free joint's linear rows of M qd), not the pelvis's:
        # the friction at the feet pitches the body forward while it brakes.
        momentum = (sim.mass_matrix(st.q)[0, :3] @ st.qd[0]).numpy()
        ts.append(t)
        vx.append(float(momentum[0]) / robot.total_mass)
        d = sim._nograd().views["con_impulse"][-1, 0].numpy()  # [NC, 3] impulses of the last substep
        if d[:, 2].sum() > 0:
            ratio.append(float(np.hypot(d[:, 0].sum(), d[:, 1].sum()) / d[:, 2].sum()))
    ts, vx = np.array(ts), np.array(vx)
    window = (ts >= 0.02) & (ts <= 0.12) & (vx > 0.05)
    decel = -np.polyfit(ts[window], vx[window], 1)[0]
    sim, q, qd = _settled(robot, 1.2)
    qd = qd.copy()
    qd[0, 0] += 0.05
    start = _foot_xy(robot, q[0])
    st = _final(sim, q, qd, 1.0)
    drift = np.linalg.norm(_foot_xy(robot, st.q[0].numpy()) - start, axis=1)
    return {
        "sliding_mu": mu,
        "deceleration_m_s2": float(decel),
        "deceleration_over_mu_g": float(decel / (mu * G)),
        "tangential_over_normal_impulse_while_sliding": float(np.median(ratio[1:6])),
        "sticking_mu": 1.2,
        "sticking_push_m_s": 0.05,
        "foot_drift_mm_after_1s": (1000 * drift).tolist(),
    }


def mujoco_side_by_side(robot, seconds: float = 2.0) -> dict:
    m = robot.load_model(scene=True)
    m.actuator_gainprm[:, 0] *= 10
    m.actuator_biasprm[:, 1:3] *= 10
    d = mujoco.MjData(m)
    q0, _ = standing_state(robot, 1, drop=0.02)
    d.qpos[:] = q0[0]
    d.ctrl[:] = robot.default_joint_pos
    spheres = [g for g in range(m.ngeom) if "foot_contact" in m.geom(g).name]
    pen = []
    for k in range(round(seconds / m.opt.timestep)):
        mujoco.mj_step(m, d)
        if (k + 1) * m.opt.timestep > seconds - 1.0:
            depth = m.geom_size[spheres, 0] - d.geom_xpos[spheres, 2]
            pen.append(float(depth[depth > 0].mean()) if (depth > 0).any() else 0.0)
    out = {
        "mujoco": {
            "timestep": float(m.opt.timestep),
            "integrator": mujoco.mjtIntegrator(m.opt.integrator).name,
            "cone": mujoco.mjtCone(m.opt.cone).name,
            "pelvis_height_m": float(d.qpos[2]),
            "mean_penetration_mm_last_second": 1000 * float(np.mean(pen)),
        }
    }
    for kappa in KAPPAS:
        sim = _sim(robot, 1, kappa, gain_scale=10.0, substeps=1)
        pen = []
        for t, st in _rollout(sim, *standing_state(robot, 1, drop=0.02), seconds):
            if t > seconds - 1.0 + 1e-9:
                depth = st.contact_depth[0].numpy()
                pen.append(float(depth[depth > 0].mean()) if (depth > 0).any() else 0.0)
        ours = 1000 * float(np.mean(pen))
        out[str(kappa)] = {
            "pelvis_height_m": float(st.q[0, 2]),
            "pelvis_height_diff_cm": 100 * abs(float(st.q[0, 2]) - float(d.qpos[2])),
            "mean_penetration_mm_last_second": ours,
            "delta_d_mm": ours - out["mujoco"]["mean_penetration_mm_last_second"],
        }
    return out


def gradients(robot, n: int = 20) -> dict:
    out = {}
    for kappa in KAPPAS:
        sim = _sim(robot, n, kappa)
        out[str(kappa)] = fd_gradient_check(sim, *in_contact_states(robot, n, seed=11), steps=1, seed=12)
    return out


def stiffness(robot, n: int = 64, seconds: float = 0.3) -> dict:
    out = {}
    rng = np.random.default_rng(0)
    dz = rng.normal(0.0, 0.001, n)
    for kappa in KAPPAS:
        sim = _sim(robot, n, kappa)
        q, qd = standing_state(robot, n, drop=0.03)
        q[:, 2] += dz
        z0 = torch.tensor(q[:, 2], requires_grad=True)
        qt = torch.tensor(np.tile(robot.default_joint_pos, (n, 1)))
        qq = torch.cat([torch.tensor(q[:, :2]), z0[:, None], torch.tensor(q[:, 3:])], dim=1)
        qdd = torch.tensor(qd)
        for _ in range(round(seconds / sim.control_dt)):
            st = sim.step(qq, qdd, qt)
            qq, qdd = st.q, st.qd
        qdd[:, 2].sum().backward()  # envs are independent: element e is d vz_e / d z0_e
        g = z0.grad.numpy()
        out[str(kappa)] = {"variance": float(np.var(g, ddof=1)), "mean": float(g.mean()), "max_abs": float(max(abs(g)))}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "contact_validation.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    robot = load_robot("g1")
    report = {"robot": robot.identity(), "dtype": "float64", "physics_dt": 0.005}
    for name, fn in (
        ("standing", standing),
        ("friction", friction),
        ("mujoco", mujoco_side_by_side),
        ("gradients", gradients),
        ("stiffness", stiffness),
    ):
        t = time.perf_counter()
        report[name] = fn(robot)
        report[name]["seconds"] = time.perf_counter() - t
        print(f"{name}: {json.dumps(report[name], indent=1)}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=2))
    tmp.replace(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
