"""Shared by the training benchmarks (``python bench/<name>.py`` puts this folder on ``sys.path``)."""

from __future__ import annotations

import platform
from collections.abc import Sequence
from pathlib import Path

import torch

from bcg_deploy.errors import BcgdError
from bcg_deploy.fileio import atomic_write_json
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


def write_report(path: Path, description: str, args, results: list, seconds: float) -> None:
    """Write a training benchmark's JSON report atomically: its description, the command-line settings
    (``args``, an argparse namespace), the per-case ``results``, wall ``seconds``, machine and torch version."""
    report = {
        "description": description,
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "results": results,
        "seconds": seconds,
        "machine": {"cpus": torch.get_num_threads(), "platform": platform.platform()},
        "versions": {"torch": torch.__version__},
    }
    atomic_write_json(path, report)


def named_checkpoints(items: Sequence[str]) -> list[tuple[str, Path]]:
    """``NAME=path/to/run.pt`` arguments as (name, path) pairs, every path checked before any work starts.

    Raises a one-line ``BcgdError`` for a malformed item or a missing file."""
    pairs = []
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise BcgdError(f"{item!r}: expected NAME=path/to/run.pt")
        if not Path(path).is_file():
            raise BcgdError(f"checkpoint {path} not found (for {name})")
        pairs.append((name, Path(path)))
    return pairs
