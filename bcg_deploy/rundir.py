"""One writer per run folder: claiming the folder a training writes, held for the whole run.

A run folder (``runs/dance``) is written by exactly one process: the one that claimed it. The claim is
an exclusive ``fcntl.flock`` on the lock file ``<folder>/.bcgd-train.lock`` (it holds the owner's pid,
for messages). The kernel drops such a lock when its process ends, however it ends (SIGKILL, a crash, a
power cut), so a killed run leaves no lock that blocks later ones; the lock file itself is removed when
the run ends normally and ignored when it is left behind. ``flock`` is taken non-blocking: a second
claimant never waits, it is refused at once (or moves on).

- ``next_free=True`` (``bcgd train TASK`` without ``--out``): the first of ``runs/TASK``, ``runs/TASK-2``,
  ``runs/TASK-3``, ... that this process either created (``os.mkdir`` is atomic: of two processes that
  create one name, one fails) or found empty and unlocked; a folder that holds anything (an earlier run,
  a run that was killed before its first checkpoint) or is locked is skipped. The emptiness is checked
  under the lock, so two processes that start at the same moment always end in two folders.
- ``next_free=False`` (``--out DIR``, ``--resume``): ``DIR`` or a one-line error when another process holds
  it. A new run (not a resume) in a folder that holds a run is refused without ``force``; a new run in a
  folder with an earlier run's files removes those files first (``RUN_FILES``: checkpoint, config, logs,
  TensorBoard events, snapshots), so that a folder never mixes two runs.

Data-parallel runs: the process that starts the ranks (``bcgd train --nproc N``, or the first machine of
``--nnodes``) claims the folder and the ranks inherit the open lock file (``held_fds``, passed to them), so
the lock lives as long as any of them; ``HELD_ENV`` in their environment tells the ranks not to claim it
again (they would be refused: the lock is taken). A rank started by a torchrun of the user's own claims the
folder when it is rank 0, and only then (it alone writes).

The claim also removes the folder again (and the parents it made, such as ``runs/``) when this process
created it and leaves it with nothing in it (a run that stopped on bad input before writing anything), at
``release`` or at interpreter exit.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import os
from dataclasses import dataclass, field
from pathlib import Path

from bcg_deploy.errors import BcgdError

LOCK_NAME = ".bcgd-train.lock"
HELD_ENV = "BCGD_RUN_DIR_HELD"
"""Set (to the folder) in the environment of the processes a claimant starts: the folder is claimed for them."""
RUN_FILES = (
    "run.pt",
    "config.yaml",
    "metrics.jsonl",
    "events.jsonl",
    "learning_curve.png",
    "tb",
    "snapshots",
)
"""What ``bcgd train`` writes in its folder; an earlier run's are removed before a new run starts there."""
MAX_SUFFIX = 10_000

_held: list[RunClaim] = []


class RunDirBusy(BcgdError):
    """Another process holds the run folder."""


@dataclass
class RunClaim:
    """A claimed run folder: ``path``, the open lock file ``fd`` (the lock lives while it is open)."""

    path: Path
    fd: int
    made: list[Path] = field(default_factory=list)
    """The folders this process created for the claim, the run folder last (removed again if left empty)."""
    notes: list[str] = field(default_factory=list)
    """One line each for the user: which folder was taken instead of another, what was removed."""

    def release(self) -> None:
        """Drop the lock; remove the lock file, and the folder when this process created it and left it empty."""
        if self.fd < 0:
            return
        try:
            lock = self.path / LOCK_NAME
            if _same_file(lock, self.fd):
                with contextlib.suppress(OSError):
                    lock.unlink()
                for folder in reversed(self.made):
                    try:
                        folder.rmdir()  # only succeeds when nothing else is in it
                    except OSError:
                        break
        finally:
            os.close(self.fd)
            self.fd = -1
            if self in _held:
                _held.remove(self)
            if os.environ.get(HELD_ENV) == str(self.path):
                del os.environ[HELD_ENV]

    @property
    def created(self) -> bool:
        """Whether this process created the run folder."""
        return bool(self.made) and self.made[-1] == self.path

    def __enter__(self) -> RunClaim:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def held_fds() -> tuple[int, ...]:
    """The lock files this process holds: a launcher passes them to the ranks it starts, so that the lock
    outlives a launcher that is killed while its ranks still write."""
    return tuple(c.fd for c in _held if c.fd >= 0)


def _same_file(path: Path, fd: int) -> bool:
    try:
        a, b = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _try_lock(folder: Path) -> int | None:
    """The fd of ``folder``'s lock file, locked by this process; None when another process holds it.

    A lock file that was removed (or replaced) between our open and our lock belongs to a folder whose
    owner just cleaned up: try again on the current one.
    """
    lock = folder / LOCK_NAME
    for _ in range(100):
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return None
            raise
        if _same_file(lock, fd):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return fd
        os.close(fd)  # the lock file was removed meanwhile: lock the one there now
    raise BcgdError(f"cannot lock run folder {folder}: its lock file keeps changing")


def _holder(folder: Path) -> str:
    try:
        pid = (folder / LOCK_NAME).read_text().strip()
    except OSError:
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""


def _empty(folder: Path) -> bool:
    return all(p.name == LOCK_NAME for p in folder.iterdir())


def _mkdir(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; the folders created, outermost first (none: it existed).

    A parent that another claimant removes meanwhile (its run left it empty) is made again."""
    made: list[Path] = []
    for _ in range(10):
        try:
            for p in (*reversed(folder.parents), folder):
                if not p.exists():
                    try:
                        p.mkdir()
                    except FileExistsError:
                        continue  # another process made it meanwhile: not ours to remove
                    made.append(p)
            return made
        except FileNotFoundError:
            continue
    folder.mkdir(parents=True, exist_ok=True)  # raises the error that keeps it from being made
    return made


def _claimed(claim: RunClaim) -> RunClaim:
    _held.append(claim)
    os.environ[HELD_ENV] = str(claim.path)
    atexit.register(claim.release)
    return claim


def claim_run_dir(
    path: str | os.PathLike, next_free: bool = False, fresh: bool = True, force: bool = False
) -> RunClaim:
    """Claim the run folder ``path`` for this process (see the module docstring).

    ``fresh``: a new run (False: a resume, which continues the folder's run). ``force``: a new run may
    replace a run that ended (never one that is being written). One-line BcgdError when the folder cannot
    be claimed.
    """
    path = Path(path)
    try:
        return _claim_next_free(path) if next_free else _claim(path, fresh, force)
    except OSError as exc:
        raise BcgdError(f"cannot write the run folder {path}: {exc.strerror or exc}") from None


def _claim_next_free(base: Path) -> RunClaim:
    skipped: list[str] = []
    parents: list[Path] = []  # made for the first candidates: ours to remove if left empty
    for n in range(1, MAX_SUFFIX):
        folder = base if n == 1 else base.with_name(f"{base.name}-{n}")
        if folder.exists() and not folder.is_dir():
            skipped.append(f"{folder} is a file")
            continue
        made = _mkdir(folder)
        created = bool(made) and made[-1] == folder
        parents += [p for p in made if p != folder]
        if not created and not _empty(folder):  # an earlier run's: no lock file of ours left in it
            skipped.append(f"{folder} holds a run")
            continue
        fd = _try_lock(folder)
        if fd is None:
            skipped.append(f"{folder} is in use")
            continue
        if not _empty(folder):  # another process wrote it between the look above and our lock
            with contextlib.suppress(OSError):
                (folder / LOCK_NAME).unlink()  # safe under the lock: a later opener sees another file
            os.close(fd)
            skipped.append(f"{folder} holds a run")
            continue
        claim = RunClaim(folder, fd, parents + ([folder] if created else []))
        if folder != base and any("in use" in s for s in skipped):
            claim.notes.append(f"{folder}: {', '.join(s for s in skipped if 'in use' in s)} by another bcgd train")
        return _claimed(claim)
    raise BcgdError(f"no free run folder {base}-N up to N = {MAX_SUFFIX - 1}; give --out DIR")


def _claim(folder: Path, fresh: bool, force: bool) -> RunClaim:
    if folder.exists() and not folder.is_dir():
        raise BcgdError(f"--out {folder}: it is a file, expected a run folder")
    made = _mkdir(folder)
    fd = _try_lock(folder)
    if fd is None:
        _remove_empty(made)
        raise RunDirBusy(
            f"run folder {folder} is being written by another bcgd train{_holder(folder)}; wait for it to end "
            "or give another --out"
        )
    claim = RunClaim(folder, fd, made)
    try:
        if fresh:
            run_pt = folder / "run.pt"
            if (run_pt.exists() or run_pt.is_symlink()) and not force:
                raise BcgdError(
                    f"--out {folder}: it holds a run ({run_pt}); continue it with --resume {run_pt}, "
                    "pick another --out, or overwrite it with --force"
                )
            removed = clear_run_files(folder)
            if removed:
                claim.notes.append(f"removed the earlier run's {', '.join(removed)} from {folder}")
    except BaseException:
        claim.release()
        raise
    return _claimed(claim)


def _remove_empty(made: list[Path]) -> None:
    for folder in reversed(made):
        try:
            folder.rmdir()
        except OSError:
            return


def clear_run_files(folder: Path) -> list[str]:
    """Remove ``RUN_FILES`` (and their temporary files) from ``folder``; the names removed."""
    import shutil

    removed = []
    for name in RUN_FILES:
        p = folder / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()
        else:
            continue
        removed.append(name + ("/" if name in ("tb", "snapshots") else ""))
    for p in folder.glob(".run.pt.*"):
        with contextlib.suppress(OSError):
            p.unlink()
    return removed


def is_run_writer(out_dir: str | os.PathLike, node_rank: int = 0) -> bool:
    """Whether this process must claim the run folder ``out_dir``: a single process or a launcher (of the
    first machine, ``node_rank`` 0), or rank 0 of a torchrun that no claimant of ours started. A rank whose
    launcher holds the folder (``HELD_ENV`` names it) and every other rank claim nothing."""
    if os.environ.get(HELD_ENV) == str(Path(out_dir)):
        return False
    if "WORLD_SIZE" in os.environ:
        return os.environ.get("RANK", "0") == "0"
    return node_rank == 0


def claim_for_training(
    out_dir: str | os.PathLike, auto: bool, resume: bool, force: bool, node_rank: int = 0
) -> RunClaim | None:
    """``bcgd train``'s claim: the folder the run writes (``auto``: the default ``runs/TASK``, moving on to
    the next free ``-N``), or None in a process that does not write it (``is_run_writer``)."""
    if not is_run_writer(out_dir, node_rank):
        return None
    return claim_run_dir(out_dir, next_free=auto, fresh=not resume, force=force)
