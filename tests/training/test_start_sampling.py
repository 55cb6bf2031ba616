"""Adaptive start phases: the distribution's maths, the draws, the failure counts in the env, and a run
that resumes exactly with them."""

from __future__ import annotations

import json

import pytest
import torch

from bcg_deploy.errors import BcgdError
from bcg_deploy.training.env.start_sampling import StartSampler, bin_edges, start_probabilities
from bcg_deploy.training.logger import read_metrics
from bcg_deploy.training.parallel import distributed as dd
from bcg_deploy.training.rng import EnvRandom
from bcg_deploy.training.run_files import resume_config
from bcg_deploy.training.runner import Trainer

from .conftest import tiny_cfg
from .test_env import make_env

TIMING = {"time_s", "iterations_per_s", "env_steps_per_s", "bcg_time_s"}


def _sampler(num_frames=51, **kw):  # start frames 0-49: 5 bins of 10 frames
    args = {"bin_s": 0.2, "kernel_bins": 3, "decay": 0.8, "uniform": 0.1, "alpha": 0.5, **kw}
    return StartSampler(num_frames, 0.02, device=torch.device("cpu"), **args)


def test_bins_cover_every_start_frame_once():
    assert bin_edges(100, 10).tolist() == list(range(0, 101, 10))
    assert bin_edges(95, 10).tolist() == [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95]  # a short last bin
    assert bin_edges(5, 10).tolist() == [0, 5]


def test_probabilities_favour_the_bins_before_a_failure():
    lengths = torch.tensor([10, 10, 10, 10, 10, 5])
    flat = start_probabilities(torch.zeros(6, dtype=torch.float64), lengths, 3, 0.8, 0.1)
    torch.testing.assert_close(flat, lengths.double() / 55)  # no failure yet: uniform over frames
    f = torch.tensor([0, 0, 0, 0, 2.0, 0], dtype=torch.float64)  # failures in bin 4 only
    p = start_probabilities(f, lengths, 3, 0.8, 0.1)
    w = torch.tensor([0, 0, 0.64, 0.8, 1.0, 0], dtype=torch.float64)  # bin 4 and the two before it
    torch.testing.assert_close(p, 0.1 * lengths.double() / 55 + 0.9 * w / w.sum())
    assert p.sum().item() == pytest.approx(1.0)
    assert p[5] == pytest.approx(0.1 * 5 / 55)  # after the wall: the uniform share only


def test_draws_follow_the_distribution_and_stay_in_the_clip():
    s = _sampler(uniform=0.0)
    s.update(torch.tensor([0, 0, 0, 4.0, 0]))  # a wall in bin 3 (frames 30-39)
    assert s.probabilities.tolist() == pytest.approx([0, 0.64 / 2.44, 0.8 / 2.44, 1 / 2.44, 0])
    frames = s.sample(EnvRandom(0, [20000]).rows())
    assert frames.dtype == torch.long and 10 <= frames.min() and frames.max() <= 39
    counts = torch.bincount(frames // 10, minlength=5).double() / frames.numel()
    torch.testing.assert_close(counts, s.probabilities, atol=0.01, rtol=0)
    within = torch.bincount(frames % 10, minlength=10).double() / frames.numel()
    torch.testing.assert_close(within, torch.full((10,), 0.1, dtype=torch.float64), atol=0.01, rtol=0)
    s = _sampler(uniform=1.0)
    frames = s.sample(EnvRandom(1, [20000]).rows())
    assert frames.min() == 0 and frames.max() == 49  # start frames 0 .. F-2


def test_failures_are_counted_where_episodes_end_and_averaged():
    s = _sampler()
    s.count(torch.tensor([5, 15, 15, 50]), torch.tensor([True, True, False, True]))
    s.count(torch.tensor([12]), torch.tensor([True]))
    counts = s.take_counts()
    assert counts.tolist() == [1, 2, 0, 0, 1]  # frame 50 (the clip's last) ends the last bin
    assert s.take_counts().tolist() == [0] * 5
    s.update(counts)
    s.update(torch.tensor([0, 0, 0, 0, 4.0]))
    assert s.failures.tolist() == pytest.approx([0.25, 0.5, 0, 0, 0.25 + 2.0])  # alpha 0.5
    restored = _sampler()
    restored.load_state_dict(json.loads(json.dumps(s.state_dict())))
    torch.testing.assert_close(restored.probabilities, s.probabilities, rtol=0, atol=0)
    with pytest.raises(ValueError, match="3 bins stored, this clip has 5"):
        restored.load_state_dict({"failures": [0.0, 0.0, 0.0]})


def test_the_env_counts_falls_and_strays_at_their_frame(tiny_motion):
    torch.manual_seed(0)
    env = make_env(tiny_motion, "env.num_envs=3", "env.adaptive_start=true", "env.adaptive_bin_s=0.2")
    env.reset()
    env.frame = torch.tensor([4, 24, 44])
    q = env.q.clone()
    q[1, 2] = 0.2  # env 1 falls at frame 25 (bin 2)
    env.q = q
    env.step(torch.zeros(3, 29, dtype=env.dtype))
    assert env.start_sampler.take_counts().tolist() == [0, 0, 1, 0, 0, 0]
    assert "start_sampler" in env.state_dict()


def test_a_run_with_adaptive_starts_resumes_exactly(tmp_path, tiny_motion):
    opts = ["env.adaptive_start=true", "env.adaptive_bin_s=0.2", "env.max_tracking_error=0.03"]
    runs = {}
    for name, stop in (("full", 0), ("part", 2)):
        d = tmp_path / name
        run = [f"runner.out_dir={d}", "runner.iterations=4", "runner.save_every=2", f"runner.stop_at={stop}"]
        cfg = tiny_cfg(*run, *opts)
        Trainer(cfg, motion=tiny_motion).run()
        runs[name] = d
    Trainer(resume_config(runs["part"] / "run.pt"), resume=runs["part"] / "run.pt").run()
    a, b = read_metrics(runs["full"]), read_metrics(runs["part"])
    assert [r["iteration"] for r in b] == [1, 2, 3, 4]
    for ra, rb in zip(a, b, strict=True):
        assert {k: v for k, v in ra.items() if k not in TIMING} == {k: v for k, v in rb.items() if k not in TIMING}
    assert sum(r["strayed"] for r in a) > 0 and max(r["start_focus"] for r in a) > 1.0  # it did adapt
    ck = torch.load(runs["full"] / "run.pt", weights_only=True)
    assert sum(ck["env_state"]["start_sampler"]["failures"]) > 0


def test_the_sampler_state_survives_a_change_of_world_size():
    state = {"q": torch.zeros(3, 2), "start_sampler": {"failures": [0.5, 1.5]}}
    merged = dd.merge_env_states([state, {"q": torch.ones(2, 2), "start_sampler": {"failures": [0.5, 1.5]}}])
    assert merged["start_sampler"] == {"failures": [0.5, 1.5]}
    assert dd.split_env_state(merged, [5], 0)["start_sampler"] == {"failures": [0.5, 1.5]}


def test_ppo_refuses_adaptive_starts():
    with pytest.raises(BcgdError, match="env.adaptive_start: not built for ppo"):
        tiny_cfg("algo=ppo", "env.adaptive_start=true", "bcg.enabled=false").validate()
