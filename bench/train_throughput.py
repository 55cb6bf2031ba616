"""SHAC training throughput at the paper's config (64 envs, horizon 32) on CPU (and CUDA when present).

Measures iterations/s and env-steps/s of full training iterations (rollout, actor backward + step,
critic updates, normalisers, discriminator), and the share of wall time in: simulator forward,
simulator backward, the rest of the rollout forward (observation module / FK, ADD features and
reward, actor, target critics), the rest of the backward, the critic updates and the discriminator
update. Simulator time is taken inside the real ``Simulator.step`` (forward) and between the
gradient arriving at a step's outputs and leaving its inputs (backward). Writes JSON to
``bench/results/train_throughput_<device>.json`` and prints ``name.metric: value`` lines.

    python bench/train_throughput.py [--iterations 3] [--envs 64] [--horizon 32] [--threads 1]
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch

from bcg_deploy.fileio import atomic_write_json
from bcg_deploy.training.config import TrainConfig, apply_overrides
from bcg_deploy.training.env import SimTransition, TransitionOut
from bcg_deploy.training.runner import Trainer

RESULTS = Path(__file__).resolve().parent / "results"


class _Clock:
    def __init__(self) -> None:
        self.fwd = 0.0
        self.bwd = 0.0
        self._bwd_start: float | None = None


class _MarkOut(torch.autograd.Function):
    """Identity; its backward (gradient arriving at the step outputs) starts the backward clock."""

    @staticmethod
    def forward(ctx, clock, q, qd):  # noqa: ANN001
        ctx.clock = clock
        return q.view_as(q), qd.view_as(qd)

    @staticmethod
    def backward(ctx, gq, gqd):  # noqa: ANN001
        if ctx.clock._bwd_start is None:
            ctx.clock._bwd_start = time.perf_counter()
        return None, gq, gqd


class _MarkIn(torch.autograd.Function):
    """Identity; its backward (gradient leaving the step inputs) stops the backward clock."""

    @staticmethod
    def forward(ctx, clock, q, qd, qt):  # noqa: ANN001
        ctx.clock = clock
        return q.view_as(q), qd.view_as(qd), qt.view_as(qt)

    @staticmethod
    def backward(ctx, gq, gqd, gqt):  # noqa: ANN001
        c = ctx.clock
        if c._bwd_start is not None:
            c.bwd += time.perf_counter() - c._bwd_start
            c._bwd_start = None
        return None, gq, gqd, gqt


class TimedTransition(SimTransition):
    """The plain SHAC transition with its simulator forward and backward timed."""

    def __init__(self, sim, clock: _Clock) -> None:  # noqa: ANN001
        super().__init__(sim)
        self.clock = clock

    def __call__(self, q, qd, q_target) -> TransitionOut:  # noqa: ANN001
        if torch.is_grad_enabled() and (q.requires_grad or qd.requires_grad or q_target.requires_grad):
            q, qd, q_target = _MarkIn.apply(self.clock, q, qd, q_target)
        t0 = time.perf_counter()
        out = super().__call__(q, qd, q_target)
        self.clock.fwd += time.perf_counter() - t0
        if out.q.requires_grad:
            out.q, out.qd = _MarkOut.apply(self.clock, out.q, out.qd)
        return out


def measure(device: str, envs: int, horizon: int, iterations: int, warmup: int) -> dict:
    cfg = apply_overrides(
        TrainConfig(),
        [f"env.num_envs={envs}", f"shac.horizon={horizon}", f"runner.device={device}",
         "runner.out_dir=/tmp/bcgd_bench_run", "runner.tensorboard=false"],
    )  # fmt: skip
    t0 = time.perf_counter()
    tr = Trainer(cfg)
    setup_s = time.perf_counter() - t0
    clock = _Clock()
    tr.env.transition = TimedTransition(tr.env.sim, clock)
    shac, add, env = tr.shac, tr.add, tr.env
    parts = {k: 0.0 for k in ("rollout", "actor_backward", "actor_step", "critic", "normalizers", "discriminator")}
    total = 0.0

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    for i in range(warmup + iterations):
        if i == warmup:
            clock.fwd = clock.bwd = 0.0
            parts = dict.fromkeys(parts, 0.0)
            total = 0.0
        shac.set_learning_rate(i, cfg.runner.iterations)
        sync()
        t_it = time.perf_counter()
        roll = shac.rollout(env)
        sync()
        t1 = time.perf_counter()
        shac.actor_optimizer.zero_grad(set_to_none=True)
        roll.actor_loss.backward()
        sync()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(shac.actor.parameters(), cfg.shac.actor_grad_clip)
        shac.actor_optimizer.step()
        sync()
        t3 = time.perf_counter()
        roll.actor_loss = roll.actor_loss.detach()
        shac.update_critic(roll)
        sync()
        t4 = time.perf_counter()
        shac.update_normalizers(roll)
        t5 = time.perf_counter()
        add.update(roll.deltas[roll.valid])
        sync()
        t6 = time.perf_counter()
        for k, dt in zip(parts, (t1 - t_it, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5), strict=True):
            parts[k] += dt
        total += t6 - t_it
    n = iterations
    it_s = total / n
    shares = {
        "sim_forward": clock.fwd / total,
        "sim_backward": clock.bwd / total,
        "rollout_other_forward": (parts["rollout"] - clock.fwd) / total,
        "backward_other": (parts["actor_backward"] - clock.bwd) / total,
        "actor_optimizer": parts["actor_step"] / total,
        "critic_updates": parts["critic"] / total,
        "normalizers": parts["normalizers"] / total,
        "discriminator_update": parts["discriminator"] / total,
    }
    return {
        "device": device,
        "num_envs": envs,
        "horizon": horizon,
        "iterations_measured": n,
        "setup_s": setup_s,
        "seconds_per_iteration": it_s,
        "iterations_per_s": 1.0 / it_s,
        "env_steps_per_s": envs * horizon / it_s,
        "projected_3000_iterations_h": 3000 * it_s / 3600.0,
        "share": shares,
        "sim_forward_us_per_env_step": clock.fwd / (n * envs * horizon) * 1e6,
        "sim_backward_us_per_env_step": clock.bwd / (n * envs * horizon) * 1e6,
        "torch_threads": torch.get_num_threads(),
        "bcg": cfg.bcg.enabled,
        "kappa": cfg.sim.kappa,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--envs", type=int, default=64)
    ap.add_argument("--horizon", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0 = torch default)")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    RESULTS.mkdir(parents=True, exist_ok=True)
    for dev in devices:
        r = measure(dev, args.envs, args.horizon, args.iterations, args.warmup)
        r.update(machine=platform.processor() or platform.machine(), torch=torch.__version__)
        out = RESULTS / f"train_throughput_{dev}.json"
        atomic_write_json(out, r)
        for k in ("iterations_per_s", "env_steps_per_s", "seconds_per_iteration", "projected_3000_iterations_h"):
            print(f"train_throughput.{dev}.{k}: {r[k]:.4g}")
        for k, v in r["share"].items():
            print(f"train_throughput.{dev}.share.{k}: {v:.3f}")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
