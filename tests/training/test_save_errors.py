"""A checkpoint that cannot be written (a full disk, a file-size limit): one line naming the file and the
cause, the temporary file removed, the previous run.pt as it was, the run stopped with a non-zero exit.

The write errors are real: the child process runs under a file-size limit (RLIMIT_FSIZE, with SIGXFSZ
ignored), so the kernel fails the write with EFBIG, as it fails one with ENOSPC on a full disk.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys

from tests.conftest import child_env, run_under_size_limit

TINY = [
    "--envs", "8", "--horizon", "2", "--nproc", "1", "--set", "shac.actor_hidden=32,32",
    "--set", "shac.critic_hidden=32", "--set", "add.hidden=32", "--set", "shac.critic_iterations=1",
    "--set", "add.replay_size=256",
]  # fmt: skip


_SAVE = r"""
import sys, torch
from bcg_deploy.errors import BcgdError
from bcg_deploy.training.checkpoint import save_checkpoint
payload = {"actor": {"mu.weight": torch.ones(1_000_000)}, "obs_normalizer": {"mean": torch.zeros(3)}}
try:
    save_checkpoint(sys.argv[1], payload)
except BcgdError as exc:
    print(exc)
    sys.exit(2)
"""


def test_save_checkpoint_under_a_size_limit_keeps_the_previous_file(tmp_path):
    run_pt = tmp_path / "run.pt"
    run_pt.write_bytes(b"the previous good checkpoint")
    proc = run_under_size_limit(["-c", _SAVE, str(run_pt)], 1 << 20)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stdout.strip() == f"cannot write checkpoint {run_pt}: File too large; the previous {run_pt} is intact"
    assert run_pt.read_bytes() == b"the previous good checkpoint"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.pt"]  # no temporary file left


def test_training_that_cannot_save_stops_with_one_line_and_run_pt_intact(tmp_path):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "bcg_deploy.cli", "train", "dance", "--iterations", "1", *TINY, "--out", str(run)]
    first = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    good = hashlib.sha256((run / "run.pt").read_bytes()).hexdigest()
    limit = (run / "run.pt").stat().st_size // 2  # config, logs and events fit; the next checkpoint does not
    proc = run_under_size_limit(["-m", "bcg_deploy.cli", "train", "--resume", str(run / "run.pt"), "--iterations", "2",
                                 "--nproc", "1"], limit, timeout=600)  # fmt: skip
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert errors == [f"error: cannot write checkpoint {run / 'run.pt'}: File too large; the previous "
                      f"{run / 'run.pt'} is intact"], proc.stderr  # fmt: skip
    assert hashlib.sha256((run / "run.pt").read_bytes()).hexdigest() == good
    assert not [p.name for p in run.iterdir() if p.name.startswith(".")]  # no temporary file, no lock


_LOG = r"""
import sys
from pathlib import Path
from bcg_deploy.errors import BcgdError
from bcg_deploy.training.logger import MetricsLogger
log = MetricsLogger(Path(sys.argv[1]), tensorboard=False)
try:
    for it in range(1, 1000):
        log.log({"iteration": it, "reward": 0.5, "note": "x" * 100})
except BcgdError as exc:
    print(exc)
    sys.exit(2)
"""


def test_a_metrics_log_that_cannot_grow_stops_with_one_line(tmp_path):
    proc = run_under_size_limit(["-c", _LOG, str(tmp_path)], 4096)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stdout.strip() == f"cannot write {tmp_path / 'metrics.jsonl'}: File too large"
