"""Evaluation on one explicit device: every tensor it makes lives there; CPU and CUDA agree."""

from __future__ import annotations

import sys

import pytest
import torch
from torch.overrides import TorchFunctionMode

from bcg_deploy.training import evaluate as ev
from bcg_deploy.training.evaluate import evaluate_policy
from bcg_deploy.training.networks import Actor
from bcg_deploy.training.normalizer import RunningNormalizer

from .conftest import tiny_cfg

FACTORIES = {torch.zeros, torch.ones, torch.empty, torch.full, torch.arange, torch.tensor, torch.as_tensor,
             torch.rand, torch.randn, torch.randint, torch.zeros_like}  # fmt: skip
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"))]


class _FactoryDevices(TorchFunctionMode):
    """Records every tensor factory called from evaluate.py without an explicit device."""

    def __init__(self) -> None:
        super().__init__()
        self.defaulted: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        caller = sys._getframe(1)
        if func in FACTORIES and caller.f_code.co_filename == ev.__file__ and "device" not in kwargs:
            if func is not torch.zeros_like:
                self.defaulted.append(f"{func.__name__} at evaluate.py:{caller.f_lineno}")
        return func(*args, **kwargs)


def _policy(cfg, obs_dim=849, act_dim=29):
    torch.manual_seed(0)
    actor = Actor(obs_dim, act_dim, cfg.shac.actor_hidden, cfg.shac.init_std)
    norm = RunningNormalizer(obs_dim)
    norm.update(torch.randn(64, obs_dim, dtype=torch.float64))
    return actor, norm


def test_every_tensor_is_made_on_the_evaluation_device(tiny_motion):
    cfg = tiny_cfg()
    actor, norm = _policy(cfg)
    with _FactoryDevices() as mode:
        r = evaluate_policy(cfg, tiny_motion, actor, norm, num_envs=2, steps=4, seed=3)
    assert mode.defaulted == []
    assert r["steps"] == 4 and r["num_envs"] == 2 and r["episode_length"] > 0


@pytest.mark.parametrize("device", DEVICES)
def test_evaluation_on_each_device_matches_cpu(tiny_motion, device):
    cfg = tiny_cfg("domain_rand.enabled=false")
    actor, norm = _policy(cfg)  # on the CPU: evaluate uses copies on the evaluation device
    ref = evaluate_policy(cfg, tiny_motion, actor, norm, num_envs=2, steps=6, seed=3, device="cpu")
    r = evaluate_policy(cfg, tiny_motion, actor, norm, num_envs=2, steps=6, seed=3, device=device)
    assert next(actor.parameters()).device.type == "cpu"  # the caller's actor is not moved
    assert r["episodes_ended"] == ref["episodes_ended"] and r["falls"] == ref["falls"]
    assert r["tracking_error_cm"] == pytest.approx(ref["tracking_error_cm"], rel=1e-4)
    assert r["episode_length"] == pytest.approx(ref["episode_length"])
