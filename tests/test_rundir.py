"""One writer per run folder (``bcg_deploy.rundir``): processes that claim at the same moment never share a
folder, a claim that a killed process held does not block, a new run never starts in a folder that holds
another's files.

The races are real: separate processes released together by a start file, each claiming as soon as it
sees it (tens of microseconds apart), many rounds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bcg_deploy.errors import BcgdError
from bcg_deploy.rundir import LOCK_NAME, RunDirBusy, claim_run_dir

REPO = Path(__file__).resolve().parents[1]

_CLAIMANT = r"""
import os, sys, time
from pathlib import Path
from bcg_deploy.errors import BcgdError
from bcg_deploy.rundir import claim_run_dir
base, go, next_free = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "1"
Path(f"{go}.ready.{os.getpid()}").touch()
while not go.exists():
    pass  # spin: every claimant starts within microseconds of the others
try:
    claim = claim_run_dir(base, next_free=next_free)
except BcgdError as exc:
    print("refused", exc)
    sys.exit(2)
(claim.path / f"written_by_{os.getpid()}").write_text("x")  # what a run writes: held while it does
time.sleep(float(sys.argv[4]))
print("claimed", claim.path)
"""


def _race(tmp: Path, base: Path, n: int, next_free: bool, hold_s: float = 0.3) -> list[tuple[int, str]]:
    go = tmp / f"go.{time.monotonic_ns()}"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("BCGD_RUN_DIR_HELD", None)
    procs = [
        subprocess.Popen([sys.executable, "-c", _CLAIMANT, str(base), str(go), "1" if next_free else "0",
                          str(hold_s)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(n)
    ]  # fmt: skip
    deadline = time.monotonic() + 60
    while len(list(tmp.glob(f"{go.name}.ready.*"))) < n:
        assert time.monotonic() < deadline, [p.communicate() for p in procs]
        time.sleep(0.01)
    go.touch()
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=60)
        assert "Traceback" not in stderr, stderr
        out.append((p.returncode, stdout.strip()))
    return out


def test_simultaneous_default_claims_get_distinct_folders(tmp_path):
    """``bcgd train TASK`` started several times at once: each process gets its own runs/TASK[-N]."""
    for rnd in range(8):
        base = tmp_path / f"round{rnd}" / "runs" / "dance"
        results = _race(tmp_path, base, 3, next_free=True)
        assert all(code == 0 for code, _ in results), results
        folders = sorted(line.split(" ", 1)[1] for _, line in results)
        assert folders == sorted({str(base), str(base) + "-2", str(base) + "-3"}), folders
        for folder in folders:  # one writer each, and the lock files are gone after the runs
            assert len(list(Path(folder).glob("written_by_*"))) == 1
            assert not (Path(folder) / LOCK_NAME).exists()


def test_simultaneous_claims_of_one_folder_let_exactly_one_in(tmp_path):
    """``--out DIR`` twice at once: one claims it, the other is refused with one line naming the folder."""
    for rnd in range(8):
        base = tmp_path / f"round{rnd}" / "run"
        results = _race(tmp_path, base, 2, next_free=False)
        codes = sorted(code for code, _ in results)
        assert codes == [0, 2], results
        refused = next(line for code, line in results if code == 2)
        assert f"run folder {base} is being written by another bcgd train (pid " in refused
        assert len(list(base.glob("written_by_*"))) == 1


def test_a_killed_claimant_does_not_block(tmp_path):
    """The lock dies with its process (SIGKILL: no clean-up ran); its folder is claimable at once."""
    base = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("BCGD_RUN_DIR_HELD", None)
    code = (
        "import sys, time; from bcg_deploy.rundir import claim_run_dir; "
        "claim_run_dir(sys.argv[1]); print('held', flush=True); time.sleep(600)"
    )
    p = subprocess.Popen([sys.executable, "-c", code, str(base)], stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline().strip() == "held"
    with pytest.raises(RunDirBusy, match="is being written by another bcgd train"):
        claim_run_dir(base)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert (base / LOCK_NAME).exists()  # left behind: no clean-up ran
    with claim_run_dir(base) as claim:  # not blocked by it
        assert claim.path == base
    os.makedirs(tmp_path / "runs" / "dance")
    with claim_run_dir(tmp_path / "runs" / "dance", next_free=True) as claim:  # an empty folder is reused
        assert claim.path == tmp_path / "runs" / "dance" and not claim.created
    os.makedirs(tmp_path / "runs" / "walk")
    (tmp_path / "runs" / "walk" / LOCK_NAME).write_text("12345\n")  # a stale lock alone: still empty
    with claim_run_dir(tmp_path / "runs" / "walk", next_free=True) as claim:
        assert claim.path == tmp_path / "runs" / "walk"


def test_a_new_run_never_mixes_with_an_earlier_runs_files(tmp_path):
    """Default folder: one with any file of an earlier run is skipped. --out: a run there is refused without
    force; with force, or when only a killed run's logs are there, the earlier run's files go first."""
    earlier = tmp_path / "runs" / "dance"
    (earlier / "tb").mkdir(parents=True)
    (earlier / "tb" / "events.out.tfevents.1").write_text("x")
    (earlier / "metrics.jsonl").write_text("{}\n")  # killed before its first checkpoint: no run.pt
    with claim_run_dir(earlier, next_free=True) as claim:
        assert claim.path == tmp_path / "runs" / "dance-2"
    with claim_run_dir(earlier) as claim:  # --out: its own logs of a run that never saved are cleared
        assert not (earlier / "tb").exists() and not (earlier / "metrics.jsonl").exists()
        assert "removed the earlier run's metrics.jsonl, tb/" in claim.notes[0]
    (earlier / "run.pt").write_bytes(b"a run")
    (earlier / "notes.txt").write_text("the user's own file")
    with pytest.raises(BcgdError, match="it holds a run"):
        claim_run_dir(earlier)
    assert (earlier / "run.pt").read_bytes() == b"a run"
    with claim_run_dir(earlier, force=True):
        assert not (earlier / "run.pt").exists() and (earlier / "notes.txt").exists()
    (earlier / "run.pt").write_bytes(b"a run")
    with claim_run_dir(earlier, fresh=False):  # a resume continues the folder's run: nothing removed
        assert (earlier / "run.pt").exists()


def test_a_folder_made_and_left_empty_is_removed(tmp_path):
    claim = claim_run_dir(tmp_path / "runs" / "dance", next_free=True)
    assert claim.created and claim.path.is_dir() and os.environ["BCGD_RUN_DIR_HELD"] == str(claim.path)
    claim.release()
    assert not (tmp_path / "runs").exists() and "BCGD_RUN_DIR_HELD" not in os.environ
    kept = claim_run_dir(tmp_path / "runs" / "dance", next_free=True)
    (kept.path / "config.yaml").write_text("x")
    kept.release()
    assert (kept.path / "config.yaml").exists() and not (kept.path / LOCK_NAME).exists()
