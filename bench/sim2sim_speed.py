"""sim2sim speed: real-time factor of one core at 500 Hz physics, policy included; JSON to bench/results/.

Cases (single thread each; the best of ``--repeats`` timings is kept, all are recorded):

Timing: best of ``--repeats`` of both wall time and process CPU time; the real-time factor per core
is simulated seconds / CPU seconds of this single-threaded process.

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
``--policy`` an untrained policy (default network sizes, so the same inference cost as a trained one)
on ``--motion`` (default dance) is made with the training code and exported with ``bcg_deploy.export``.
Prints ``name.metric: value`` lines and writes bench/results/sim2sim_speed.json.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import mujoco
import numpy as np

from bcg_deploy.fileio import atomic_write_json

REPO = Path(__file__).resolve().parents[1]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def untrained_policy(tmp: Path, motion_name: str) -> Path:
    """An untrained policy (default network sizes) on a task motion, exported by the real exporter."""
    from dataclasses import asdict

    import torch

    from bcg_deploy.export import ExportConfig, export_policy
    from bcg_deploy.motions import load_task_motion
    from bcg_deploy.observations.paper import ObservationModule
    from bcg_deploy.robots import load_robot
    from bcg_deploy.training.checkpoint import build_checkpoint, save_checkpoint
    from bcg_deploy.training.config import TrainConfig
    from bcg_deploy.training.networks import Actor
    from bcg_deploy.training.normalizer import RunningNormalizer

    robot = load_robot()
    motion = load_task_motion(motion_name)
    om = ObservationModule(robot, motion)
    torch.manual_seed(0)
    payload = build_checkpoint(
        robot=robot,
        motion=motion,
        observation=om,
        config=asdict(TrainConfig()),
        actor=Actor(om.obs_dim, robot.num_joints),
        obs_normalizer=RunningNormalizer(om.obs_dim),
    )
    ckpt = save_checkpoint(tmp / "run.pt", payload)
    out = tmp / "untrained.onnx"
    export_policy(ExportConfig(checkpoint=ckpt, output=out, parity_samples=200, rollout_steps=10))
    return out


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


def time_cases(fns: dict, repeats: int) -> dict:
    """Round-robin over the cases ``repeats`` times (so slow drifts of the machine hit all of them);
    keep the best wall time and the best CPU time of this process (the per-core cost)."""
    out = {name: {"wall_s_all": [], "cpu_s_all": []} for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            out[name]["wall_s_all"].append(time.perf_counter() - w0)
            out[name]["cpu_s_all"].append(time.process_time() - c0)
    for c in out.values():
        c["wall_s"], c["cpu_s"] = min(c["wall_s_all"]), min(c["cpu_s_all"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", type=Path, default=None)
    ap.add_argument("--seconds", type=float, default=10.0, help="simulated seconds per case")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--physics-dt", type=float, default=0.002)
    ap.add_argument("--motion", default="dance", help="task motion of the untrained policy (without --policy)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "sim2sim_speed.json")
    args = ap.parse_args()

    from bcg_deploy.sim2sim.runner import simulate_run
    from bcg_deploy.sim2sim.setup import Sim2SimConfig, prepare

    tmpdir = tempfile.TemporaryDirectory(prefix="bcgd_sim2sim_bench_")
    policy_path = args.policy or untrained_policy(Path(tmpdir.name), args.motion)
    replay = Sim2SimConfig(runs=1, replay=True, pin_base=True, physics_dt=args.physics_dt)
    replay.max_duration_s = args.seconds
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    setup = prepare(policy_path, replay)
    policy = setup.policy
    ref_name = f"the policy's clip ({setup.reference.source}: {policy.meta.motion.get('name')})"
    sim_s = (setup.reference.num_frames - 1) * setup.control_dt

    ref = setup.reference

    def with_policy(k: int, inputs: dict) -> np.ndarray:
        policy.act(inputs, k)  # evaluated on the simulated state, then discarded
        return ref.joint_pos[min(k + 1, ref.num_frames - 1)]

    closed = Sim2SimConfig(runs=1, physics_dt=args.physics_dt, stop_on_fall=False, max_duration_s=args.seconds)
    csetup = prepare(policy_path, closed)
    fns = {
        "peer_mujoco": lambda: peer_mujoco(setup, sim_s),
        "replay_pinned": lambda: simulate_run(setup, replay, 0),
        "replay_pinned_policy": lambda: simulate_run(setup, replay, 0, controller=with_policy),
        "policy_closed_loop": lambda: simulate_run(csetup, closed, 0),
    }
    cases: dict[str, dict] = time_cases(fns, args.repeats)
    feeds = {k: v.copy() for k, v in policy_inputs(csetup).items()}
    n = 500
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(n):
        policy.act(feeds, i % csetup.reference.num_frames)
    cases["policy_inference_only"] = {
        "us_per_call": (time.perf_counter() - t0) / n * 1e6,
        "cpu_us_per_call": (time.process_time() - c0) / n * 1e6,
    }

    peer = cases["peer_mujoco"]
    steps = sim_s / args.physics_dt
    for c in cases.values():
        if "wall_s" in c:
            c["sim_s"] = sim_s
            c["real_time_factor"] = sim_s / c["wall_s"]
            c["real_time_factor_per_core"] = sim_s / c["cpu_s"]
            c["us_per_physics_step"] = c["wall_s"] / steps * 1e6
            c["cpu_us_per_physics_step"] = c["cpu_s"] / steps * 1e6
            c["speed_vs_peer"] = peer["wall_s"] / c["wall_s"]
            c["cpu_speed_vs_peer"] = peer["cpu_s"] / c["cpu_s"]
    out = {
        "bench": "sim2sim_speed",
        "physics_dt": args.physics_dt,
        "control_dt": setup.control_dt,
        "reference": ref_name,
        "policy": str(policy_path) if args.policy else f"untrained, exported by bcg_deploy.export ({args.motion})",
        "threads": {"onnxruntime_intra_op": 1, "mujoco": 1},
        "machine": {
            "cpu": _cpu_model(),
            "cores": os.cpu_count(),
            "loadavg_at_start": os.getloadavg(),
            "python": sys.version.split()[0],
        },
        "versions": {"mujoco": mujoco.__version__, "onnxruntime": _ort_version()},
        "cases": cases,
        "target": "real_time_factor_per_core >= 40 at 500 Hz with the policy (replay_pinned_policy)",
        "note": "per core = simulated s / this process's CPU s (single thread); wall figures depend on "
        "what else the machine runs (load average above)",
    }
    atomic_write_json(args.out, out)
    for name, c in cases.items():
        keys = ("real_time_factor_per_core", "real_time_factor", "cpu_us_per_physics_step", "cpu_speed_vs_peer")
        for key in (*keys, "us_per_call", "cpu_us_per_call"):
            if key in c:
                print(f"{name}.{key}: {c[key]:.2f}")
    print(f"wrote {args.out}")
    tmpdir.cleanup()


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
