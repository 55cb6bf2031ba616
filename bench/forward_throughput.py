"""The forward-only simulator (PPO's rollouts) at thousands of envs beside MuJoCo, measured in the same run.

    python bench/forward_throughput.py [--sizes 4096] [--control-steps 3] [--repeats 3]

Per env count E, all on one core (our CPU kernels are single-threaded; ``mujoco.rollout`` with one thread):

- ``ours.sim``: ``Simulator.step`` without gradient (no Warp tape, no adjoint buffers) with foot contact,
  the robot standing on the floor at its default pose (4 substeps of 5 ms per control step).
- ``ours.env``: ``ImitationEnv.step`` as PPO runs it (``ImitationVecEnv``: forward-only simulator plus the
  observation, ADD reward, terminations, resets and domain randomisation), dance clip, random actions.
- ``mujoco``: ``mujoco.rollout`` of the floor scene (its 8 foot-sphere contacts, soft constraints,
  implicitfast, the MJCF's 5 ms step) from the same states with the PD held at the default pose
  (``sim_throughput.bench_mujoco``).

Figures are env-steps per second (one 20 ms control step of one env = 4 physics steps; MuJoCo's physics
steps are divided by 4 alike), the best of ``--repeats`` timings, plus process-CPU-time ratios (robust to
other jobs on a shared machine). Writes bench/results/forward_throughput.json; prints ``name.metric: value``.
"""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path

import mujoco
import torch
import warp as wp
from sim_throughput import _initial_state, _timeit, bench_mujoco, forward_rollout

from bcg_deploy.diffsim import SimConfig, Simulator
from bcg_deploy.fileio import atomic_write_json
from bcg_deploy.robots import load_robot

SUBSTEPS = 4


def bench_sim(robot, num_envs: int, control_steps: int, repeats: int) -> dict:
    """Forward-only ``Simulator.step`` with contact, standing at the default pose."""
    sim = Simulator(robot, SimConfig(num_envs=num_envs, contact=True, substeps=SUBSTEPS))
    q0, qd0 = _initial_state(robot, num_envs)
    tdt = sim.types.torch_dtype
    q0, qd0 = torch.tensor(q0, dtype=tdt), torch.tensor(qd0, dtype=tdt)
    target = torch.tensor(robot.default_joint_pos, dtype=tdt).expand(num_envs, -1).contiguous()

    def run():
        forward_rollout(sim, q0, qd0, target, control_steps)

    run()
    assert sim._nograd_data.grad_buffer.numel() == 0 and sim.live_steps == 0  # forward-only: no adjoints
    best, med, cpu = _timeit(run, repeats)
    n = num_envs * control_steps
    return {"env_steps_per_s": n / best, "env_steps_per_s_median": n / med, "env_steps_per_cpu_s": n / cpu}


def bench_env(num_envs: int, control_steps: int, repeats: int) -> dict:
    """``ImitationVecEnv.step`` (PPO's env step) on the dance clip with random pre-tanh actions."""
    from bcg_deploy.training.config import TrainConfig
    from bcg_deploy.training.env.add import ADD
    from bcg_deploy.training.env.imitation import ImitationEnv
    from bcg_deploy.training.env.vec_env import ImitationVecEnv
    from bcg_deploy.training.runner import load_motion

    cfg = TrainConfig()
    cfg.env.num_envs = num_envs
    robot = load_robot(cfg.robot)
    env = ImitationEnv(cfg, robot, load_motion(cfg.motion, robot))
    env.add = ADD(env.feature_dim, cfg.add)
    env.reset()
    venv = ImitationVecEnv(env)
    gen = torch.Generator().manual_seed(0)

    def run():
        for _ in range(control_steps):
            venv.step(0.3 * torch.randn(num_envs, env.num_actions, generator=gen))
        venv.pop_rollout()

    run()
    best, med, cpu = _timeit(run, repeats)
    n = num_envs * control_steps
    return {"env_steps_per_s": n / best, "env_steps_per_s_median": n / med, "env_steps_per_cpu_s": n / cpu}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="*", default=[4096], help="env counts")
    p.add_argument("--control-steps", type=int, default=3, help="control steps per timing")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-env", action="store_true", help="skip the ImitationEnv row")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "forward_throughput.json"))
    args = p.parse_args()
    wp.config.quiet = True
    torch.set_num_threads(1)
    robot = load_robot("g1")
    rows = []
    for e in args.sizes:
        sim = bench_sim(robot, e, args.control_steps, args.repeats)
        mj = bench_mujoco(robot, e, SUBSTEPS * args.control_steps, args.repeats, contact=True)
        mj = {
            k.replace("env_substeps", "env_steps"): v / SUBSTEPS if k.startswith("env_") else v for k, v in mj.items()
        }
        env = None if args.no_env else bench_env(e, args.control_steps, args.repeats)
        row = {
            "num_envs": e,
            "ours_sim_forward_only": sim,
            "ours_env_step": env,
            "mujoco_rollout": mj,
            "ratio_sim_vs_mujoco": sim["env_steps_per_s"] / mj["env_steps_per_s"],
            "ratio_sim_vs_mujoco_cpu": sim["env_steps_per_cpu_s"] / mj["env_steps_per_cpu_s"],
            "loadavg_1min": os.getloadavg()[0],
        }
        if env is not None:
            row["ratio_env_vs_mujoco"] = env["env_steps_per_s"] / mj["env_steps_per_s"]
            row["ratio_env_vs_mujoco_cpu"] = env["env_steps_per_cpu_s"] / mj["env_steps_per_cpu_s"]
        rows.append(row)
        tag = f"E{e}"
        print(f"{tag}.ours.sim_forward_only.env_steps_per_s: {sim['env_steps_per_s']:.0f}")
        if env is not None:
            print(f"{tag}.ours.env_step.env_steps_per_s: {env['env_steps_per_s']:.0f}")
        print(f"{tag}.mujoco_rollout.env_steps_per_s: {mj['env_steps_per_s']:.0f}")
        for k in ("ratio_sim_vs_mujoco", "ratio_sim_vs_mujoco_cpu", "ratio_env_vs_mujoco", "ratio_env_vs_mujoco_cpu"):
            if k in row:
                print(f"{tag}.{k}: {row[k]:.2f}")
        print(f"{tag}.loadavg_1min: {row['loadavg_1min']:.2f}")
    report = {
        "substeps_per_env_step": SUBSTEPS,
        "control_steps": args.control_steps,
        "repeats": args.repeats,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "processor": platform.processor()},
        "versions": {"warp": wp.__version__, "mujoco": mujoco.__version__, "torch": torch.__version__},
        "results": rows,
    }
    atomic_write_json(Path(args.out), report)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
