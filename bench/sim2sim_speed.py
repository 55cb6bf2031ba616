"""sim2sim speed: real-time factor of one core at 500 Hz physics, policy included; JSON to bench/results/.

Cases (single thread each; the best of ``--repeats`` timings is kept, all are recorded):

- ``peer_mujoco``: the bare minimum loop, MuJoCo's own position actuators (PD in C), ctrl set once
  per control step, base pinned to the reference root as in the harness replay. The peer.
- ``replay_pinned``: the sim2sim harness (explicit PD in Python every physics step, metrics recording)
  replaying the reference with the base pinned.
- ``replay_pinned_policy``: as above, and the ONNX policy is also evaluated at every control step on
  the simulated state (its targets are discarded, so the dynamics stay those of the replay): the cost
  of the harness with a policy on a robot that tracks the clip (8 foot contacts, not lying on the floor).
- ``policy_closed_loop``: the policy drives the robot (an untrained policy falls; the run continues on
  the floor, with more contacts).

Usage: ``python bench/sim2sim_speed.py [--policy policy.onnx] [--seconds 10] [--out PATH]``. Without
``--policy`` the policy cases are skipped unless the exporter can make an untrained policy.
Prints ``name.metric: value`` lines and writes bench/results/sim2sim_speed.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import mujoco
import numpy as np

REPO = Path(__file__).resolve().parents[1]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def standing_reference(seconds: float):
    from bcg_deploy.robots import load_robot
    from bcg_deploy.sim2sim.reference import reference_from_states

    m = load_robot().load_model()
    t = int(seconds * 50) + 1
    q = np.tile(m.key_qpos[0], (t, 1))
    q[:, 7 + 15 :] += 0.3 * np.sin(np.linspace(0, 6 * np.pi, t))[:, None]  # arms swing
    return reference_from_states(m, q, np.zeros((t, m.nv)), 50.0)


def untrained_policy(tmp: Path) -> Path | None:
    """An untrained policy exported by the real exporter, if its API is available."""
    try:
        from bcg_deploy.export import export_untrained  # type: ignore[attr-defined]
    except ImportError:
        return None
    return Path(export_untrained(tmp / "untrained.onnx"))


def peer_mujoco(setup, seconds: float) -> float:
    """Wall seconds of the bare MuJoCo loop (position actuators) over ``seconds`` of the replay."""
    from bcg_deploy.sim2sim.reference import base_track, initial_state

    spec, ref, n_sub, dt = setup.spec, setup.reference, setup.n_sub, setup.model.opt.timestep
    m = spec.load_model()
    m.opt.timestep = dt
    m.opt.integrator = mujoco.mjtIntegrator.mjINT_EULER
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = initial_state(ref, m.nq, m.nv)
    num_k = min(ref.num_frames - 1, int(round(seconds / setup.control_dt)))
    pq, pv = base_track(ref, num_k * n_sub, dt)
    t0 = time.perf_counter()
    for k in range(num_k):
        d.ctrl[:] = ref.joint_pos[k + 1]
        for s in range(n_sub):
            i = k * n_sub + s
            d.qpos[:7], d.qvel[:6] = pq[i], pv[i]
            mujoco.mj_step(m, d)
    return time.perf_counter() - t0


def time_case(fn, repeats: int) -> dict:
    walls = [fn() for _ in range(repeats)]
    return {"wall_s": min(walls), "wall_s_all": walls}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", type=Path, default=None)
    ap.add_argument("--seconds", type=float, default=10.0, help="simulated seconds per case")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--physics-dt", type=float, default=0.002)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "sim2sim_speed.json")
    args = ap.parse_args()

    from bcg_deploy.sim2sim.runner import Sim2SimConfig, prepare, setup_from_reference, simulate_run

    tmp = Path(tempfile.mkdtemp(prefix="bcgd_bench_"))
    policy_path = args.policy or untrained_policy(tmp)
    replay = Sim2SimConfig(runs=1, replay=True, pin_base=True, physics_dt=args.physics_dt)
    replay.max_duration_s = args.seconds
    if policy_path is not None:
        setup = prepare(policy_path, replay)
        policy = prepare(policy_path, Sim2SimConfig(runs=1, physics_dt=args.physics_dt)).policy
        ref_name = f"the policy's clip ({setup.reference.source})"
    else:
        setup = setup_from_reference(standing_reference(args.seconds), replay)
        policy = None
        ref_name = "constructed standing clip with swinging arms"
    sim_s = (setup.reference.num_frames - 1) * setup.control_dt
    cases: dict[str, dict] = {}

    cases["peer_mujoco"] = time_case(lambda: peer_mujoco(setup, sim_s), args.repeats)
    cases["replay_pinned"] = time_case(lambda: simulate_run(setup, replay, 0).wall_s, args.repeats)
    if policy is not None:
        ref = setup.reference

        def with_policy(k, inputs):
            policy.act(inputs, k)
            return ref.joint_pos[min(k + 1, ref.num_frames - 1)]

        cases["replay_pinned_policy"] = time_case(
            lambda: simulate_run(setup, replay, 0, controller=with_policy).wall_s, args.repeats
        )
        closed = Sim2SimConfig(runs=1, physics_dt=args.physics_dt, stop_on_fall=False, max_duration_s=args.seconds)
        csetup = prepare(policy_path, closed)
        cases["policy_closed_loop"] = time_case(lambda: simulate_run(csetup, closed, 0).wall_s, args.repeats)
        feeds = {k: v.copy() for k, v in policy_inputs(csetup).items()}
        n = 500
        t0 = time.perf_counter()
        for i in range(n):
            policy.act(feeds, i % csetup.reference.num_frames)
        cases["policy_inference_only"] = {"us_per_call": (time.perf_counter() - t0) / n * 1e6}

    peer_wall = cases["peer_mujoco"]["wall_s"]
    for c in cases.values():
        if "wall_s" in c:
            c["sim_s"] = sim_s
            c["real_time_factor"] = sim_s / c["wall_s"]
            c["us_per_physics_step"] = c["wall_s"] / (sim_s / args.physics_dt) * 1e6
            c["speed_vs_peer"] = peer_wall / c["wall_s"]
    out = {
        "bench": "sim2sim_speed",
        "physics_dt": args.physics_dt,
        "control_dt": setup.control_dt,
        "reference": ref_name,
        "policy": None if policy_path is None else str(policy_path),
        "threads": {"onnxruntime_intra_op": 1, "mujoco": 1},
        "machine": {
            "cpu": _cpu_model(),
            "cores": os.cpu_count(),
            "loadavg_at_start": os.getloadavg(),
            "python": sys.version.split()[0],
        },
        "versions": {"mujoco": mujoco.__version__, "onnxruntime": _ort_version()},
        "cases": cases,
        "target": "real_time_factor >= 40 per core at 500 Hz with the policy (replay_pinned_policy)",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmpf = tempfile.mkstemp(dir=args.out.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(out, f, indent=2)
    os.replace(tmpf, args.out)
    for name, c in cases.items():
        for key in ("real_time_factor", "us_per_physics_step", "speed_vs_peer", "us_per_call"):
            if key in c:
                print(f"{name}.{key}: {c[key]:.2f}")
    print(f"wrote {args.out}")


def policy_inputs(setup) -> dict:
    from bcg_deploy.sim2sim.policy import make_inputs
    from bcg_deploy.sim2sim.reference import initial_state

    x = make_inputs(setup.spec.num_joints)
    q, v = initial_state(setup.reference, 36, 35)
    x["base_pos"][0], x["base_quat"][0], x["base_lin_vel"][0] = q[:3], q[3:7], v[:3]
    x["base_ang_vel"][0], x["joint_pos"][0], x["joint_vel"][0] = v[3:6], q[7:], v[6:]
    return x


def _ort_version() -> str:
    import onnxruntime

    return onnxruntime.__version__


if __name__ == "__main__":
    main()
