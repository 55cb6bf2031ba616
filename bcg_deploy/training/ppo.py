"""PPO (rsl_rl's implementation) on the imitation task: the paper's baseline in the same tool.

``train_ppo(cfg, ...) -> TrainResult`` is what ``bcgd train --algo ppo`` calls (through
``training.run.train``). It needs the optional extra ``pip install bcg-deploy[ppo]`` (``rsl-rl-lib``).

- The env is ``ImitationEnv`` (same observation, ADD reward, terminations, domain randomisation)
  behind ``vec_env.ImitationVecEnv``, which steps the simulator forward-only.
- The algorithm is ``rsl_rl.algorithms.PPO`` unchanged (clipped surrogate, clipped value loss, GAE,
  adaptive KL learning rate, gradient clipping), built from ``PPOCfg`` (the paper's settings).
- Its actor and critic are ``SHACLayoutModel``: rsl_rl's ``MLPModel`` with SHAC's network layout
  (``networks.mlp`` blocks, a linear head) and SHAC's ``RunningNormalizer`` as the empirical
  observation normaliser, so ``actor_state_dict`` / ``critic_state_dict`` are ``networks.Actor`` /
  ``Critic`` state dicts and run.pt has the SHAC checkpoint schema: ``bcgd export`` and ``bcgd sim2sim``
  read it unchanged. The Gaussian is over the pre-tanh action (std in log space, ``init_std`` 0.3).
- ADD: the discriminator is trained after every rollout on that rollout's residuals (and its replay),
  as in SHAC; its reward enters PPO as a plain reward (no reward scaling).

Each iteration: ``num_steps_per_env`` env steps for all envs (``PPO.act`` / ``process_env_step``), GAE
(``compute_returns``), ``PPO.update`` (epochs x minibatches), the discriminator step, then metrics to
``metrics.jsonl`` / TensorBoard and run.pt every ``runner.save_every`` iterations and at the end.
"""

from __future__ import annotations

import collections
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn

from bcg_deploy.errors import BcgdError
from bcg_deploy.fileio import atomic_write_bytes
from bcg_deploy.motions.motion import Motion
from bcg_deploy.training import checkpoint as ckpt_io
from bcg_deploy.training.config import PPOCfg, TrainConfig, to_dict, training_robot
from bcg_deploy.training.device import resolve_device
from bcg_deploy.training.env.add import ADD
from bcg_deploy.training.env.imitation import ImitationEnv
from bcg_deploy.training.env.vec_env import ImitationVecEnv
from bcg_deploy.training.logger import MetricsLogger, episode_metrics
from bcg_deploy.training.networks import mlp
from bcg_deploy.training.normalizer import RunningNormalizer
from bcg_deploy.training.parallel.distributed import StopRequest, World
from bcg_deploy.training.run_files import CHECKPOINT_NAME
from bcg_deploy.training.runner import Trainer, TrainResult, load_motion, seed_everything

try:
    from rsl_rl.algorithms import PPO
    from rsl_rl.models import MLPModel
    from rsl_rl.modules.distribution import GaussianDistribution
    from rsl_rl.storage import RolloutStorage
    from tensordict import TensorDict
except ModuleNotFoundError as exc:  # the optional extra is missing: one clear line from the CLI
    raise BcgdError(
        f"--algo ppo needs rsl_rl ({exc.name} is not installed): pip install 'bcg-deploy[ppo]' (rsl-rl-lib)"
    ) from None

OBS_GROUPS = {"actor": ["policy"], "critic": ["critic"]}
"""rsl_rl observation sets: the actor reads the noisy ``policy`` group, the critic the clean one."""


class SHACLayoutModel(MLPModel):
    """rsl_rl ``MLPModel`` with SHAC's layout: ``RunningNormalizer`` -> ``networks.mlp`` -> Linear.

    ``mlp.body`` is SHAC's hidden stack (Linear -> ELU -> LayerNorm blocks), ``mlp.head`` the output
    layer; with ``distribution_cfg`` the head is the Gaussian mean. Only ``activation="elu"`` exists
    (SHAC's networks are ELU)."""

    def __init__(
        self,
        obs: TensorDict,
        obs_groups: dict[str, list[str]],
        obs_set: str,
        output_dim: int,
        hidden_dims: tuple[int, ...] | list[int] = (512, 256, 128),
        activation: str = "elu",
        obs_normalization: bool = True,
        distribution_cfg: dict | None = None,
    ) -> None:
        if activation != "elu":
            raise BcgdError(f"ppo: activation {activation!r} is not available (SHAC's networks are ELU)")
        super().__init__(obs, obs_groups, obs_set, output_dim, tuple(hidden_dims), activation, False, distribution_cfg)
        hidden = tuple(int(h) for h in hidden_dims)
        out = self.distribution.input_dim if self.distribution is not None else output_dim
        self.mlp = nn.Sequential(
            OrderedDict(body=mlp(self.obs_dim, hidden), head=nn.Linear(hidden[-1] if hidden else self.obs_dim, out))
        )
        self.obs_normalization = obs_normalization
        self.obs_normalizer = RunningNormalizer(self.obs_dim) if obs_normalization else nn.Identity()


def build_ppo(cfg: PPOCfg, obs: TensorDict, num_envs: int, num_actions: int, device: str | torch.device) -> PPO:
    """rsl_rl's ``PPO`` with ``SHACLayoutModel`` actor / critic and its rollout storage, from ``cfg``."""
    dist = {"class_name": GaussianDistribution, "init_std": cfg.init_std, "std_type": "log"}
    actor = SHACLayoutModel(obs, OBS_GROUPS, "actor", num_actions, cfg.actor_hidden, "elu", cfg.normalize_obs, dist)
    critic = SHACLayoutModel(obs, OBS_GROUPS, "critic", 1, cfg.critic_hidden, "elu", cfg.normalize_obs)
    storage = RolloutStorage("rl", num_envs, cfg.num_steps_per_env, obs, [num_actions], str(device))
    return PPO(
        actor,
        critic,
        storage,
        num_learning_epochs=cfg.num_learning_epochs,
        num_mini_batches=cfg.num_mini_batches,
        clip_param=cfg.clip_param,
        gamma=cfg.gamma,
        lam=cfg.lam,
        value_loss_coef=cfg.value_loss_coef,
        entropy_coef=cfg.entropy_coef,
        learning_rate=cfg.learning_rate,
        max_grad_norm=cfg.max_grad_norm,
        use_clipped_value_loss=cfg.use_clipped_value_loss,
        schedule=cfg.schedule,
        desired_kl=cfg.desired_kl,
        device=str(device),
        multi_gpu_cfg=None,
    )


# ---------------------------------------------------------------------------------------------
# SHAC's checkpoint layout


def actor_state_dict(model: SHACLayoutModel) -> dict[str, torch.Tensor]:
    """The actor as a ``networks.Actor`` state dict (``body.*``, ``mu.*``, ``log_std``)."""
    sd = {f"body.{k}": v.detach().clone() for k, v in model.mlp.body.state_dict().items()}
    sd.update({f"mu.{k}": v.detach().clone() for k, v in model.mlp.head.state_dict().items()})
    sd["log_std"] = model.distribution.log_std_param.detach().clone()
    return sd


def critic_state_dict(model: SHACLayoutModel) -> dict[str, torch.Tensor]:
    """The critic as a ``networks.Critic`` state dict (``body.*``, ``out.*``)."""
    sd = {f"body.{k}": v.detach().clone() for k, v in model.mlp.body.state_dict().items()}
    sd.update({f"out.{k}": v.detach().clone() for k, v in model.mlp.head.state_dict().items()})
    return sd


def normalizer_state_dict(model: SHACLayoutModel) -> dict[str, torch.Tensor]:
    """The model's observation normaliser as a ``RunningNormalizer`` state dict (an exact identity,
    eps 0 and clip inf, when normalisation is off)."""
    norm = model.obs_normalizer
    if not isinstance(norm, RunningNormalizer):
        norm = RunningNormalizer(model.obs_dim, eps=0.0, clip=math.inf)
    return {k: v.detach().clone() for k, v in norm.state_dict().items()}


# ---------------------------------------------------------------------------------------------
# the run


class PPOTrainer:
    """One PPO run's objects; ``run()`` iterates to ``runner.iterations`` (or ``stop_at``)."""

    def __init__(
        self,
        cfg: TrainConfig,
        motion: Motion | None = None,
        sim: Any = None,
        on_iteration: Callable[[dict], None] | None = None,
        on_event: Callable[[dict], None] | None = None,
    ) -> None:
        cfg.validate()
        if cfg.algo != "ppo":
            raise BcgdError(f"PPOTrainer needs algo 'ppo', got {cfg.algo!r}")
        if cfg.sim.dtype != "float32":
            raise BcgdError("ppo: sim.dtype must be float32 (rsl_rl's storage is float32)")
        self.cfg = cfg
        self.robot = training_robot(cfg)
        self.device = resolve_device(cfg.runner.device)
        if cfg.runner.threads > 0:
            torch.set_num_threads(cfg.runner.threads)
        seed_everything(cfg.runner.seed)
        self.motion = motion if motion is not None else load_motion(cfg.motion, self.robot)
        self.env = ImitationEnv(cfg, self.robot, self.motion, sim=sim, device=self.device)
        self.add = ADD(self.env.feature_dim, cfg.add).to(self.device)
        self.env.add = self.add
        self.env.reset()
        self.venv = ImitationVecEnv(self.env)
        self.obs = self.venv.get_observations()
        self.alg = build_ppo(cfg.ppo, self.obs, self.env.num_envs, self.env.num_actions, self.device)
        self.alg.train_mode()
        self.run_dir = Path(cfg.runner.out_dir)
        self.iteration = 0
        self.episode_len: collections.deque = collections.deque(maxlen=100)
        self.episode_return: collections.deque = collections.deque(maxlen=100)
        self.events: list[dict] = []
        self.on_iteration, self.on_event = on_iteration, on_event
        self.last_metrics: dict = {}
        self.world = World(env_sizes=[self.env.num_envs])  # one process (Trainer.run's data-parallel hooks)
        self._stop = StopRequest()  # Trainer.run's stop signals
        self.logger = MetricsLogger(self.run_dir, cfg.runner.tensorboard)
        _write_config(self.run_dir, cfg)
        missing = [k for k, ok in self.env.sim_params_applied.items() if not ok and k != "joint_friction"]
        if cfg.domain_rand.enabled and missing:
            self._event("domain_rand", f"not applied (the simulator rejected them): {', '.join(missing)}")

    def _event(self, kind: str, message: str, **extra: Any) -> None:
        e = {"iteration": self.iteration, "event": kind, "message": message, **extra}
        self.events.append(e)
        self.logger.event(self.iteration, kind, message)
        if self.on_event is not None:
            self.on_event(e)

    def collect(self) -> dict:
        """One rollout of ``num_steps_per_env`` steps into the algorithm's storage, then GAE; the
        rollout's ADD residuals / validity / stats from the env wrapper."""
        alg, venv = self.alg, self.venv
        obs = self.obs
        with torch.no_grad():
            for _ in range(self.cfg.ppo.num_steps_per_env):
                actions = alg.act(obs)
                obs, rewards, dones, extras = venv.step(actions)
                alg.process_env_step(obs, rewards, dones, extras)
            alg.compute_returns(obs)
        self.obs = obs
        deltas, valid, stats = venv.pop_rollout()
        return {"deltas": deltas, "valid": valid, "stats": stats}

    def step(self) -> dict:
        """One PPO iteration (rollout, PPO update, discriminator update); returns its metrics."""
        t0 = time.perf_counter()
        roll = self.collect()
        t1 = time.perf_counter()
        losses = self.alg.update()
        disc = self.add.update(roll["deltas"][roll["valid"]])
        dt = time.perf_counter() - t0
        self.iteration += 1
        m = self._metrics(roll["stats"], dt, t1 - t0, losses, disc)
        self.last_metrics = m
        self.logger.log(m)
        if self.on_iteration is not None:
            self.on_iteration(m)
        return m

    def _metrics(self, st: dict, dt: float, collect_s: float, losses: dict, disc: dict) -> dict:
        self.episode_len.extend(st["episode_len"])
        self.episode_return.extend(st["episode_return"])
        if st["diverged"]:
            self._event("diverged_envs", f"{st['diverged']} env-steps non-finite or exploding: reset, contributed 0")
        track = torch.stack(st["tracking_error"]).double()
        n_steps = self.env.num_envs * self.cfg.ppo.num_steps_per_env
        mean = lambda k: float(torch.stack(st[k]).double().mean())  # noqa: E731
        return {
            "iteration": self.iteration,
            "env_steps": self.iteration * n_steps,
            "time_s": dt,
            "collect_time_s": collect_s,
            "learn_time_s": dt - collect_s,
            "iterations_per_s": 1.0 / dt,
            "env_steps_per_s": n_steps / dt,
            "reward": mean("reward"),
            "reward_add": mean("reward_add"),
            "reward_action_rate": mean("reward_action_rate"),
            "tracking_error_cm": float(torch.nanmean(track)) * 100.0 if bool(torch.isfinite(track).any()) else math.nan,
            **episode_metrics(st, self.episode_len, self.episode_return),
            "action_std": float(self.alg.actor.distribution.log_std_param.detach().exp().mean()),
            "learning_rate": float(self.alg.learning_rate),
            **{("ppo_entropy" if k == "entropy" else f"ppo_{k}_loss"): float(v) for k, v in losses.items()},
            **disc,
        }

    # ------------------------------------------------------------------ checkpoint

    def payload(self) -> dict:
        """run.pt in SHAC's schema (export / sim2sim read it unchanged) + PPO's own training state."""
        cfg_plain = to_dict(self.cfg)
        cfg_plain["sim"]["control_dt"] = self.env.control_dt
        alg = self.alg
        p = ckpt_io.build_checkpoint(
            robot=self.robot,
            motion=self.motion,
            observation=self.env.obs_module,
            config=cfg_plain,
            actor=actor_state_dict(alg.actor),
            obs_normalizer=normalizer_state_dict(alg.actor),
            critics=[critic_state_dict(alg.critic)],
            target_critics=[],
            discriminator=self.add.disc,
            add_normalizer=self.add.norm,
            optimizers={"ppo": alg.optimizer, "discriminator": self.add.optimizer},
            iteration=self.iteration,
            metrics={k: v for k, v in self.last_metrics.items() if isinstance(v, (int, float))},
        )
        p["env_state"] = ckpt_io.plain(self.env.state_dict())
        p["add_replay"] = ckpt_io.plain(self.add.replay.state_dict())
        p["ppo_state"] = {
            "actor": ckpt_io.plain(alg.actor.state_dict()),
            "critic": ckpt_io.plain(alg.critic.state_dict()),
            "learning_rate": float(alg.learning_rate),
        }
        p["episode_history"] = {"len": list(self.episode_len), "return": list(self.episode_return)}
        p["sim_params_applied"] = dict(self.env.sim_params_applied)
        return p

    def save(self) -> Path | None:
        """Write run.pt atomically unless the model is non-finite (then log and keep the old file)."""
        path = self.run_dir / CHECKPOINT_NAME
        try:
            ckpt_io.save_checkpoint(path, self.payload())
        except ckpt_io.NonFiniteCheckpointError as exc:
            self._event("checkpoint_refused", str(exc))
            return None
        return path

    run = Trainer.run
    """Iterate to ``runner.iterations`` (or ``stop_at``), saving every ``save_every``; ``runner.Trainer.run``."""
    _keep = Trainer._keep  # what Trainer.run calls: snapshots, and the save on a stop request
    _interrupted = Trainer._interrupted


def _write_config(run_dir: Path, cfg: TrainConfig) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(run_dir / "config.yaml", yaml.safe_dump(to_dict(cfg), sort_keys=False).encode())


def train_ppo(
    cfg: TrainConfig,
    on_iteration: Callable[[dict], None] | None = None,
    on_event: Callable[[dict], None] | None = None,
    motion: Motion | None = None,
    sim: Any = None,
) -> TrainResult:
    """Train a PPO policy; see the module docstring."""
    return PPOTrainer(cfg, motion=motion, sim=sim, on_iteration=on_iteration, on_event=on_event).run()
