"""The simulator on CUDA against the CPU: one control step (values and gradients) to 1e-5, CUDA graphs
(captured and replayed on torch's stream) equal to plain launches, one resolved ``cuda:N`` device."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bcg_deploy.diffsim import SimConfig, Simulator
from bcg_deploy.robots import load_robot
from tests.cuda import requires_cuda
from tests.diffsim.util import random_states, random_targets

pytestmark = requires_cuda
E = 8


def _sim(device: str, dtype: str = "float64", **kw) -> Simulator:
    return Simulator(load_robot("g1"), SimConfig(num_envs=E, device=device, dtype=dtype, **kw))


def _step_and_grad(sim: Simulator, q, qd, qt):
    dt, dev = sim.types.torch_dtype, sim.torch_device
    x = torch.as_tensor(q, dtype=dt, device=dev).requires_grad_(True)
    xd = torch.as_tensor(qd, dtype=dt, device=dev).requires_grad_(True)
    t = torch.as_tensor(qt, dtype=dt, device=dev).requires_grad_(True)
    s = sim.step(x, xd, t)
    s = sim.step(s.q, s.qd, t)  # two steps: the second's inputs carry a graph
    (s.q.square().sum() + (s.qd * torch.linspace(-1, 1, s.qd.shape[1], dtype=dt, device=dev)).sum()).backward()
    return [v.detach().cpu().double() for v in (s.q, s.qd, x.grad, xd.grad, t.grad)]


def _states():
    q, qd = random_states(E, seed=51)
    q[:, 2] = 0.78  # standing height: feet in contact
    return q, qd, random_targets(q, seed=52)


def test_device_is_one_resolved_cuda_index():
    sim = _sim("cuda")
    assert sim.device == f"cuda:{torch.cuda.current_device()}" and sim.torch_device == torch.device(sim.device)


@pytest.mark.parametrize("dtype,tol", [("float64", 1e-5), ("float32", 1e-3)])
def test_step_and_gradient_match_cpu(dtype, tol):
    q, qd, qt = _states()
    cpu = _step_and_grad(_sim("cpu", dtype), q, qd, qt)
    gpu = _step_and_grad(_sim("cuda", dtype), q, qd, qt)
    for name, a, b in zip(("q", "qd", "dq", "dqd", "dq_target"), cpu, gpu, strict=True):
        scale = max(float(a.abs().max()), 1.0)
        assert float((a - b).abs().max()) <= tol * scale, name


def test_cuda_graphs_equal_plain_launches_on_a_side_stream():
    q, qd, qt = _states()
    plain = _step_and_grad(_sim("cuda", graphs=False), q, qd, qt)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # capture and replay follow torch's current stream
        graphs = _step_and_grad(_sim("cuda", graphs=True), q, qd, qt)
    side.synchronize()
    for a, b in zip(plain, graphs, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9, atol=1e-9)
