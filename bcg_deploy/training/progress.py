"""What a training run reports, as text: the header of a planned run, one line per iteration, the closing lines.

``bcgd train`` prints these (rich markup is the CLI's: the text here is plain); a notebook can print them too.
Units as in the metrics: reward per control step, tracking error in cm, episode length in control steps.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from bcg_deploy.errors import BcgdError
from bcg_deploy.training.config import TrainConfig
from bcg_deploy.training.parallel.distributed import World
from bcg_deploy.training.run import horizon_field, motion_text

if TYPE_CHECKING:
    from bcg_deploy.training.runner import TrainResult


def fmt(v: float | None, spec: str) -> str:
    """``v`` formatted by ``spec``; ``-`` for None or NaN (a metric not measured yet)."""
    return "-" if v is None or v != v else format(v, spec)


def header(cfg: TrainConfig, resume: Path | None, world: World) -> str:
    """The run in one line (after ``bcgd train``): clip, sizes, device, method, ranks, folder."""
    b = cfg.bcg
    method = f"BCG B {b.num_branches} H {b.horizon} tau {b.tau:g} N" if b.enabled else "plain SHAC (no BCG)"
    if cfg.shac.critic_bf16:
        method += "  critic regression bf16"
    if cfg.algo == "ppo":
        method = "PPO (rsl_rl, forward-only simulator)"
    return (
        f"{motion_text(cfg, resume)}  envs {cfg.env.num_envs}  "
        f"horizon {getattr(cfg.ppo if cfg.algo == 'ppo' else cfg.shac, horizon_field(cfg))}  "
        f"iterations {cfg.runner.iterations}  kappa {cfg.sim.kappa:g}  device {cfg.runner.device}  "
        f"seed {cfg.runner.seed}  {method}"
        + (f"  ranks {world.size} x {world.local_envs} envs" if world.distributed else "")
        + f"  -> {cfg.runner.out_dir}"
        + (f"  (resume {resume})" if resume else "")
    )


class ProgressLine:
    """``line(metrics)``: speed, ETA to ``total`` iterations, reward, tracking error, episode length (and the
    bundles of a BCG run). The ETA counts from the first line seen: a resumed run's earlier iterations do not
    make it optimistic. ``first``: the iteration this process started after (None before the first line)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.first: int | None = None
        self._t0 = 0.0

    def __call__(self, m: dict) -> str:
        it = m["iteration"]
        if self.first is None:
            self.first, self._t0 = it - 1, time.perf_counter() - m.get("time_s", 0.0)
        eta = (time.perf_counter() - self._t0) / max(it - self.first, 1) * (self.total - it)
        line = (
            f"{m.get('iterations_per_s', 0.0):.2f} it/s  "
            f"ETA {int(eta // 3600)}:{int(eta % 3600 // 60):02d}:{int(eta % 60):02d}  "
            f"reward {fmt(m.get('reward'), '.3f')}  track {fmt(m.get('tracking_error_cm'), '.1f')} cm  "
            f"ep-len {fmt(m.get('episode_length'), '.0f')}"
        )
        if "bcg_starts" in m:
            line += f"  bundles {m['bcg_starts']} (+{100 * m.get('bcg_row_overhead', 0.0):.0f}% sim rows)"
        return line


def closing(result: TrainResult, total: int, wall_s: float) -> tuple[list[str], str | None, int]:
    """(lines, warning, exit code) of a finished run: where it ended and its files, then how to go on;
    ``warning`` when the last model was refused (non-finite) and the checkpoint holds an earlier one; exit code
    128 + the signal of an interrupted run (130 Ctrl-C, 143 SIGTERM), else 0. A run that wrote no checkpoint is
    a one-line BcgdError."""
    m, d = result.metrics, result.run_dir
    kinds = {e["event"] for e in result.events}
    stopped = "interrupted" in kinds
    lines = [
        f"{'interrupted' if stopped else 'done'}: iteration {result.iteration}/{total} in {wall_s:.0f} s; reward "
        f"{fmt(m.get('reward'), '.3f')}, tracking error {fmt(m.get('tracking_error_cm'), '.1f')} cm, episode "
        f"length {fmt(m.get('episode_length'), '.0f')} steps"
    ]
    if result.checkpoint is None or not Path(result.checkpoint).exists():
        raise BcgdError(f"no checkpoint written in {d} (see {d / 'events.jsonl'})")
    ck = Path(result.checkpoint)
    warning = None
    if "checkpoint_refused" in kinds:
        warning = (
            f"the model at iteration {result.iteration} was not saved (non-finite): {ck} holds an earlier iteration"
        )
    files = [("checkpoint", ck), ("metrics", d / "metrics.jsonl"), ("curve", d / "learning_curve.png")]
    shown = [f"{name} {path}" for name, path in files if path.exists()]
    if (d / "tb").is_dir():
        shown.append(f"tensorboard --logdir {d / 'tb'}")
    lines.append("  ".join(shown))
    if stopped:
        lines.append(f"continue with: bcgd train --resume {ck}")
        signum = next(e.get("signal", 2) for e in result.events if e["event"] == "interrupted")
        return lines, warning, 128 + int(signum)
    lines.append(f"next: bcgd export {ck}   (then: bcgd sim2sim policy.onnx)")
    return lines, warning, 0
