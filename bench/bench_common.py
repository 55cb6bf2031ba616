"""Shared by the training benchmarks (``python bench/<name>.py`` puts this folder on ``sys.path``)."""

from __future__ import annotations

from collections.abc import Sequence

from bcg_deploy.training.config import TrainConfig, apply_overrides
from bcg_deploy.training.runner import Trainer


def make_trainer(
    args, out_dir: str, *, kappa: float, iterations: int, bundle: bool | None = None, extra: Sequence[str] = ()
) -> Trainer:
    """A ``Trainer`` from the common benchmark flags (``args.task``, ``envs``, ``horizon``, ``seed``, ``set``),
    writing to ``out_dir`` without TensorBoard; ``bundle`` sets ``bcg.enabled`` when given."""
    cfg = TrainConfig()
    overrides = [
        f"motion.task={args.task}",
        f"env.num_envs={args.envs}",
        f"shac.horizon={args.horizon}",
        f"sim.kappa={kappa}",
        f"runner.seed={args.seed}",
        f"runner.out_dir={out_dir}",
        "runner.tensorboard=false",
        f"runner.iterations={iterations}",
    ]
    if bundle is not None:
        overrides.append(f"bcg.enabled={bundle}")
    apply_overrides(cfg, [*overrides, *extra, *args.set])
    return Trainer(cfg)
