"""One writer per run folder, end to end (issue 48): ``bcgd train`` into a folder that another training
holds is refused with one line; two trainings started at the same moment never share a folder; a training
stopped by bad input before writing anything leaves no folder behind. The claim itself is tested in
tests/test_rundir.py; the 20-round acceptance loop is tools/concurrent_train.py."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.cli.util import REPO, assert_one_line_error, bcgd
from tests.conftest import load_script

TINY = ("--iterations", "1", "--envs", "8", "--horizon", "2", "--nproc", "1")


def test_train_into_a_folder_in_use_is_refused(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("BCGD_RUN_DIR_HELD", None)
    run.mkdir()
    hold = (  # what a running bcgd train holds (bcg_deploy.rundir): an flock on the folder's lock file
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1] + '/.bcgd-train.lock', os.O_RDWR | os.O_CREAT); "
        "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, f'{os.getpid()}\\n'.encode()); print('held', flush=True); "
        "time.sleep(600)"
    )
    holder = subprocess.Popen([sys.executable, "-c", hold, str(run)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        proc = bcgd("train", "dance", *TINY, "--out", run)
        assert_one_line_error(proc, f"run folder {run} is being written by another bcgd train (pid {holder.pid})")
        assert sorted(p.name for p in run.iterdir()) == [".bcgd-train.lock"]  # nothing of the refused run
    finally:
        holder.kill()
        holder.wait()


def test_two_trainings_started_together_into_one_folder_never_mix(tmp_path):
    """One round of tools/concurrent_train.py: both at the same moment into one --out folder."""
    tool = load_script("tools/concurrent_train.py")
    results = tool.start_pair(tmp_path, "runs/shared", 1, 8, [])
    assert tool.check_round(tmp_path, results, "out", 1) == []


def test_bad_input_after_the_folder_is_claimed_leaves_no_folder(tmp_path):
    """--nproc 0 is refused once the run folder is taken: the empty folder goes with the refusal."""
    proc = bcgd("train", "dance", "--iterations", "1", "--envs", "8", "--nproc", "0", cwd=tmp_path)
    assert_one_line_error(proc, "--nproc 0: expected at least 1")
    assert list(tmp_path.iterdir()) == []  # neither runs/dance nor the runs/ made for it
