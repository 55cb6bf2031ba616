"""Asymmetric actor-critic: a deployable actor's critics see the privileged (paper + previous action)
observation, normalised by their own statistics, through resets; the actor still sees only its profile."""

from __future__ import annotations

import pytest
import torch

from bcg_deploy.observations.profile import PrivilegedObservation
from bcg_deploy.robots import load_robot
from bcg_deploy.training.algorithms.shac import SHAC
from bcg_deploy.training.env.add import ADD
from bcg_deploy.training.env.imitation import ImitationEnv

from .conftest import tiny_cfg


def _setup(tiny_motion, *extra: str):
    torch.manual_seed(0)
    cfg = tiny_cfg("env.obs_profile=beyondmimic_wose", "shac.horizon=4", *extra)
    env = ImitationEnv(cfg, load_robot("g1"), tiny_motion)
    env.add = ADD(env.feature_dim, cfg.add)
    critic_dim = None if env.critic_module is None else env.critic_obs_dim
    shac = SHAC(cfg.shac, env.obs_dim, env.num_actions, cfg.env.num_envs, critic_obs_dim=critic_dim)
    env.reset()
    return env, shac


def test_privileged_critic_sees_paper_state_and_last_action(tiny_motion):
    env, shac = _setup(tiny_motion)
    assert env.obs_dim == 154 and env.critic_obs_dim == 849 + 29
    assert shac.critic.obs_dim == 878
    env.frame = torch.tensor([5, env.num_frames - 2])  # env 1 times out at the next step and resets
    action = torch.full((2, 29), 0.1)
    out = env.step(action)
    assert out.done[1] and not out.done[0]
    ref = PrivilegedObservation(env.robot, env.motion)
    # Before the reset: the state reached with the action just taken; after it: the fresh row's own state.
    now = ref(env.q.detach(), env.qd.detach(), env.frame, env.last_action)  # after the step and the reset
    torch.testing.assert_close(out.critic_obs, now)  # row 1 is the reset row: its fresh state and frame
    assert torch.equal(out.critic_obs[1, -29:], torch.zeros(29))  # a reset clears the previous action
    torch.testing.assert_close(out.critic_obs_before_reset[0], now[0])
    assert torch.equal(out.critic_obs_before_reset[1, -29:], action[1])  # the state reached, with its action
    assert not torch.allclose(out.critic_obs_before_reset[1], now[1])
    assert out.obs.shape == (2, 154)


def test_window_trains_critics_on_privileged_input_and_actor_on_profile(tiny_motion):
    env, shac = _setup(tiny_motion)
    roll = shac.rollout(env)
    assert roll.obs.shape[-1] == 154 and roll.critic_obs.shape[-1] == 878 and roll.obs_norm.shape[-1] == 878
    shac.actor.zero_grad()
    roll.actor_loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in shac.actor.parameters())
    assert sum(float(p.grad.abs().sum()) for p in shac.actor.parameters()) > 0
    stats = shac.update_critic(roll)
    assert torch.isfinite(torch.as_tensor(stats["critic_loss"]))
    before = shac.critic_obs_normalizer.count.clone()
    shac.update_normalizers(roll)
    assert shac.critic_obs_normalizer.count > before and shac.obs_normalizer.mean.shape == (154,)


@pytest.mark.parametrize("setting", ["env.critic_obs=actor", "env.obs_profile=paper"])
def test_symmetric_critic_when_asked_or_paper(tiny_motion, setting):
    env, shac = _setup(tiny_motion, setting)
    assert env.critic_module is None and shac.critic_obs_normalizer is None
    roll = shac.rollout(env)
    assert roll.critic_obs is None and roll.obs_norm.shape[-1] == env.obs_dim
