"""SHAC through the real simulator: the analytic actor gradient of one window vs float64 finite
differences (with a mid-window time-out + reset, action latency, observation noise and pushes),
and the robustness rules (non-finite loss skipped, NaN gradients zeroed)."""

from __future__ import annotations

import copy

import pytest
import torch

from bcg_deploy.robots import load_robot
from bcg_deploy.training.algorithms.shac import SHAC, clip_and_sanitize
from bcg_deploy.training.env.add import ADD
from bcg_deploy.training.env.imitation import ImitationEnv
from bcg_deploy.training.networks import Critic

from .conftest import tiny_cfg


@pytest.fixture(scope="module")
def setup(tiny_motion):
    torch.manual_seed(0)
    cfg = tiny_cfg("sim.dtype=float64", "sim.kappa=50", "shac.horizon=4", "domain_rand.push_interval_s=0.04,0.06")
    env = ImitationEnv(cfg, load_robot("g1"), tiny_motion)
    env.add = ADD(env.feature_dim, cfg.add).double()
    shac = SHAC(cfg.shac, env.obs_dim, env.num_actions, cfg.env.num_envs).double()
    env.reset()
    for s in (1.0, 1.1):  # some normaliser statistics so the actor input is O(1)
        shac.obs_normalizer.update(env.observe() * s)
    env.frame = torch.tensor([5, env.num_frames - 3])  # env 1 times out inside the window and resets
    env.params.action_latency = torch.tensor([1, 0])  # env 0 acts with one step of latency
    return env, shac, env.state_dict()


def _window_loss(env, shac, state):
    env.load_state_dict(state)
    torch.manual_seed(123)  # same exploration noise, observation noise, pushes and reset draws
    roll = shac.rollout(env)
    return roll


def test_actor_gradient_matches_finite_differences(setup):
    env, shac, state = setup
    params = list(shac.actor.parameters())
    roll = _window_loss(env, shac, state)
    assert roll.done[:, 1].any(), "the window must contain the time-out of env 1"
    assert float(torch.stack(roll.stats["foot_force"]).max()) > 100.0, "the feet must be in contact"
    shac.actor.zero_grad()
    roll.actor_loss.backward()
    grads = [p.grad.clone() for p in params]
    gen = torch.Generator().manual_seed(7)
    h = 1e-6
    for _ in range(5):
        v = [torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in params]
        norm = torch.sqrt(sum((x * x).sum() for x in v))
        v = [x / norm for x in v]
        analytic = float(sum((g * x).sum() for g, x in zip(grads, v, strict=True)))
        with torch.no_grad():
            for p, x in zip(params, v, strict=True):
                p.add_(h * x)
            lp = float(_window_loss(env, shac, state).actor_loss)
            for p, x in zip(params, v, strict=True):
                p.sub_(2 * h * x)
            lm = float(_window_loss(env, shac, state).actor_loss)
            for p, x in zip(params, v, strict=True):
                p.add_(h * x)
        fd = (lp - lm) / (2 * h)
        assert abs(analytic - fd) <= 1e-3 * abs(fd) + 1e-9, (analytic, fd)


def test_window_evaluates_only_the_rows_it_uses(setup, monkeypatch):
    """The window evaluates the target critic's gradient path only where the loss bootstraps (rows that end
    an episode, every row at the last step), takes V_target for the TD targets in one batched pass, and after a
    reset observes the reset rows alone. Oracle: the same window with the plain definitions (the target critic
    on every row at every step, the whole batch observed after a reset): the same actor loss, actor gradient,
    TD inputs and observations (float64; a time-out and reset inside the window)."""
    env, shac, state = setup
    params = list(shac.actor.parameters())

    def window():
        roll = _window_loss(env, shac, state)
        shac.actor.zero_grad()
        roll.actor_loss.backward()
        return roll, [p.grad.clone() for p in params]

    rows, g_rows = window()
    with monkeypatch.context() as m:
        m.setattr(shac, "_bootstrap_values", lambda obs_n, done, last, every_row: shac.target_critic(obs_n))
        m.setattr(env, "_fresh_observation", lambda idx: env.observe()[idx])
        every, g_every = window()
    assert rows.done[:-1].any(), "the window must contain an episode end before its last step"
    torch.testing.assert_close(rows.actor_loss, every.actor_loss, rtol=1e-12, atol=0.0)
    for a, b in zip(g_rows, g_every, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-14)
    for name in ("next_values", "obs", "obs_norm", "rewards", "done"):
        torch.testing.assert_close(getattr(rows, name), getattr(every, name), rtol=1e-12, atol=1e-12)


def test_non_finite_loss_is_skipped_and_nan_grads_zeroed(setup):
    _, shac, _ = setup
    before = [p.detach().clone() for p in shac.actor.parameters()]
    stats = shac.update_actor(torch.tensor(float("nan"), dtype=torch.float64))
    assert stats["actor_skipped"] == 1.0 and shac.counters["actor_skipped"] >= 1
    for b, p in zip(before, shac.actor.parameters(), strict=True):
        assert torch.equal(b, p)
    # a finite loss whose gradient has a NaN entry: the entry is zeroed, the step is taken, weights stay finite
    w = shac.actor.mu.bias
    hook = w.register_hook(lambda g: torch.cat([g[:1] * float("nan"), g[1:]]))
    try:
        stats = shac.update_actor(w.sum())
    finally:
        hook.remove()
    assert stats["actor_nan_grad_tensors"] == 1 and shac.parameters_finite()
    assert torch.equal(w[0], before[list(dict(shac.actor.named_parameters())).index("mu.bias")][0])


def test_clip_and_sanitize_clips_to_the_total_norm():
    """The gradients leave with total norm ``max_norm`` when above it, unchanged below it, NaN entries zeroed
    (oracle: torch.nn.utils.clip_grad_norm_ on the same gradients)."""
    gen = torch.Generator().manual_seed(0)
    shapes = [(4, 3), (3,), (2, 2)]
    for scale, max_norm in ((100.0, 1.0), (0.01, 1.0), (50.0, 10.0)):
        grads = [scale * torch.randn(s, generator=gen) for s in shapes]
        ours = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
        ref = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
        for p, q, g in zip(ours, ref, grads, strict=True):
            p.grad, q.grad = g.clone(), g.clone()
        ours[1].grad[0] = float("nan")
        ref[1].grad[0] = 0.0
        norm, bad = clip_and_sanitize(ours, max_norm)
        ref_norm = torch.nn.utils.clip_grad_norm_(ref, max_norm)
        assert int(bad) == 1
        assert torch.allclose(norm, ref_norm)
        for p, q in zip(ours, ref, strict=True):
            assert torch.allclose(p.grad, q.grad, rtol=1e-6, atol=0.0)
        total = torch.sqrt(sum(p.grad.square().sum() for p in ours))
        assert float(total) <= max_norm * (1 + 1e-5)


def test_actor_update_applies_the_gradient_clip(setup):
    """One actor step on a loss scaled far above the clip moves the parameters as Adam on the gradient
    clipped by torch.nn.utils.clip_grad_norm_ (both SHAC's step and the oracle start from the same state)."""
    env, shac, state = setup
    actor_sd = {k: v.clone() for k, v in shac.actor.state_dict().items()}
    opt_sd = copy.deepcopy(shac.actor_optimizer.state_dict())
    roll = _window_loss(env, shac, state)
    loss = 1e4 * roll.actor_loss
    grads = torch.autograd.grad(loss, list(shac.actor.parameters()), retain_graph=True)
    assert float(torch.sqrt(sum(g.square().sum() for g in grads))) > 10 * shac.cfg.actor_grad_clip
    ref = copy.deepcopy(shac.actor)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=shac.actor_optimizer.param_groups[0]["lr"], betas=shac.cfg.betas)
    ref_opt.load_state_dict(copy.deepcopy(opt_sd))
    for p, g in zip(ref.parameters(), grads, strict=True):
        p.grad = g.clone()
    torch.nn.utils.clip_grad_norm_(list(ref.parameters()), shac.cfg.actor_grad_clip)
    ref_opt.step()
    shac.update_actor(loss)
    for (name, p), q in zip(shac.actor.named_parameters(), ref.parameters(), strict=True):
        assert torch.allclose(p, q, rtol=1e-9, atol=1e-12), name
    shac.actor.load_state_dict(actor_sd)
    shac.actor_optimizer.load_state_dict(opt_sd)


def test_critic_update_matches_separate_critics_with_torch_clip_and_adam(setup):
    """``update_critic`` (batched ensemble, fused Adam, device-side clip) against an independent reference:
    K separate ``Critic`` modules, torch's Adam, the sum over members of each one's minibatch MSE and
    torch.nn.utils.clip_grad_norm_ over all of them, on the same samples and minibatch permutations. The
    window's early critic gradients exceed the clip, so the clip is exercised."""
    env, shac, state = setup
    saved = copy.deepcopy(shac.state_dict()), copy.deepcopy(shac.critic_optimizer.state_dict())
    gen_state = shac.minibatch_generator.get_state()
    roll = _window_loss(env, shac, state)
    roll.actor_loss = roll.actor_loss.detach()
    x, y, rows, total = shac._critic_samples(roll)
    batches = shac._minibatches(total, rows, x.device)
    shac.minibatch_generator.set_state(gen_state)
    members = [Critic.from_state_dict(sd).double() for sd in shac.critic.member_state_dicts()]
    params = [p for m in members for p in m.parameters()]
    opt = torch.optim.Adam(params, lr=shac.critic_optimizer.param_groups[0]["lr"], betas=shac.cfg.betas)
    norms = []
    for passes in batches:
        for idx, _ in passes:
            opt.zero_grad(set_to_none=True)
            loss = sum((m(x[idx]) - y[idx]).square().mean() for m in members)
            loss.backward()
            norms.append(float(torch.nn.utils.clip_grad_norm_(params, shac.cfg.critic_grad_clip)))
            opt.step()
    assert max(norms) > shac.cfg.critic_grad_clip, "the test must exercise the clip"
    shac.update_critic(roll)
    for k, (ours, ref) in enumerate(zip(shac.critic.member_state_dicts(), members, strict=True)):
        for name, v in ref.state_dict().items():
            assert torch.allclose(ours[name], v, rtol=1e-7, atol=1e-10), (k, name)
    shac.load_state_dict(saved[0])
    shac.critic_optimizer.load_state_dict(saved[1])
