"""A run folder's checkpoint files and reading them back: ``run.pt``, the kept snapshots, a resume's start.

- ``CHECKPOINT_NAME`` (``run.pt``) and ``SNAPSHOT_DIR`` (``snapshots/run_<iteration>.pt``) inside the run folder.
- ``load_resume_checkpoint(path, robot)``: a checkpoint with the training state a resume needs.
- ``keep_snapshot(run_pt, iteration)``: keep the run.pt just written as a snapshot.
- ``resume_point(path)`` / ``resume_config(path)``: the stored config (and iteration) a resume starts from.

Light on purpose (no simulator, no Warp): planning a run (``training.run.plan_run``) reads these.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from bcg_deploy.errors import BcgdError
from bcg_deploy.training import checkpoint as ckpt_io
from bcg_deploy.training.config import TrainConfig, from_dict

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
