"""rsl_rl ``VecEnv`` over ``ImitationEnv``: the same task, stepped forward-only (PPO).

``ImitationVecEnv(env)`` exposes the E envs of an ``ImitationEnv`` with rsl_rl's interface
(``get_observations``, ``step``, ``num_envs``, ``num_actions``, ``max_episode_length``,
``episode_length_buf``). Nothing of the task changes: the observation module, ADD reward (+ action
rate), fall / stray / divergence terminations, clip-end time-outs, reference state initialisation and
domain randomisation are ``ImitationEnv``'s. What differs from SHAC:

- ``step`` runs under ``torch.no_grad()``, so ``Simulator.step`` takes its forward-only path (no Warp
  tape, no adjoint buffers; ``diffsim.simulator``).
- The policy's action is the pre-tanh Gaussian sample; the env receives ``tanh(action)``, exactly as
  SHAC's ``Actor`` squashes its sample, so the deterministic policy (``tanh(mean)``) is what export runs.
- Observation groups: ``policy`` is the actor's input (the training noise of ``env.noisy``), ``critic``
  the noise-free observation.
- ``extras["time_outs"]`` marks clip ends (rsl_rl bootstraps them); ``extras["log"]`` carries the
  step's means; every step's ADD residuals stay in ``deltas`` / ``valid`` for the discriminator update,
  and a few per-step figures in ``stats`` for the runner's metrics (``pop_rollout`` hands both over).
"""

from __future__ import annotations

import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict

from bcg_deploy.training.env.imitation import ImitationEnv


class ImitationVecEnv(VecEnv):
    """rsl_rl's vectorised-env view of an ``ImitationEnv``; see the module docstring."""

    def __init__(self, env: ImitationEnv) -> None:
        self.env = env
        self.num_envs = env.num_envs
        self.num_actions = env.num_actions
        self.max_episode_length = env.num_frames - 1
        self.device = env.device
        self.cfg = env.cfg
        self._obs = env.observe()
        self.deltas: list[torch.Tensor] = []
        self.valid: list[torch.Tensor] = []
        self.stats = _new_stats()

    @property
    def episode_length_buf(self) -> torch.Tensor:
        """Control steps since each env's last reset [E] (long)."""
        return self.env.episode_len

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        self.env.episode_len = value

    def _group(self, obs: torch.Tensor) -> TensorDict:
        o = obs.float()
        return TensorDict({"policy": self.env.noisy(o), "critic": o}, batch_size=[self.num_envs], device=self.device)

    def get_observations(self) -> TensorDict:
        """The current observation groups (``policy`` with training noise, ``critic`` noise-free)."""
        return self._group(self._obs)

    def reset(self) -> TensorDict:
        """Reset every env at a random phase (``ImitationEnv.reset``)."""
        with torch.no_grad():
            self._obs = self.env.reset()
        return self.get_observations()

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        """Apply ``tanh(actions)`` [E, 29] for one control step; (obs, reward [E], done [E], extras)."""
        with torch.no_grad():
            out = self.env.step(torch.tanh(actions.to(self.env.dtype)))
        self._obs = out.obs
        self.deltas.append(out.delta)
        self.valid.append(out.valid)
        info = out.info
        _record(self.stats, out.reward, out.done, out.timeout, info)
        log = {
            "/reward_add": info["reward_add"].float().mean(),
            "/reward_action_rate": info["reward_action_rate"].float().mean(),
        }
        extras = {"time_outs": out.timeout, "log": log}
        return self.get_observations(), out.reward.float(), out.done, extras

    def pop_rollout(self) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """The residuals [N, E, D], validity [N, E] and stats collected since the last call.

        Stats: per-step [E] tensors ``reward``, ``reward_add``, ``reward_action_rate``, ``tracking_error``
        (m, NaN for diverged envs); counts ``fell``, ``strayed``, ``diverged``, ``timeout``; lists
        ``episode_len``, ``episode_return`` of the episodes that ended."""
        deltas, valid, stats = torch.stack(self.deltas), torch.stack(self.valid), self.stats
        self.deltas, self.valid, self.stats = [], [], _new_stats()
        return deltas, valid, stats


def _new_stats() -> dict:
    lists = ("reward", "reward_add", "reward_action_rate", "tracking_error", "episode_len", "episode_return")
    return {**{k: [] for k in lists}, "fell": 0, "strayed": 0, "diverged": 0, "timeout": 0}


def _record(stats: dict, reward: torch.Tensor, done: torch.Tensor, timeout: torch.Tensor, info: dict) -> None:
    stats["reward"].append(reward.detach())
    for k in ("reward_add", "reward_action_rate", "tracking_error"):
        stats[k].append(info[k])
    for k in ("fell", "strayed", "diverged"):
        stats[k] += int(info[k].sum())
    stats["timeout"] += int(timeout.sum())
    stats["episode_len"] += info["episode_len"][done].tolist()
    stats["episode_return"] += info["episode_return"][done].tolist()
