"""Gradients of ``Simulator.step`` (torch autograd through the Warp tape) against float64 central finite
differences, and the lifetime of the per-step buffers.

Quaternions: the simulator normalises the base quaternion internally, so a step is a function of the
36 raw numbers of q. The finite differences perturb raw components (no renormalisation), exactly the
function autograd differentiates; the radial component of the quaternion gradient is therefore 0.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from tests.diffsim.util import get_sim, random_states, random_targets, t64

E = 20  # states, batched as envs: perturbing one component in all envs gives every env's FD at once
H = 1e-6


def _setup(seed: int):
    q, qd = random_states(E, seed=seed, pos_range=2.0, ang_vel=1.0)
    qt = random_targets(q, seed=seed + 1, scale=0.2)
    rng = np.random.default_rng(seed + 2)
    return q, qd, qt, t64(rng.normal(size=(E, 36))), t64(rng.normal(size=(E, 35)))


def _rollout_loss(sim, steps, q, qd, qt, wq, wqd) -> torch.Tensor:
    """Per-env loss [E]: a random linear functional of the state after ``steps`` control steps."""
    for _ in range(steps):
        s = sim.step(q, qd, qt)
        q, qd = s.q, s.qd
    return (q * wq).sum(1) + (qd * wqd).sum(1)


def _check(steps: int, seed: int, tol: float = 1e-5, **sim_options):
    sim = get_sim("float64", num_envs=E, **sim_options)
    q, qd, qt, wq, wqd = _setup(seed)
    inputs = [t64(q).requires_grad_(True), t64(qd).requires_grad_(True), t64(qt).requires_grad_(True)]
    _rollout_loss(sim, steps, *inputs, wq, wqd).sum().backward()
    worst = {}
    with torch.no_grad():
        for k, name in enumerate(("q", "qd", "q_target")):
            fd = torch.zeros_like(inputs[k])
            for j in range(inputs[k].shape[1]):
                args = [x.detach().clone() for x in inputs]
                args[k][:, j] += H
                plus = _rollout_loss(sim, steps, *args, wq, wqd)
                args[k][:, j] -= 2 * H
                minus = _rollout_loss(sim, steps, *args, wq, wqd)
                fd[:, j] = (plus - minus) / (2 * H)
            err = (inputs[k].grad - fd).abs().amax(1) / fd.norm(dim=1)
            worst[name] = float(err.max())
    assert max(worst.values()) < tol, f"{steps} step(s): relative gradient errors {worst}"
    return worst


def test_one_control_step_matches_finite_differences():
    _check(steps=1, seed=41)


def test_eight_chained_control_steps_match_finite_differences():
    _check(steps=8, seed=43)


@pytest.mark.parametrize("options", [{"bias_velocity": "midpoint"}, {"pd_damping": "implicit"}, {"integrator": "rk4"}])
def test_step_options_match_finite_differences(options):
    _check(steps=2, seed=53, **options)


def test_float32_gradients_track_float64():
    """float32 autograd against float64 autograd of the same step (not FD: float32 FD is too noisy)."""
    q, qd, qt, wq, wqd = _setup(45)
    grads = {}
    for dtype in ("float64", "float32"):
        sim = get_sim(dtype, num_envs=E)
        tdt = torch.float64 if dtype == "float64" else torch.float32
        inputs = [torch.tensor(x, dtype=tdt, requires_grad=True) for x in (q, qd, qt)]
        _rollout_loss(sim, 1, *inputs, wq.to(tdt), wqd.to(tdt)).sum().backward()
        grads[dtype] = [x.grad.double() for x in inputs]
    for g64, g32 in zip(grads["float64"], grads["float32"], strict=True):
        assert float(((g32 - g64).abs().amax(1) / g64.norm(dim=1)).max()) < 1e-3


def test_repeated_backward_and_independent_graphs():
    """retain_graph backward twice gives the same gradient (adjoints are reset, not accumulated twice in
    the simulator), and two live graphs do not share buffers."""
    sim = get_sim("float64", num_envs=E)
    q, qd, qt, wq, wqd = _setup(47)
    a = t64(qt).requires_grad_(True)
    loss_a = _rollout_loss(sim, 2, t64(q), t64(qd), a, wq, wqd).sum()
    b = t64(qt).requires_grad_(True)
    loss_b = _rollout_loss(sim, 2, t64(q), t64(qd), b * 1.0, wq, wqd).sum()
    loss_a.backward(retain_graph=True)
    first = a.grad.clone()
    a.grad = None
    loss_a.backward()
    loss_b.backward()
    torch.testing.assert_close(a.grad, first, rtol=0, atol=0)
    torch.testing.assert_close(b.grad, first, rtol=0, atol=0)


def test_step_buffers_are_released_with_the_graph():
    sim = get_sim("float64", num_envs=E)
    q, qd, qt, wq, wqd = _setup(49)
    gc.collect()
    before = sim.live_steps
    loss = _rollout_loss(sim, 5, t64(q), t64(qd), t64(qt).requires_grad_(True), wq, wqd).sum()
    assert sim.live_steps == before + 5
    loss.backward()
    del loss
    gc.collect()
    assert sim.live_steps == before
    sim.release_buffers()
    assert not sim._pool


@pytest.mark.parametrize("which", ["q", "qd"])
def test_gradient_reaches_only_through_used_outputs(which):
    """A loss of q only (or qd only) still backpropagates through both (they are coupled)."""
    sim = get_sim("float64", num_envs=E)
    q, qd, qt, *_ = _setup(51)
    x = t64(qt).requires_grad_(True)
    s = sim.step(t64(q), t64(qd), x)
    getattr(s, which).square().sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
