"""Where the commands find their inputs and may write their outputs (checked before any work starts).

``find_checkpoint("run.pt")`` finds the file a new user means: ``bcgd train dance`` writes
``runs/dance/run.pt``, and ``bcgd export run.pt`` typed in the same folder should find it.
"""

from __future__ import annotations

from pathlib import Path

from bcg_deploy.errors import BcgdError
from bcg_deploy.fileio import check_writable as check_writable

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
