"""Run folders and their checkpoint files: where runs live, what they hold, and reading them back.

- ``RUNS_DIR`` (``runs/``): ``bcgd train TASK`` writes ``runs/TASK/run.pt`` (or ``runs/TASK-2``, ... when that
  one holds a run or is in use: ``bcg_deploy.rundir``); ``find_checkpoint("run.pt")`` finds the file a user
  means when typing a bare name in the folder they trained in.
- ``CHECKPOINT_NAME`` (``run.pt``) and ``SNAPSHOT_DIR`` (``snapshots/run_<iteration>.pt``) inside a run folder;
  ``keep_snapshot`` keeps the run.pt just written as a snapshot.
- ``load_resume_checkpoint(path, robot)``: a checkpoint with the training state a resume needs;
  ``resume_point(path)`` / ``resume_config(path)``: the stored config (and iteration) a resume starts from;
  ``stopped_run_note(run_dir)``: what a stopped run leaves and how to continue it.

Light on purpose (no simulator, no Warp): planning a run (``training.run.plan_run``) reads these.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from bcg_deploy.errors import BcgdError
from bcg_deploy.training import checkpoint as ckpt_io
from bcg_deploy.training.config import TrainConfig, from_dict

RUNS_DIR = Path("runs")


def run_checkpoints(root: Path = RUNS_DIR, name: str = "run.pt") -> list[Path]:
    """``root/*/name`` files, newest first (modification time)."""
    if not root.is_dir():
        return []
    found = [p for p in root.glob(f"*/{name}") if p.is_file()]
    return sorted(found, key=lambda p: (p.stat().st_mtime, str(p)), reverse=True)


def find_checkpoint(path: Path) -> tuple[Path, str | None]:
    """``path`` itself when it exists; else, for a bare file name, the newest ``runs/*/NAME``.

    Returns (path, note): the note says which file was picked and why (None when ``path`` exists).
    Raises a one-line BcgdError naming where run checkpoints are when none is found.
    """
    path = Path(path)
    if path.exists() or path.parent != Path("."):
        return path, None
    found = run_checkpoints(RUNS_DIR, path.name)
    if not found:
        raise BcgdError(
            f"checkpoint {path} not found here or in {RUNS_DIR}/*/{path.name}; "
            f"`bcgd train TASK` writes {RUNS_DIR}/TASK/run.pt, pass that path"
        )
    note = f"{path} is not in this folder: using {found[0]}"
    if len(found) > 1:
        others = ", ".join(str(p) for p in found[1:4]) + (", ..." if len(found) > 4 else "")
        note += f" (the newest of {len(found)}; also {others})"
    return found[0], note


CHECKPOINT_NAME = "run.pt"
SNAPSHOT_DIR = "snapshots"
TRAINING_KEYS = ("env_state", "add_replay", "shac_state", "episode_history")


def load_resume_checkpoint(path: Path, robot) -> dict:  # noqa: ANN001
    """``load_checkpoint`` plus the training-only keys a resume needs; one-line BcgdError otherwise."""
    try:
        ck = ckpt_io.load_checkpoint(path, robot)
    except BcgdError:
        raise
    except Exception as exc:  # noqa: BLE001 - any unpickling failure of a foreign file is bad input
        raise BcgdError(f"checkpoint {path} is not a readable torch file ({type(exc).__name__})") from None
    for key in TRAINING_KEYS:
        if key not in ck:
            raise BcgdError(f"checkpoint {path} lacks training state {key!r}; cannot resume from it")
    return ck


def keep_snapshot(run_pt: Path, iteration: int) -> Path:
    """Keep the run.pt just written as ``<run>/snapshots/run_<iteration, 6 digits>.pt``; returns its path.

    A hard link (run.pt is always replaced by a new file, never written in place, so the snapshot stays as
    it was) or, where the file system has none, a copy; either way atomic. A snapshot that cannot be kept
    is logged by the caller's events and never stops the run: run.pt itself is already written."""
    dest = run_pt.parent / SNAPSHOT_DIR / f"run_{iteration:06d}.pt"
    dest.parent.mkdir(exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    try:
        os.link(run_pt, tmp)
    except OSError:
        shutil.copyfile(run_pt, tmp)
    os.replace(tmp, dest)
    return dest


def resume_config(path: Path) -> TrainConfig:
    """The config stored in a run.pt (for ``--resume``; the CLI applies explicit options on top)."""
    return resume_point(path)[0]


def resume_point(path: Path) -> tuple[TrainConfig, int]:
    """The stored config and the iteration a run.pt was saved at."""
    ck = load_resume_checkpoint(Path(path), None)
    d = dict(ck["config"])
    d["sim"] = {k: v for k, v in d["sim"].items() if k != "control_dt"}
    cfg = from_dict(d)
    cfg.runner.stop_at = 0  # a stop point belongs to the invocation that stopped, not to the run
    return cfg, int(ck["iteration"])


def stopped_run_note(run_dir: Path) -> str:
    """What a stopped run leaves: its last checkpoint and how to continue, or nothing."""
    ckpt = run_dir / CHECKPOINT_NAME
    return f"{ckpt} is intact; continue with --resume {ckpt}" if ckpt.exists() else "no run.pt was written yet"
