"""A new user's first hour (issue 16): the brief's three commands typed in one empty folder, and what
protects their results (numbered run folders, refusals, Ctrl-C, resume and its learning-rate decay)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.cli.util import REPO, assert_one_line_error, bcgd

TINY = ("--envs", "8", "--horizon", "4")


@pytest.fixture()
def home(tmp_path):
    """An empty working folder and an empty clip library (built-in clips, as on a fresh machine)."""
    (tmp_path / "work").mkdir()
    return tmp_path / "work", {"BCGD_HOME": str(tmp_path / "library")}


def test_the_three_brief_commands_in_one_empty_folder(home):
    cwd, env = home
    train = bcgd("train", "dance", "--iterations", "2", *TINY, cwd=cwd, env=env)
    assert train.returncode == 0, train.stderr[-3000:]
    assert (cwd / "runs" / "dance" / "run.pt").is_file()
    assert "checkpoint runs/dance/run.pt" in train.stdout and "next: bcgd export runs/dance/run.pt" in train.stdout
    assert "Warp" not in train.stdout and "Warp" not in train.stderr  # no banner or CUDA warning in the way
    assert "bcgd train dance (built-in (synthetic))" in train.stdout  # an empty library: the header says which clip

    export = bcgd("export", "run.pt", cwd=cwd, env=env)
    assert export.returncode == 0, export.stderr[-3000:]
    assert "using runs/dance/run.pt" in export.stderr and (cwd / "policy.onnx").is_file()
    assert "next: bcgd sim2sim policy.onnx --noise" in export.stdout

    sim = bcgd("sim2sim", "policy.onnx", "--noise", "--json", "report.json", cwd=cwd, env=env)
    assert sim.returncode == 0, sim.stderr[-3000:]
    report = json.loads((cwd / "report.json").read_text())
    assert report["settings"]["noise_scale"] == 1.0 and report["aggregate"]["runs"] == 5
    assert len({r["e_track_cm"] for r in report["runs"]}) == 5  # five different runs

    half = bcgd("sim2sim", "policy.onnx", "--noise", "0.5", "--runs", "1", "--json", "-", cwd=cwd, env=env)
    assert half.returncode == 0 and json.loads(half.stdout)["settings"]["noise_scale"] == 0.5

    # A second `bcgd train dance` keeps the first run: it goes to runs/dance-2.
    again = bcgd("train", "dance", "--iterations", "1", *TINY, cwd=cwd, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (cwd / "runs" / "dance-2" / "run.pt").is_file() and (cwd / "runs" / "dance" / "run.pt").is_file()
    newest = bcgd("export", "run.pt", "-o", "p2.onnx", "--parity-samples", "64", cwd=cwd, env=env)
    assert newest.returncode == 0 and "using runs/dance-2/run.pt (the newest of 2; also runs/dance/run.pt)" in (
        newest.stderr
    )
    refused = bcgd("train", "dance", "--out", "runs/dance", *TINY, cwd=cwd, env=env)
    assert_one_line_error(refused, "it holds a run (runs/dance/run.pt); continue it with --resume")
    done = bcgd("train", "--resume", "runs/dance/run.pt", "--iterations", "2", cwd=cwd, env=env)
    assert_one_line_error(done, "the run is at iteration 2, so --iterations 2 leaves nothing to train")


def test_export_with_no_run_says_where_run_pt_would_be(home):
    cwd, env = home
    proc = bcgd("export", "run.pt", cwd=cwd, env=env)
    assert_one_line_error(proc, "checkpoint run.pt not found here or in runs/*/run.pt")


def test_resume_continues_the_learning_rate_decay_and_logs_lines(home):
    """Stopped at 2 of 4 iterations, resumed to 6: the rate goes on down from where it was (no jump back
    up), the config records the line, and a piped run prints one line every --log-every iterations."""
    cwd, env = home
    first = bcgd("train", "dance", "--iterations", "4", "--keep-every", "2", "--set", "runner.stop_at=2", *TINY,
                 cwd=cwd, env=env)  # fmt: skip
    assert first.returncode == 0, first.stderr[-3000:]
    assert (cwd / "runs" / "dance" / "snapshots" / "run_000002.pt").is_file()  # --keep-every 2
    res = bcgd("train", "--resume", "run.pt", "--iterations", "6", "--log-every", "2", cwd=cwd, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "learning rate: the decay continues from the current actor rate" in res.stdout
    assert "bcgd train dance (built-in (synthetic), from the checkpoint)" in res.stdout
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("iteration ")]
    assert [ln.split()[1] for ln in lines] == ["3/6", "4/6", "6/6"], res.stdout  # first, every 2nd, last
    assert all(" it/s " in ln and "ETA" in ln and "reward" in ln and "track" in ln for ln in lines)
    rows = [json.loads(ln) for ln in (cwd / "runs" / "dance" / "metrics.jsonl").read_text().splitlines()]
    lr = {r["iteration"]: r["actor_lr"] for r in rows}
    lr0, lmin = 5e-3, 1e-5
    now = lr0 + (lmin - lr0) * 2 / 4  # the stored schedule's rate at iteration 2
    assert lr[3] == pytest.approx(now, rel=1e-9)  # not the stretched schedule's lr0 + (lmin - lr0) * 2 / 6
    assert lr[6] == pytest.approx(now + (lmin - now) * 3 / 4, rel=1e-9)
    assert lr[1] > lr[2] > lr[3] > lr[4] > lr[5] > lr[6]
    moved = bcgd("train", "--resume", "runs/dance/run.pt", "--iterations", "8", "--start", "3", cwd=cwd, env=env)
    assert_one_line_error(moved, "--start 3.0 (stored: the task's window)")
    import yaml

    cfg = yaml.safe_load((cwd / "runs" / "dance" / "config.yaml").read_text())
    assert cfg["runner"]["iterations"] == 6 and cfg["shac"]["actor_lr"] == pytest.approx((now * 6 - lmin * 2) / 4)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_or_sigterm_saves_and_names_only_written_files(home, signum):
    """One process (8 envs): Ctrl-C, or SIGTERM from a scheduler or ``timeout``, saves at the iteration
    boundary and exits 128 + the signal."""
    cwd, env = home
    cmd = [sys.executable, "-m", "bcg_deploy.cli", "train", "dance", "--iterations", "500", *TINY]
    cmd += ["--log-every", "1", "--set", "runner.tensorboard=false"]
    import os

    e = {**os.environ, **env, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, cwd=cwd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = ""
    deadline = time.monotonic() + 240
    while "iteration 1/500" not in seen and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=600)  # saving and plotting on a loaded 2-core machine took > 120 s
    out = seen + out
    assert proc.returncode == 128 + signum, (out, err)
    assert "Traceback" not in err and "interrupted: iteration" in out, (out, err)
    assert (cwd / "runs" / "dance" / "run.pt").is_file()
    assert "continue with: bcgd train --resume runs/dance/run.pt" in out
    assert "tensorboard" not in out  # tensorboard was off: no such folder is named
