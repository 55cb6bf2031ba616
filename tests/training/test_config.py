"""Typed config: METHOD.md defaults, plain-value round trip, --set overrides with type checks."""

from __future__ import annotations

import pytest

from bcg_deploy.errors import BcgdError
from bcg_deploy.training.config import TrainConfig, apply_overrides, from_dict, to_dict


def test_method_defaults():
    c = TrainConfig()
    s = c.shac
    assert (s.horizon, s.gamma, s.lam, s.actor_lr, s.critic_lr, s.lr_min) == (32, 0.99, 0.95, 5e-3, 2e-3, 1e-5)
    assert s.betas == (0.7, 0.95) and (s.actor_grad_clip, s.critic_grad_clip) == (1.0, 10.0)
    assert s.actor_hidden == (512, 256, 128) and s.critic_hidden == (256, 256) and s.num_critics == 3
    assert (s.critic_iterations, s.critic_minibatches, s.target_alpha, s.init_std) == (16, 4, 0.995, 1.0)
    assert c.env.num_envs == 128 and c.env.fall_height == 0.3 and c.env.action_rate_weight == -0.8
    assert c.add.hidden == (1024, 512) and c.add.lr == 2.5e-4 and c.add.weight_decay == 1e-4
    assert (c.add.logit_reg, c.add.grad_penalty, c.add.reward_weight) == (0.01, 2.0, 2.0)
    b = c.bcg
    assert (b.enabled, b.num_branches, b.horizon, b.sigma_p, b.sigma_v, b.tau) == (False, 10, 2, 0.01, 0.02, 400.0)
    assert (c.sim.physics_dt, c.sim.substeps, c.sim.kappa) == (0.005, 4, 300.0)
    d = c.domain_rand
    assert d.friction == (0.3, 1.6) and d.kp_scale == (0.8, 1.2) and d.armature_scale == (0.75, 1.25)
    assert d.push_ang_vel == (0.52, 0.52, 0.78) and d.reset_rot == (0.1, 0.1, 0.2)


def test_round_trip_and_overrides():
    c = apply_overrides(
        TrainConfig(),
        ["shac.actor_lr=1e-3", "env.num_envs=8", "bcg.enabled=true", "shac.actor_hidden=64,32", "motion.csv=a.csv"],
    )
    assert c.shac.actor_lr == 1e-3 and c.env.num_envs == 8 and c.bcg.enabled is True
    assert c.shac.actor_hidden == (64, 32) and c.motion.csv == "a.csv"
    back = from_dict(to_dict(c))
    assert back == c


@pytest.mark.parametrize(
    "item",
    ["shac.nope=1", "nope.x=1", "env.num_envs=abc", "bcg.enabled=maybe", "sim.dtype=float16", "shac.betas=1", "x"],
)
def test_bad_override_is_one_line_error(item):
    with pytest.raises(BcgdError) as e:
        apply_overrides(TrainConfig(), [item])
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("item", "needle"),
    [
        ("shac.horizon=0", "horizon"),
        ("runner.keep_every=-1", "keep_every"),
        ("domain_rand.reset_scale=-0.5", "reset_scale must be a number >= 0"),
        ("domain_rand.reset_scale=inf", "reset_scale must be a number >= 0"),
    ],
)
def test_validate_rejects_nonsense(item, needle):
    c = apply_overrides(TrainConfig(), [item])
    with pytest.raises(BcgdError, match=needle):
        c.validate()
