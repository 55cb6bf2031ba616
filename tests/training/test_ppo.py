"""PPO (rsl_rl) on the imitation env: paper defaults, the forward-only env wrapper, SHAC's checkpoint
layout, and a tiny run that ``bcgd export`` and ``bcgd sim2sim`` read unchanged."""

from __future__ import annotations

import json
import signal

import pytest
import torch

pytest.importorskip("rsl_rl", reason="PPO needs the optional extra bcg-deploy[ppo] (rsl-rl-lib)")

from bcg_deploy.errors import BcgdError  # noqa: E402
from bcg_deploy.training import checkpoint as ckpt_io  # noqa: E402
from bcg_deploy.training.config import PPOCfg, TrainConfig, apply_overrides, ppo_defaults  # noqa: E402
from bcg_deploy.training.logger import read_metrics  # noqa: E402
from bcg_deploy.training.networks import Actor, Critic  # noqa: E402
from bcg_deploy.training.normalizer import RunningNormalizer  # noqa: E402

from .conftest import TINY  # noqa: E402

PPO_TINY = [
    *TINY,
    "ppo.num_steps_per_env=4",
    "ppo.actor_hidden=16,16",
    "ppo.critic_hidden=16",
    "ppo.num_mini_batches=2",
]


def ppo_cfg(*overrides: str) -> TrainConfig:
    return apply_overrides(ppo_defaults(TrainConfig()), [*PPO_TINY, *overrides])


def test_paper_defaults():
    p = PPOCfg()
    assert (p.num_envs, p.num_steps_per_env, p.iterations) == (4096, 24, 3000)
    assert p.num_envs * p.num_steps_per_env * p.iterations == 294_912_000  # the paper's 295 M env steps
    assert (p.learning_rate, p.schedule, p.desired_kl) == (1e-3, "adaptive", 0.01)
    assert (p.num_learning_epochs, p.num_mini_batches, p.clip_param, p.entropy_coef) == (5, 4, 0.2, 0.0)
    assert (p.max_grad_norm, p.init_std, p.normalize_obs) == (1.0, 0.3, True)
    shac = TrainConfig().shac
    assert (p.actor_hidden, p.critic_hidden) == (shac.actor_hidden, shac.critic_hidden)
    cfg = ppo_defaults(TrainConfig())
    assert (cfg.algo, cfg.env.num_envs, cfg.runner.iterations) == ("ppo", 4096, 3000)
    assert cfg.add.updates_per_iter == p.num_learning_epochs * p.num_mini_batches  # one disc step per minibatch


def test_ppo_refuses_bcg():
    with pytest.raises(BcgdError, match="SHAC method"):
        ppo_cfg("bcg.enabled=true").validate()


@pytest.fixture(scope="module")
def trainer(tiny_motion, tmp_path_factory):
    from bcg_deploy.training.ppo import PPOTrainer

    out = tmp_path_factory.mktemp("ppo")
    return PPOTrainer(ppo_cfg(f"runner.out_dir={out}", "runner.iterations=2"), motion=tiny_motion)


def test_checkpoint_networks_are_the_rsl_rl_models(trainer):
    """The stored Actor / Critic / RunningNormalizer compute exactly what rsl_rl's models compute."""
    from bcg_deploy.training.ppo import actor_state_dict, critic_state_dict, normalizer_state_dict

    alg = trainer.alg
    obs = trainer.venv.get_observations()
    with torch.no_grad():
        alg.actor.update_normalization(obs)  # non-trivial statistics
        actor = Actor.from_state_dict(actor_state_dict(alg.actor))
        norm = RunningNormalizer.from_state_dict(normalizer_state_dict(alg.actor))
        assert float(norm.count) == obs.batch_size[0]
        want = torch.tanh(alg.actor(obs))  # rsl_rl's deterministic output, squashed as the env does
        assert torch.equal(actor.deterministic(norm(obs["policy"])), want)
        assert torch.allclose(actor.std, alg.actor.distribution.log_std_param.exp())
        critic = Critic.from_state_dict(critic_state_dict(alg.critic))
        cnorm = alg.critic.obs_normalizer
        assert torch.equal(critic(cnorm(obs["critic"])), alg.critic(obs)[:, 0])


def test_env_wrapper_steps_forward_only(trainer):
    venv, env = trainer.venv, trainer.env
    obs = venv.get_observations()
    assert set(obs.keys()) == {"policy", "critic"} and obs["critic"].shape == (env.num_envs, env.obs_dim)
    assert not torch.equal(obs["policy"], obs["critic"])  # the actor's input carries the training noise
    actions = torch.full((env.num_envs, env.num_actions), 3.0, requires_grad=True)
    obs2, rew, done, extras = venv.step(actions)
    assert torch.equal(env.last_action, torch.tanh(actions.detach()))
    assert rew.shape == done.shape == extras["time_outs"].shape == (env.num_envs,)
    assert not rew.requires_grad and not env.q.requires_grad
    assert env.sim.live_steps == 0 and env.sim._grad_owner is None  # no tape, no adjoint buffers
    assert env.sim._nograd_data.grad_buffer.numel() == 0
    deltas, valid, stats = venv.pop_rollout()
    assert deltas.shape == (1, env.num_envs, env.feature_dim) and valid.all()
    assert len(stats["reward"]) == 1 and venv.deltas == [] and venv.stats["reward"] == []


def test_tiny_run_exports_and_replays_in_mujoco(trainer, tmp_path):
    """A PPO run.pt goes through the real exporter and sim2sim, unchanged."""
    from bcg_deploy.export import ExportConfig, export_policy
    from bcg_deploy.sim2sim import Sim2SimConfig, run_sim2sim

    disc0 = trainer.add.disc.out.weight.detach().clone()
    res = trainer.run()
    assert res.iteration == 2 and res.checkpoint is not None
    ck = ckpt_io.load_checkpoint(res.checkpoint, required=ckpt_io.REQUIRED_KEYS)
    assert ck["config"]["algo"] == "ppo" and set(ck["optimizers"]) == {"ppo", "discriminator"}
    assert {"env_state", "add_replay", "ppo_state"} <= set(ck) and len(ck["critics"]) == 1
    rows = read_metrics(res.run_dir)
    assert [r["iteration"] for r in rows] == [1, 2] and rows[-1]["env_steps"] == 2 * 2 * 4
    for key in ("reward", "tracking_error_cm", "learning_rate", "ppo_surrogate_loss", "disc_loss"):
        assert key in rows[-1]
    disc = trainer.add.disc.out.weight.detach()
    assert not torch.equal(disc, disc0)  # the discriminator trained on PPO's rollouts
    assert torch.equal(ck["discriminator"]["out.weight"], disc)
    onnx_path = tmp_path / "policy.onnx"
    export_policy(ExportConfig(checkpoint=res.checkpoint, output=onnx_path, parity_samples=64, rollout_steps=5))
    report = json.loads(run_sim2sim(onnx_path, Sim2SimConfig(runs=1, max_duration_s=0.3)).to_json())
    assert len(report["runs"]) == 1 and report["runs"][0]["e_track_cm"] > 0


@pytest.mark.parametrize("obs", ["paper", "beyondmimic"])
def test_cli_trains_ppo(tmp_path, obs):
    """``bcgd train dance --algo ppo`` with an observation profile: run.pt records PPO and the profile."""
    from typer.testing import CliRunner

    from bcg_deploy.cli import _register, app
    from bcg_deploy.profiles import get_profile

    _register()
    sets = [a for s in PPO_TINY if not s.startswith("env.num_envs") for a in ("--set", s)]
    args = ["train", "dance", "--algo", "ppo", "--envs", "2", "--iterations", "1", "--obs", obs, "--out", str(tmp_path)]
    r = CliRunner().invoke(app, [*args, *sets])
    assert r.exit_code == 0, r.output
    assert "PPO" in r.output and (tmp_path / "run.pt").exists()
    ck = ckpt_io.load_checkpoint(tmp_path / "run.pt")
    assert ck["config"]["algo"] == "ppo" and ck["config"]["env"]["num_envs"] == 2
    assert [t["name"] for t in ck["observation"]] == list(get_profile(obs).term_names)
    assert (
        ck["obs_normalizer"]["mean"].shape[-1]
        == ck["actor"]["body.0.weight"].shape[1]
        == sum(t["size"] for t in ck["observation"])
    )


def test_ppo_keeps_snapshots_and_saves_when_interrupted(tiny_motion, tmp_path, monkeypatch):
    """``runner.keep_every`` (on by default) and a stop request go through the shared run loop for PPO too."""
    from bcg_deploy.training.ppo import PPOTrainer

    keep = ("runner.iterations=3", "runner.keep_every=1", "runner.tensorboard=false")
    cfg = ppo_cfg(f"runner.out_dir={tmp_path}", *keep)
    trainer = PPOTrainer(cfg, motion=tiny_motion)
    step = trainer.step

    def step_then_stop():
        out = step()
        if trainer.iteration == 2:
            trainer._stop.note(signal.SIGINT)
        return out

    monkeypatch.setattr(trainer, "step", step_then_stop)
    result = trainer.run()
    assert result.iteration == 2 and result.checkpoint == tmp_path / "run.pt"
    assert [e["event"] for e in result.events if e["event"] == "interrupted"] == ["interrupted"]
    assert sorted(p.name for p in (tmp_path / "snapshots").iterdir()) == ["run_000001.pt"]
