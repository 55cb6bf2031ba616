"""sim2sim test fixtures: an UNTRAINED policy exported by the real exporter (``bcg_deploy.export``).

The checkpoint is made with the real training code (untrained actor of the default size, fresh
normaliser, the training config defaults with the paper observation profile the actor reads, the short
synthetic clip of tests.synthetic).
Only the tests import training/export; the sim2sim package itself never does.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest


def make_untrained_checkpoint(path: Path, seconds: float = 1.5) -> Path:
    import torch

    from bcg_deploy.observations.paper import ObservationModule
    from bcg_deploy.robots import load_robot
    from bcg_deploy.training.checkpoint import build_checkpoint, save_checkpoint
    from bcg_deploy.training.config import TrainConfig
    from bcg_deploy.training.networks import Actor
    from bcg_deploy.training.normalizer import RunningNormalizer
    from tests.synthetic import synthetic_motion

    robot = load_robot()
    motion = synthetic_motion(robot, seconds=seconds)
    om = ObservationModule(robot, motion)
    torch.manual_seed(0)
    actor = Actor(om.obs_dim, robot.num_joints)
    config = TrainConfig()
    config.env.obs_profile = "paper"  # the actor above reads the paper ObservationModule's 849 values
    payload = build_checkpoint(
        robot=robot,
        motion=motion,
        observation=om,
        config=asdict(config),
        actor=actor,
        obs_normalizer=RunningNormalizer(om.obs_dim),
    )
    return save_checkpoint(path, payload)


def export_untrained(folder: Path, profile: str = "paper") -> Path:
    from bcg_deploy.export import ExportConfig, export_policy

    ckpt = folder / "run.pt"
    if not ckpt.exists():
        make_untrained_checkpoint(ckpt)
    out = folder / f"untrained_{profile}.onnx"
    export_policy(ExportConfig(checkpoint=ckpt, output=out, profile=profile, parity_samples=64, rollout_steps=5))
    return out


@pytest.fixture(scope="session")
def untrained_onnx(tmp_path_factory) -> Path:
    return export_untrained(tmp_path_factory.mktemp("untrained"))
