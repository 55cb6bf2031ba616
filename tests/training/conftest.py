"""Training test helpers: a short built-in clip and tiny configs (2-4 envs, horizon 2-4, small nets)."""

from __future__ import annotations

import dataclasses

import pytest

from bcg_deploy.motions import load_builtin
from bcg_deploy.motions.motion import Motion
from bcg_deploy.training.config import TrainConfig, apply_overrides

TINY = [
    "env.obs_profile=paper",
    "env.num_envs=2",
    "shac.horizon=3",
    "shac.actor_hidden=16,16",
    "shac.critic_hidden=16",
    "shac.num_critics=2",
    "shac.critic_iterations=2",
    "shac.critic_minibatches=2",
    "add.hidden=16,16",
    "add.batch_size=16",
    "add.replay_size=64",
    "runner.tensorboard=false",
]


def slice_motion(m: Motion, start: int, stop: int) -> Motion:
    """Frames [start, stop) of a Motion (all per-frame arrays)."""
    arrays = {
        f.name: getattr(m, f.name)[start:stop]
        for f in dataclasses.fields(m)
        if f.name not in ("name", "source", "fps", "extras")
    }
    return Motion(name=m.name, source={**m.source, "frames": [start, stop]}, fps=m.fps, **arrays)


@pytest.fixture(scope="session")
def tiny_motion() -> Motion:
    """1.2 s of the built-in dance clip (60 frames at 50 Hz)."""
    return slice_motion(load_builtin("dance"), 100, 160)


def tiny_cfg(*overrides: str) -> TrainConfig:
    return apply_overrides(TrainConfig(), [*TINY, *overrides])
