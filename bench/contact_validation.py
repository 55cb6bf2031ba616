"""Validation of the smoothed contact model (issue: stiff contact in the Warp simulator).

Writes bench/results/contact_validation.json with:
  standing     the home pose at 10x PD gains dropped from 2 cm, 3 s, per kappa: summed vertical contact force
               over the last second / (m g), mean foot-sphere penetration (mm), pelvis height, time upright,
               creep rate;
  standing_balanced  the same with an ankle feedback on the pelvis pitch and roll (``ankle_balance``): the
               passive robot tips over at kappa 50 and 100;
  friction     one free G1 foot given 1 m/s forward on mu = 0.5: measured deceleration / (mu g) (sliding);
               with mu = 1.2 and a 5 cm/s push: horizontal drift (mm) over 1 s (sticking);
  mujoco       side by side with MuJoCo (same MJCF, dt, gains, initial state) for 2 s: pelvis heights and the
               mean foot penetration of both (the paper's Delta d);
  mujoco_balanced  the same with ``ankle_balance`` in both simulators (all kappas stay upright);
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
from bcg_deploy.fileio import atomic_write_json
from bcg_deploy.robots import load_robot

KAPPAS = (50.0, 100.0, 300.0, 1000.0)
G = 9.81
RESULTS = Path(__file__).resolve().parent / "results"


def _sim(robot, n: int, kappa: float, gain_scale: float = 1.0, **kw) -> Simulator:
    sim = Simulator(robot, SimConfig(num_envs=n, dtype="float64", kappa=kappa, **kw))
    if gain_scale != 1.0:
        sim.set_env_params(act_kp=gain_scale * robot.kp, act_kd=gain_scale * robot.kd)
    return sim


def _rollout(sim: Simulator, q, qd, seconds: float, controller=None):
    """No-grad rollout with the PD targets at the home pose (or ``controller(q, qd)``'s targets); yields
    (time, SimState) every control step."""
    robot = sim.robot
    home = torch.tensor(np.tile(robot.default_joint_pos, (q.shape[0], 1)))
    q, qd = torch.as_tensor(q), torch.as_tensor(qd)
    steps = round(seconds / sim.control_dt)
    with torch.no_grad():
        for k in range(steps):
            qt = home if controller is None else controller(q, qd)
            st = sim.step(q, qd, qt)
            q, qd = st.q, st.qd
            yield (k + 1) * sim.control_dt, st


def _final(sim: Simulator, q, qd, seconds: float):
    """The state after ``seconds`` of ``_rollout``."""
    st = None
    for _, st in _rollout(sim, q, qd, seconds):  # noqa: B007
        pass
    return st


def _tilt(q) -> float:
    """Angle (rad) between the pelvis z axis and the world z axis."""
    w, x, y = (float(v) for v in q[0, 3:6])
    n = w * w + x * x + y * y + float(q[0, 6]) ** 2
    return float(np.arccos(np.clip(1.0 - 2.0 * (x * x + y * y) / n, -1.0, 1.0)))


def ankle_balance(robot, gain: float = 3.0, damping: float = 0.2):
    """Home-pose targets plus the simplest balance feedback: both ankle pitch (roll) targets move by
    ``gain`` rad/rad times the pelvis pitch (roll) plus ``damping`` s times its pitch (roll) rate."""
    names = list(robot.joint_names)
    pitch = [names.index(f"{side}_ankle_pitch_joint") for side in ("left", "right")]
    roll = [names.index(f"{side}_ankle_roll_joint") for side in ("left", "right")]
    home = torch.tensor(robot.default_joint_pos[None])

    def controller(q: torch.Tensor, qd: torch.Tensor) -> torch.Tensor:
        w, x, y, z = (q[:, i] for i in range(3, 7))
        r = torch.atan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y))
        p = torch.asin(torch.clamp(2 * (w * y - z * x), -1.0, 1.0))
        qt = home.repeat(q.shape[0], 1)
        qt[:, pitch] += (gain * p + damping * qd[:, 4])[:, None]
        qt[:, roll] += (gain * r + damping * qd[:, 3])[:, None]
        return qt

    return controller


def standing(robot, seconds: float = 3.0, fallen_tilt: float = 0.5, balance: bool = False) -> dict:
    """Home pose at 10x gains dropped from 2 cm, per kappa. Besides the issue's figures: the time the robot
    stays upright (tilt below ``fallen_tilt`` rad) and the creep, the slope of the mean penetration over the
    last second (METHOD's contact has no position term: a loaded sphere keeps sinking at (1 - s(d)) of its
    stopping velocity, so the penetration grows slowly instead of settling, and a passive robot on it is an
    inverted pendulum on a damper, which tips over). ``balance`` adds ``ankle_balance``."""
    out = {}
    mg = robot.total_mass * G
    controller = ankle_balance(robot) if balance else None
    for kappa in KAPPAS:
        sim = _sim(robot, 1, kappa, gain_scale=10.0, substeps=1)  # one physics step per call: every impulse
        force, depth, times, upright = [], [], [], seconds
        for t, st in _rollout(sim, *standing_state(robot, 1, drop=0.02), seconds, controller):
            if upright == seconds and _tilt(st.q) > fallen_tilt:
                upright = t
            if t > seconds - 1.0 + 1e-9:
                force.append(float(st.contact_impulse.sum()) / sim.cfg.physics_dt)
                depth.append(float(st.contact_depth.mean()))
                times.append(t)
        out[str(kappa)] = {
            "force_over_mg_last_second": float(np.mean(force) / mg),
            "mean_penetration_mm_last_second": 1000 * float(np.mean(depth)),
            "penetration_rate_mm_per_s_last_second": 1000 * float(np.polyfit(times, depth, 1)[0]),
            "pelvis_height_m": float(st.q[0, 2]),
            "pelvis_tilt_rad": _tilt(st.q),
            "upright_s": float(upright),
        }
    pens = [out[str(k)]["mean_penetration_mm_last_second"] for k in KAPPAS]
    out["penetration_falls_with_kappa"] = bool(all(a > b for a, b in zip(pens, pens[1:], strict=False)))
    out["kappas_upright"] = [k for k in KAPPAS if out[str(k)]["upright_s"] >= seconds]
    return out


def free_foot_spec(robot, directory: Path):
    """A RobotSpec of one free-floating G1 foot: the ankle_roll_link's inertia and its four contact spheres
    (a clean oracle for friction: no legs above it to pitch it over)."""
    from bcg_deploy.robots.spec import spec_from_mjcf

    m = robot.load_model(scene=False)
    b = m.body(robot.foot_bodies[0])
    spheres = [c for c in robot.foot_contact_points if c.body == robot.foot_bodies[0]]
    geoms = "".join(
        f'<geom name="foot_contact_{i}" type="sphere" size="{c.radius}" pos="{" ".join(map(str, c.pos))}"/>'
        for i, c in enumerate(spheres)
    )
    z = -min(c.pos[2] - c.radius for c in spheres)
    xml = (
        '<mujoco model="g1_foot"><compiler angle="radian"/><worldbody>'
        f'<body name="foot" pos="0 0 {z}"><freejoint name="root"/>'
        f'<inertial pos="{" ".join(map(str, b.ipos))}" quat="{" ".join(map(str, b.iquat))}" mass="{b.mass[0]}"'
        f' diaginertia="{" ".join(map(str, b.inertia))}"/>{geoms}</body></worldbody>'
        '<custom><numeric name="velocity_limit" size="1" data="0"/></custom>'
        f'<keyframe><key name="home" qpos="0 0 {z} 1 0 0 0"/></keyframe></mujoco>'
    )
    path = directory / "g1_foot.xml"
    path.write_text(xml)
    return spec_from_mjcf("g1_foot", path, path, ("foot",), (), 0.25)


def _foot_slide(spec, mu: float, push: float, seconds: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Settle the free foot for 0.5 s, give it ``push`` m/s along x; (times, x velocities, positions)."""
    sim = Simulator(spec, SimConfig(num_envs=1, dtype="float64", substeps=1))
    sim.set_env_params(friction=mu)
    q, qd, qt = torch.tensor(spec.default_root_pos[None]), torch.zeros(1, 6, dtype=torch.float64), None
    q = torch.cat([q, torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)], dim=1)
    qt = torch.zeros(1, 0, dtype=torch.float64)
    ts, vx, px = [], [], []
    with torch.no_grad():
        for _ in range(100):
            st = sim.step(q, qd, qt)
            q, qd = st.q, st.qd
        qd = qd.clone()
        qd[0, 0] += push
        for k in range(round(seconds / sim.control_dt)):
            st = sim.step(q, qd, qt)
            q, qd = st.q, st.qd
            ts.append((k + 1) * sim.control_dt)
            vx.append(float(qd[0, 0]))
            px.append(q[0, :2].numpy().copy())
    return np.array(ts), np.array(vx), np.array(px)


def friction(robot) -> dict:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        foot = free_foot_spec(robot, Path(tmp))
        mu = 0.5
        ts, vx, _ = _foot_slide(foot, mu, 1.0, 0.3)
        sliding = vx > 0.02
        decel = -np.polyfit(ts[sliding], vx[sliding], 1)[0]
        _, _, px = _foot_slide(foot, 1.2, 0.05, 1.0)
    return {
        "model": "one free G1 foot (ankle_roll_link inertia, its 4 contact spheres), kappa 300",
        "sliding_mu": mu,
        "deceleration_m_s2": float(decel),
        "deceleration_over_mu_g": float(decel / (mu * G)),
        "sticking_mu": 1.2,
        "sticking_push_m_s": 0.05,
        "drift_mm_after_1s": 1000 * float(np.linalg.norm(px[-1] - px[0])),
    }


def mujoco_side_by_side(robot, seconds: float = 2.0, balance: bool = False) -> dict:
    """Both simulators from the same state with 10x gains, PD targets at the home pose (or from
    ``ankle_balance`` every control step, 0.02 s, in both)."""
    m = robot.load_model(scene=True)
    m.actuator_gainprm[:, 0] *= 10
    m.actuator_biasprm[:, 1:3] *= 10
    d = mujoco.MjData(m)
    q0, _ = standing_state(robot, 1, drop=0.02)
    d.qpos[:] = q0[0]
    d.ctrl[:] = robot.default_joint_pos
    controller = ankle_balance(robot) if balance else None
    spheres = [g for g in range(m.ngeom) if "foot_contact" in m.geom(g).name]
    per_control = round(0.02 / m.opt.timestep)
    pen = []
    for k in range(round(seconds / m.opt.timestep)):
        if controller is not None and k % per_control == 0:
            d.ctrl[:] = controller(torch.tensor(d.qpos[None]), torch.tensor(d.qvel[None]))[0].numpy()
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
        for t, st in _rollout(sim, *standing_state(robot, 1, drop=0.02), seconds, controller):
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


def stiffness(robot, n: int = 64, horizons: tuple = (0.1, 0.3)) -> dict:
    """Variance over ``n`` landings (1 mm perturbations of a 3 cm drop) of d vz(T) / d z0, per kappa and T."""
    out = {}
    rng = np.random.default_rng(0)
    dz = rng.normal(0.0, 0.001, n)
    for kappa in KAPPAS:
        sim = _sim(robot, n, kappa)
        out[str(kappa)] = {}
        for seconds in horizons:
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
            out[str(kappa)][f"T={seconds}s"] = {
                "variance": float(np.var(g, ddof=1)),
                "mean": float(g.mean()),
                "max_abs": float(max(abs(g))),
            }
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
        ("standing_balanced", lambda r: standing(r, balance=True)),
        ("friction", friction),
        ("mujoco", mujoco_side_by_side),
        ("mujoco_balanced", lambda r: mujoco_side_by_side(r, balance=True)),
        ("gradients", gradients),
        ("stiffness", stiffness),
    ):
        t = time.perf_counter()
        report[name] = fn(robot)
        report[name]["seconds"] = time.perf_counter() - t
        print(f"{name}: {json.dumps(report[name], indent=1)}", flush=True)
    atomic_write_json(args.out, report)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
