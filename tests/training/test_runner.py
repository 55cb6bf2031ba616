"""The training run end to end on tiny sizes: run.pt contents, exact resume, NaN survival,
checkpoint refusal for a non-finite model, the CLI."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from bcg_deploy.cli import _register, app
from bcg_deploy.training import checkpoint as ckpt_io
from bcg_deploy.training.logger import read_metrics
from bcg_deploy.training.run_files import resume_config
from bcg_deploy.training.runner import Trainer

from .conftest import tiny_cfg

TIMING = {"time_s", "iterations_per_s", "env_steps_per_s", "bcg_time_s"}


def _run(tmp, motion, *overrides, resume=None):
    cfg = tiny_cfg(f"runner.out_dir={tmp}", "runner.iterations=4", "runner.save_every=2", *overrides)
    return Trainer(cfg, resume=resume, motion=motion).run()


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, tiny_motion):
    d = tmp_path_factory.mktemp("full")
    return _run(d, tiny_motion, "runner.keep_every=2")


def test_checkpoint_has_everything_export_needs(full_run):
    path = full_run.checkpoint
    raw = torch.load(path, weights_only=True)
    ck = ckpt_io.load_checkpoint(path, required=ckpt_io.REQUIRED_KEYS)
    assert raw["iteration"] == ck["iteration"] == 4
    assert len(ck["critics"]) == len(ck["target_critics"]) == 2
    assert set(ck["optimizers"]) == {"actor", "critic", "discriminator"}
    assert ck["robot"]["name"] == "g1" and len(ck["robot"]["model_hash"]) == 64
    assert sum(t["size"] for t in ck["observation"]) == 849
    assert ck["motion"]["name"] == "dance" and ck["config"]["sim"]["control_dt"] == pytest.approx(0.02)
    assert {"env_state", "add_replay", "shac_state"} <= set(ck)
    rows = read_metrics(full_run.run_dir)
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4]
    for key in ("reward", "tracking_error_cm", "actor_grad_norm", "iterations_per_s", "env_steps_per_s"):
        assert key in rows[-1]
    assert (full_run.run_dir / "config.yaml").exists() and (full_run.run_dir / "learning_curve.png").exists()


def test_resume_is_exact(full_run, tmp_path, tiny_motion):
    _run(tmp_path, tiny_motion, "runner.stop_at=2")
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])["iteration"] == 2
    cfg = resume_config(tmp_path / "run.pt")  # what `bcgd train --resume` starts from: the stored config
    assert cfg.runner.stop_at == 0 and cfg.runner.iterations == 4
    assert Trainer(cfg, resume=tmp_path / "run.pt").run().iteration == 4
    a, b = read_metrics(full_run.run_dir), read_metrics(tmp_path)
    assert len(a) == len(b) == 4
    for ra, rb in zip(a, b, strict=True):
        assert {k: v for k, v in ra.items() if k not in TIMING} == {k: v for k, v in rb.items() if k not in TIMING}
    full = torch.load(full_run.checkpoint, weights_only=True)
    resumed = torch.load(tmp_path / "run.pt", weights_only=True)
    for k, v in full["actor"].items():
        assert torch.equal(v, resumed["actor"][k]), k


def test_nan_in_simulator_state_is_survived(tmp_path, tiny_motion):
    res = _run(tmp_path, tiny_motion, "debug.inject_nan_iteration=1", "debug.inject_nan_step=1")
    assert res.iteration == 4 and res.checkpoint is not None
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert any(e["event"] == "diverged_envs" and e["iteration"] == 2 for e in events)
    rows = read_metrics(tmp_path)
    assert rows[1]["diverged"] >= 1 and all(r["diverged"] == 0 for r in rows[2:])
    ck = ckpt_io.load_checkpoint(res.checkpoint)
    assert all(torch.isfinite(v).all() for v in ck["actor"].values())


def test_non_finite_model_never_overwrites_checkpoint(tmp_path, tiny_motion):
    cfg = tiny_cfg(f"runner.out_dir={tmp_path}", "runner.iterations=2", "runner.save_every=1")
    tr = Trainer(cfg, motion=tiny_motion)
    tr.run()
    good = (tmp_path / "run.pt").read_bytes()
    with torch.no_grad():
        tr.shac.actor.mu.weight[0, 0] = float("nan")
    assert tr.save() is None
    assert (tmp_path / "run.pt").read_bytes() == good
    assert tr.events[-1]["event"] == "checkpoint_refused"


def test_cli_train_writes_checkpoint(tmp_path):
    _register()
    r = CliRunner().invoke(
        app,
        ["train", "dance", "--envs", "2", "--horizon", "2", "--iterations", "1", "--out", str(tmp_path), "--seed", "3",
         *[x for o in ("shac.actor_hidden=8", "shac.critic_hidden=8", "add.hidden=8", "shac.critic_iterations=1",
                       "runner.tensorboard=false") for x in ("--set", o)]],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert (tmp_path / "run.pt").exists() and "checkpoint" in r.output
    ck = ckpt_io.load_checkpoint(tmp_path / "run.pt")
    assert ck["config"]["runner"]["seed"] == 3 and ck["config"]["shac"]["horizon"] == 2


def test_evaluate_checkpoint_is_seeded(full_run):
    from bcg_deploy.training.evaluate import evaluate_checkpoint

    a = evaluate_checkpoint(full_run.checkpoint, num_envs=2, steps=6, seed=5)
    b = evaluate_checkpoint(full_run.checkpoint, num_envs=2, steps=6, seed=5)
    assert a == b and a["iteration"] == 4 and a["tracking_error_cm"] > 0
    assert 1 <= a["episode_length"] <= 6


def test_evaluate_reports_training_sim_foot_penetration(full_run):
    """The training-simulator side of Delta d: the mean depth of the penetrating foot spheres (mm), with
    nominal physics; from reference-state starts the feet are on the floor, a few mm deep at kappa 300."""
    from bcg_deploy.training.evaluate import evaluate_checkpoint

    r = evaluate_checkpoint(full_run.checkpoint, num_envs=2, steps=6, seed=5, nominal=True)
    assert r["foot_penetration_mm"] is not None and 0.05 < r["foot_penetration_mm"] < 30.0


def test_snapshots_keep_each_point_of_the_schedule_and_resume_elsewhere(full_run, tmp_path):
    """keep_every=2 of 4 iterations: snapshots at 2 and 4; the one at 2 is still iteration 2 after run.pt was
    rewritten at 4, and resuming it (into a new folder: its own run folder's run.pt is later) ends where the
    uninterrupted run ended, bit for bit."""
    from bcg_deploy.errors import BcgdError
    from bcg_deploy.training.run import plan_run
    from bcg_deploy.training.run_files import SNAPSHOT_DIR

    snaps = sorted((full_run.run_dir / SNAPSHOT_DIR).glob("run_*.pt"))
    assert [p.name for p in snaps] == ["run_000002.pt", "run_000004.pt"]
    assert [torch.load(p, weights_only=True)["iteration"] for p in snaps] == [2, 4]
    args = dict.fromkeys(
        ("task", "motion", "start", "duration", "envs", "iterations", "horizon", "device", "kappa", "seed",
         "save_every"),
    )  # fmt: skip
    with pytest.raises(BcgdError, match="kept snapshot; give --out") as info:
        plan_run(**args, out=None, overrides=[], resume=snaps[0])
    assert "\n" not in str(info.value)
    cfg = plan_run(**args, out=tmp_path / "branch", overrides=["runner.keep_every=0"], resume=snaps[0])
    resumed = Trainer(cfg, resume=snaps[0]).run()
    assert resumed.iteration == 4 and not (tmp_path / "branch" / SNAPSHOT_DIR).exists()
    full = torch.load(full_run.checkpoint, weights_only=True)
    branch = torch.load(resumed.checkpoint, weights_only=True)
    for k, v in full["actor"].items():
        assert torch.equal(v, branch["actor"][k]), k


def test_resume_accepts_the_stored_task_and_refuses_a_changed_one(full_run):
    """`bcgd train dance --resume run.pt` (the stored task repeated) resumes; a different task, env count or
    kappa is a one-line error naming the stored value."""
    from bcg_deploy.errors import BcgdError
    from bcg_deploy.training.run import plan_run

    def config(**given):
        args = dict.fromkeys(
            ("task", "motion", "start", "duration", "envs", "iterations", "horizon", "device", "kappa", "seed",
             "out", "save_every"),
        )  # fmt: skip
        return plan_run(**{**args, **given}, overrides=[], resume=full_run.checkpoint)

    stored = resume_config(full_run.checkpoint)
    cfg = config(task=stored.motion.task, envs=stored.env.num_envs, kappa=stored.sim.kappa, iterations=9)
    assert cfg.runner.iterations == 9 and cfg.motion.task == stored.motion.task
    for given, needle in (({"task": "run"}, "TASK run (stored: dance)"), ({"kappa": 50.0}, "--kappa 50.0")):
        with pytest.raises(BcgdError, match=needle.replace("(", r"\(").replace(")", r"\)")) as info:
            config(**given)
        assert "\n" not in str(info.value)


def test_a_stop_noted_while_the_ranks_gather_is_kept_for_the_next_boundary(tmp_path, tiny_motion):
    """A rank's signal handler runs when its main thread is back from a collective: after its stop flag went
    out with the iteration's statistics. The ranks' decision (no one had asked) must not erase that request
    (else the launcher's stop is lost and the ranks run to the end); it goes out with the
    next iteration's statistics, and every rank stops there and saves."""
    import signal

    cfg = tiny_cfg(f"runner.out_dir={tmp_path}", "runner.iterations=6", "runner.save_every=100")
    tr = Trainer(cfg, motion=tiny_motion)
    gather, calls = tr.world.all_gather_object, []

    def gather_then_signal(obj):  # noqa: ANN001, ANN202
        out = gather(obj)
        calls.append(obj.get("stop") if isinstance(obj, dict) else None)
        if len(calls) == 2:
            tr._stop.note(signal.SIGINT)  # the handler, right after the collective returned
        return out

    tr.world.all_gather_object = gather_then_signal
    res = tr.run()
    assert res.iteration == 3 and res.checkpoint is not None and (tmp_path / "run.pt").exists()
    assert [e["iteration"] for e in tr.events if e["event"] == "interrupted"] == [3]
    assert calls == [False, False, True]  # it went out with iteration 3's statistics
