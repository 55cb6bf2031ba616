"""Export test fixtures: checkpoints written by the training code's own build/save functions.

The policy is untrained (freshly initialised networks, seeded); the motion is the built-in ``dance``
task clip of bcg_deploy.motions (procedural, 15 s at 50 Hz, no licensed data), and the normaliser
statistics are gathered from that clip's noisy observations, as training would.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from bcg_deploy.export.parity import clip_states
from bcg_deploy.motions import load_task_motion
from bcg_deploy.observations.paper import ObservationModule
from bcg_deploy.robots import load_robot
from bcg_deploy.training.checkpoint import MOTION_ARRAYS, build_checkpoint, save_checkpoint
from bcg_deploy.training.config import TrainConfig, to_dict
from bcg_deploy.training.networks import Actor, Critic
from bcg_deploy.training.normalizer import RunningNormalizer


def make_payload(robot, motion, actor_seed: int = 0, norm_scale: float = 1.0) -> dict:
    """An untrained run.pt payload; ``norm_scale`` scales the observations the normaliser saw."""
    om = ObservationModule(robot, motion)
    torch.manual_seed(actor_seed)
    actor = Actor(om.obs_dim, robot.num_joints)
    critics = [Critic(om.obs_dim) for _ in range(3)]
    norm = RunningNormalizer(om.obs_dim)
    states = clip_states({k: getattr(motion, k) for k in MOTION_ARRAYS})
    q = torch.as_tensor(states.q, dtype=torch.float32)
    qd = torch.as_tensor(states.qd, dtype=torch.float32)
    gen = torch.Generator().manual_seed(actor_seed)
    with torch.no_grad():
        for _ in range(4):
            obs = om.add_noise(om(q, qd, torch.arange(q.shape[0])), gen)
            norm.update(obs * norm_scale)
    return _checkpoint(robot, motion, om, actor, norm, critics)


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """torch on one thread: exporting is many small torch calls (MuJoCo rollout, parity chunks), which
    two OpenMP threads slow down many times over when the other core is busy (shared machine)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


@pytest.fixture(autouse=True)
def _one_torch_thread_per_test() -> Iterator[None]:
    with one_torch_thread():
        yield


@pytest.fixture(scope="session")
def robot():
    return load_robot("g1")


@pytest.fixture(scope="session")
def motion(robot):
    return load_task_motion("dance", prefer="builtin", robot=robot)


@pytest.fixture(scope="session")
def ckpt_dir(tmp_path_factory, robot, motion) -> Path:
    d = tmp_path_factory.mktemp("ckpt")
    with one_torch_thread():
        save_checkpoint(d / "run.pt", make_payload(robot, motion))
        save_checkpoint(d / "run_other_norm.pt", make_payload(robot, motion, norm_scale=3.0))
        for profile in ("beyondmimic", "beyondmimic_wose"):
            save_checkpoint(d / f"run_{profile}.pt", make_profile_payload(robot, motion, profile))
    return d


@pytest.fixture(scope="session")
def deploy_exports(tmp_path_factory, ckpt_dir) -> dict:
    """One export per deployable profile (unitree from the no-state-estimation checkpoint: same terms)."""
    from bcg_deploy.export import ExportConfig, export_policy

    src = {"beyondmimic": "beyondmimic", "beyondmimic_wose": "beyondmimic_wose", "unitree": "beyondmimic_wose"}
    out = {}
    with one_torch_thread():
        for profile, ck in src.items():
            path = tmp_path_factory.mktemp(profile) / "exported" / "policy.onnx"
            path.parent.mkdir()
            cfg = ExportConfig(checkpoint=ckpt_dir / f"run_{ck}.pt", output=path, profile=profile, parity_samples=300)
            out[profile] = export_policy(cfg)
    return out


@pytest.fixture(scope="session")
def raw_export(tmp_path_factory, ckpt_dir):
    """The default export (paper profile: raw inputs, bcgd and CSV metadata)."""
    from bcg_deploy.export import ExportConfig, export_policy

    out = tmp_path_factory.mktemp("raw") / "exported" / "policy.onnx"
    out.parent.mkdir()
    with one_torch_thread():
        return export_policy(ExportConfig(checkpoint=ckpt_dir / "run.pt", output=out))


def make_profile_payload(robot, motion, profile: str, actor_seed: int = 0) -> dict:
    """An untrained run.pt payload whose actor reads the deployable ``profile`` (config env.obs_profile)."""
    from bcg_deploy.observations.profile import ProfileObservation

    om = ProfileObservation(robot, motion, profile)
    torch.manual_seed(actor_seed)
    actor = Actor(om.obs_dim, robot.num_joints)
    critics = [Critic(om.obs_dim) for _ in range(3)]
    norm = RunningNormalizer(om.obs_dim)
    states = clip_states({k: getattr(motion, k) for k in MOTION_ARRAYS})
    q = torch.as_tensor(states.q, dtype=torch.float32)
    qd = torch.as_tensor(states.qd, dtype=torch.float32)
    gen = torch.Generator().manual_seed(actor_seed)
    with torch.no_grad():
        for _ in range(4):
            last = 2 * torch.rand(q.shape[0], robot.num_joints, generator=gen) - 1
            norm.update(om.add_noise(om(q, qd, torch.arange(q.shape[0]), last), gen))
    return _checkpoint(robot, motion, om, actor, norm, critics, profile)


def _checkpoint(robot, motion, om, actor, norm, critics, profile: str | None = None) -> dict:  # noqa: ANN001
    """An export-ready checkpoint dict of these networks (default config; ``profile``: env.obs_profile, paper
    unless given)."""
    cfg = TrainConfig()
    cfg.shac.actor_hidden = actor.hidden
    cfg.env.obs_profile = "paper" if profile is None else profile
    plain = to_dict(cfg)
    plain["sim"]["control_dt"] = cfg.sim.physics_dt * cfg.sim.substeps
    return build_checkpoint(
        robot=robot,
        motion=motion,
        observation=om,
        config=plain,
        actor=actor,
        obs_normalizer=norm,
        critics=critics,
        target_critics=critics,
        optimizers={"actor": torch.optim.Adam(actor.parameters())},
        iteration=0,
    )


def train_tiny(out: Path, profile: str) -> Path:
    """``bcgd train dance --obs PROFILE --iterations 2 --envs 8 --horizon 4 --nproc 1`` (the CLI, in process;
    TensorBoard off) into ``out``; returns run.pt."""
    from typer.testing import CliRunner

    from bcg_deploy.cli import _register, app

    _register()
    args = ["train", "dance", "--obs", profile, "--iterations", "2", "--envs", "8", "--horizon", "4", "--nproc", "1",
            "--out", str(out), "--set", "runner.tensorboard=false"]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    return out / "run.pt"


def export_tiny(tmp_path_factory, profile: str):
    """A tiny trained run of ``profile`` exported with ``--profile`` the same into ``<dir>/exported/policy.onnx``
    (the unitree layout: ``params/`` beside ``exported/``); returns (run.pt, ExportResult)."""
    from bcg_deploy.export import ExportConfig, export_policy

    with one_torch_thread():
        run = train_tiny(tmp_path_factory.mktemp(f"train_{profile}"), profile)
        path = tmp_path_factory.mktemp(f"tiny_{profile}") / "exported" / "policy.onnx"
        path.parent.mkdir()
        return run, export_policy(ExportConfig(checkpoint=run, output=path, profile=profile, parity_samples=300))


@pytest.fixture(scope="session")
def tiny_unitree(tmp_path_factory):
    """(run.pt, ExportResult) of a tiny ``--obs unitree`` training exported with ``--profile unitree``."""
    return export_tiny(tmp_path_factory, "unitree")


@pytest.fixture(scope="session")
def tiny_holosoma(tmp_path_factory):
    """(run.pt, ExportResult) of a tiny ``--obs holosoma`` training exported with ``--profile holosoma``."""
    return export_tiny(tmp_path_factory, "holosoma")
