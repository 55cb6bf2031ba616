"""Training from Python without the command line: ``plan_run`` -> ``train`` -> a resume of it, the library
calls behind ``bcgd train`` (its docstring example, at test size)."""

from __future__ import annotations

import pytest
import torch

from bcg_deploy.errors import BcgdError
from bcg_deploy.training.run import plan_run, train
from tests.training.conftest import TINY


def test_plan_train_and_resume_from_python(tmp_path, tiny_motion):
    out = tmp_path / "run"
    cfg = plan_run("dance", iterations=2, out=out, overrides=TINY)
    assert (cfg.motion.task, cfg.runner.iterations, cfg.runner.out_dir, cfg.env.num_envs) == ("dance", 2, str(out), 2)
    result = train(cfg, motion=tiny_motion)
    assert result.iteration == 2 and result.checkpoint == out / "run.pt" and (out / "config.yaml").is_file()
    assert torch.load(result.checkpoint, weights_only=True)["iteration"] == 2

    with pytest.raises(BcgdError, match="holds a run"):  # a new plan never overwrites a run unasked
        plan_run("dance", iterations=2, out=out, overrides=TINY)
    notes: list[str] = []
    cfg = plan_run(resume=result.checkpoint, iterations=3, notes=notes)
    assert cfg.runner.out_dir == str(out) and cfg.env.num_envs == 2
    assert len(notes) == 1 and "learning rate" in notes[0]  # the decay goes on over the longer run
    resumed = train(cfg, resume=result.checkpoint)
    assert resumed.iteration == 3 and torch.load(resumed.checkpoint, weights_only=True)["iteration"] == 3
