"""Throughput of the differentiable simulator beside MuJoCo's own C step, measured in the same run.

    python bench/sim_throughput.py [--sizes 1 16 256] [--device cpu] [--out bench/results/sim_throughput.json]

Figures are env-substeps per second (one physics step of one env). Rows without contact compare the smooth
dynamics; contact rows (``--contact-sizes``) step the robot standing on the floor with our smoothed foot
contact beside MuJoCo's full step on the floor scene (its 8 foot-sphere contacts, soft constraints).
Ours: ``Simulator.step`` (4
substeps per call) without gradient ("forward"), and with a backward pass through a window of
chained control steps ("forward+backward", the time of both passes). MuJoCo: ``mujoco.rollout``
(one thread) of the same MJCF without floor, contacts and constraints disabled, with its position
actuators (the PD) held at the default pose, with the MJCF's integrator (implicitfast; the ratios use
this one) and with Euler (cheaper; reported too). Our CPU kernels run one thread, so all are per core.
Each figure is the best of ``--repeats`` timings (other processes share the machine; our forward and
forward+backward timings are interleaved, so load changes hit both alike); the median is recorded too,
and the ratios are also given from process CPU time (``*_cpu``: robust to other jobs preempting this
one; the 1-minute load average is recorded beside them). Writes JSON with the ratios;
prints ``name.metric: value`` lines.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import mujoco
import numpy as np
import torch
import warp as wp
from mujoco import rollout

from bcg_deploy.diffsim import SimConfig, Simulator
from bcg_deploy.fileio import atomic_write_json
from bcg_deploy.robots import load_robot


def _timeit(fn, repeats: int) -> tuple[float, float, float]:
    """(best, median) wall-clock seconds and the best process CPU seconds of ``fn`` over ``repeats`` runs.

    CPU time counts only while this process runs, so it is robust to other jobs preempting it on a shared
    machine (cache and memory-bandwidth contention remain); everything measured here runs on one core."""
    times, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return min(times), statistics.median(times), min(cpu)


def _timeit_interleaved(fns: list, repeats: int) -> list[tuple[float, float, float]]:
    """``_timeit`` of several functions with their repeats interleaved (a, b, a, b, ...), so that a change
    of the machine's load during the measurement affects all of them alike (their ratio is what we report)."""
    times = [[] for _ in fns]
    cpu = [[] for _ in fns]
    for _ in range(repeats):
        for k, fn in enumerate(fns):
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            times[k].append(time.perf_counter() - t0)
            cpu[k].append(time.process_time() - c0)
    return [(min(t), statistics.median(t), min(c)) for t, c in zip(times, cpu, strict=True)]


def _initial_state(robot, num_envs: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    q = np.zeros((num_envs, 36))
    q[:, :3] = robot.default_root_pos
    q[:, 3] = 1.0
    q[:, 7:] = robot.default_joint_pos + rng.uniform(-0.1, 0.1, (num_envs, 29))
    qd = rng.uniform(-0.5, 0.5, (num_envs, 35))
    return q, qd


def bench_mujoco(robot, num_envs: int, steps: int, repeats: int, euler: bool = False, contact: bool = False) -> dict:
    m = robot.load_model(scene=contact)
    if not contact:
        m.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT | mujoco.mjtDisableBit.mjDSBL_CONSTRAINT
    if euler:
        m.opt.integrator = mujoco.mjtIntegrator.mjINT_EULER
    d = mujoco.MjData(m)
    q, qd = _initial_state(robot, num_envs)
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    state0 = np.zeros((num_envs, mujoco.mj_stateSize(m, spec)))
    for e in range(num_envs):
        d.qpos[:], d.qvel[:], d.time = q[e], qd[e], 0.0
        mujoco.mj_getState(m, d, state0[e], spec)
    ctrl = np.tile(robot.default_joint_pos, (num_envs, 1, 1))
    out = np.zeros((num_envs, steps, state0.shape[1]))

    def run():
        rollout.rollout(m, d, state0, ctrl, nstep=steps, state=out)

    run()
    best, med, cpu = _timeit(run, repeats)
    n = num_envs * steps
    return {
        "env_substeps_per_s": n / best,
        "env_substeps_per_s_median": n / med,
        "env_substeps_per_cpu_s": n / cpu,
        "integrator": int(m.opt.integrator),
    }


def forward_rollout(sim, q0: torch.Tensor, qd0: torch.Tensor, target: torch.Tensor, control_steps: int) -> None:
    """``control_steps`` chained ``Simulator.step`` calls without gradient (the forward-only path)."""
    with torch.no_grad():
        q, qd = q0, qd0
        for _ in range(control_steps):
            s = sim.step(q, qd, target)
            q, qd = s.q, s.qd


def bench_ours(
    robot, num_envs: int, device: str, dtype: str, control_steps: int, window: int, repeats: int, contact: bool = False
) -> dict:
    cfg = SimConfig(num_envs=num_envs, device=device, dtype=dtype, contact=contact)
    sim = Simulator(robot, cfg)
    q0, qd0 = _initial_state(robot, num_envs)
    tdev, tdt = sim.torch_device, sim.types.torch_dtype
    q0, qd0 = torch.tensor(q0, dtype=tdt, device=tdev), torch.tensor(qd0, dtype=tdt, device=tdev)
    target = torch.tensor(robot.default_joint_pos, dtype=tdt, device=tdev).expand(num_envs, -1).contiguous()

    def sync():
        if tdev.type == "cuda":
            torch.cuda.synchronize(tdev)

    def forward():
        forward_rollout(sim, q0, qd0, target, control_steps)
        sync()

    action = torch.zeros(num_envs, 29, dtype=tdt, device=tdev, requires_grad=True)

    def forward_backward():
        for _ in range(control_steps // window):
            q, qd = q0, qd0
            for _ in range(window):
                s = sim.step(q, qd, target + action)
                q, qd = s.q, s.qd
            (q.square().sum() + qd.square().sum()).backward()
        sync()

    forward()
    forward_backward()
    (fwd_best, fwd_med, fwd_cpu), (fb_best, fb_med, fb_cpu) = _timeit_interleaved([forward, forward_backward], repeats)
    n = num_envs * cfg.substeps * control_steps
    n_fb = num_envs * cfg.substeps * (control_steps // window) * window
    return {
        "forward_env_substeps_per_s": n / fwd_best,
        "forward_env_substeps_per_s_median": n / fwd_med,
        "forward_backward_env_substeps_per_s": n_fb / fb_best,
        "forward_backward_env_substeps_per_s_median": n_fb / fb_med,
        "forward_env_substeps_per_cpu_s": n / fwd_cpu,
        "forward_backward_env_substeps_per_cpu_s": n_fb / fb_cpu,
        "us_per_env_substep_forward": 1e6 * fwd_best / n,
        "us_per_env_substep_forward_backward": 1e6 * fb_best / n_fb,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="*", default=None, help="env counts (default 1 16 256; + 4096 on cuda)")
    p.add_argument("--contact-sizes", type=int, nargs="*", default=[16, 64], help="env counts of the contact rows")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--env-substeps", type=int, default=40000, help="work per timing (env-substeps)")
    p.add_argument("--window", type=int, default=8, help="control steps per backward window")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "sim_throughput.json"))
    args = p.parse_args()
    wp.config.quiet = True
    robot = load_robot("g1")
    sizes = args.sizes or ([1, 16, 256] + ([4096] if args.device.startswith("cuda") else []))
    results = []
    for num_envs, contact in [(n, False) for n in sizes] + [(n, True) for n in args.contact_sizes]:
        control_steps = max(args.window, args.env_substeps // (4 * num_envs) // args.window * args.window)
        if contact:  # the contact step costs about 10x the smooth one: a tenth of the work per timing
            control_steps = max(args.window, control_steps // 10 // args.window * args.window)
        ours = bench_ours(robot, num_envs, args.device, args.dtype, control_steps, args.window, args.repeats, contact)
        mj_steps = max(16, args.env_substeps // num_envs // (10 if contact else 1))
        mj = bench_mujoco(robot, num_envs, mj_steps, args.repeats, contact=contact)
        mj_euler = bench_mujoco(robot, num_envs, mj_steps, args.repeats, euler=True, contact=contact)
        tag = f"E{num_envs}" + (".contact" if contact else "")
        row = {
            "num_envs": num_envs,
            "contact": contact,
            "control_steps": control_steps,
            "ours": ours,
            "mujoco": mj,
            "mujoco_euler": mj_euler,
            "ratio_forward_vs_mujoco_euler": ours["forward_env_substeps_per_s"] / mj_euler["env_substeps_per_s"],
            "ratio_forward_vs_mujoco": ours["forward_env_substeps_per_s"] / mj["env_substeps_per_s"],
            "ratio_forward_backward_time_vs_forward": ours["forward_env_substeps_per_s"]
            / ours["forward_backward_env_substeps_per_s"],
            # The same ratios from process CPU time (robust when other jobs share the cores).
            "ratio_forward_vs_mujoco_cpu": ours["forward_env_substeps_per_cpu_s"] / mj["env_substeps_per_cpu_s"],
            "ratio_forward_backward_cpu_time_vs_forward": ours["forward_env_substeps_per_cpu_s"]
            / ours["forward_backward_env_substeps_per_cpu_s"],
            "loadavg_1min": os.getloadavg()[0],
        }
        results.append(row)
        for k in ("forward_env_substeps_per_s", "forward_backward_env_substeps_per_s"):
            print(f"{tag}.ours.{k}: {ours[k]:.0f}")
        print(f"{tag}.mujoco.env_substeps_per_s: {mj['env_substeps_per_s']:.0f}")
        print(f"{tag}.mujoco_euler.env_substeps_per_s: {mj_euler['env_substeps_per_s']:.0f}")
        print(f"{tag}.ratio_forward_vs_mujoco: {row['ratio_forward_vs_mujoco']:.2f}")
        print(f"{tag}.ratio_forward_backward_time_vs_forward: {row['ratio_forward_backward_time_vs_forward']:.2f}")
        print(f"{tag}.ratio_forward_vs_mujoco_cpu: {row['ratio_forward_vs_mujoco_cpu']:.2f}")
        cpu_ratio = row["ratio_forward_backward_cpu_time_vs_forward"]
        print(f"{tag}.ratio_forward_backward_cpu_time_vs_forward: {cpu_ratio:.2f} (loadavg {row['loadavg_1min']:.2f})")
    report = {
        "device": args.device,
        "dtype": args.dtype,
        "window": args.window,
        "repeats": args.repeats,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "processor": platform.processor()},
        "versions": {"warp": wp.__version__, "mujoco": mujoco.__version__, "torch": torch.__version__},
        "results": results,
    }
    out = Path(args.out)
    atomic_write_json(out, report)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
