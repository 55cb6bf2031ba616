"""Training on CUDA: the CLI end to end (train, export, sim2sim), an exact resume (deterministic mode),
evaluation of a CUDA run, and the host syncs of an iteration at the paper's size (at most 50)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from bcg_deploy.training.config import TrainConfig, apply_overrides
from bcg_deploy.training.evaluate import evaluate_checkpoint
from bcg_deploy.training.logger import read_metrics
from bcg_deploy.training.parallel.syncs import SyncCounter
from bcg_deploy.training.run_files import resume_config
from bcg_deploy.training.runner import Trainer
from tests.cuda import requires_cuda
from tests.training.conftest import slice_motion, tiny_cfg

pytestmark = requires_cuda
TIMING = {"time_s", "iterations_per_s", "env_steps_per_s"}
SYNC_BUDGET = 50


def _bcgd(*args: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    code = "import sys; from bcg_deploy.cli import main; sys.argv = ['bcgd', *sys.argv[1:]]; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def tiny_motion():
    from bcg_deploy.motions import load_builtin

    return slice_motion(load_builtin("dance"), 100, 160)


def test_cli_trains_three_iterations_then_exports_and_replays(tmp_path):
    run = tmp_path / "run"
    r = _bcgd("train", "dance", "--device", "cuda", "--iterations", "3", "--out", str(run))
    assert r.returncode == 0, r.stderr[-2000:]
    rows = read_metrics(run)
    assert [m["iteration"] for m in rows] == [1, 2, 3] and all(m["reward"] == m["reward"] for m in rows)
    stored = resume_config(run / "run.pt")
    assert stored.runner.device.startswith("cuda") and stored.runner.tf32 is False
    assert stored.env.num_envs >= 2048  # the CUDA default
    onnx = tmp_path / "policy.onnx"
    r = _bcgd("export", str(run / "run.pt"), "--output", str(onnx))
    assert r.returncode == 0 and onnx.exists(), r.stderr[-2000:]
    report = tmp_path / "sim2sim.json"
    r = _bcgd("sim2sim", str(onnx), "--runs", "1", "--json", str(report))
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(report.read_text())["aggregate"]


def _train(tmp, motion, *overrides, resume=None):
    cfg = tiny_cfg("runner.device=cuda", "runner.deterministic=true", f"runner.out_dir={tmp}", "runner.iterations=4",
                   "runner.save_every=2", *overrides)  # fmt: skip
    return Trainer(cfg, resume=resume, motion=motion).run()


def test_resume_on_cuda_is_exact(tmp_path, tiny_motion):
    full = _train(tmp_path / "full", tiny_motion)
    part = tmp_path / "part"
    _train(part, tiny_motion, "runner.stop_at=2")
    assert Trainer(resume_config(part / "run.pt"), resume=part / "run.pt").run().iteration == 4
    a, b = read_metrics(full.run_dir), read_metrics(part)
    assert len(a) == len(b) == 4
    for ra, rb in zip(a, b, strict=True):
        assert {k: v for k, v in ra.items() if k not in TIMING} == {k: v for k, v in rb.items() if k not in TIMING}


def test_evaluation_of_a_cuda_run(tmp_path, tiny_motion):
    run = _train(tmp_path / "eval", tiny_motion)
    gpu = evaluate_checkpoint(run.checkpoint, num_envs=4, steps=20, seed=5, device="cuda", nominal=True)
    cpu = evaluate_checkpoint(run.checkpoint, num_envs=4, steps=20, seed=5, device="cpu", nominal=True)
    assert gpu["num_envs"] == 4 and gpu["episode_length"] > 0
    assert gpu["falls"] == cpu["falls"] and gpu["episodes_ended"] == cpu["episodes_ended"]
    assert gpu["tracking_error_cm"] == pytest.approx(cpu["tracking_error_cm"], rel=1e-3)


@pytest.mark.parametrize("mode", ["cuda", "trace"])
def test_host_syncs_per_iteration_at_the_paper_size(tmp_path, mode):
    """64 envs, horizon 32, plain SHAC: at most 50 host syncs in one iteration (torch's sync debug mode,
    and the tracing count of the call sites)."""
    overrides = ["runner.device=cuda", f"runner.out_dir={tmp_path}", "runner.tensorboard=false",
                 "env.num_envs=64", "shac.horizon=32"]  # fmt: skip
    cfg = apply_overrides(TrainConfig(), overrides)
    tr = Trainer(cfg)
    tr.step()  # warm-up: kernel loading, graph capture, first buffers
    torch.cuda.synchronize()
    with SyncCounter(mode) as sc:
        tr.step()
    assert sc.count <= SYNC_BUDGET, sc.summary(top=20)
