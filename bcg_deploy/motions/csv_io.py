"""Read and validate a LAFAN1 G1 CSV (Unitree's retargeting format) into source-rate arrays.

Format: no header, comma-separated, 30 frames per second, 36 columns per row: pelvis position
x y z (m, world, z up), pelvis quaternion in x y z w order, then the 29 hinge angles (rad) in the
robot's joint order. Rows are numbered from 1 (the line number in the file) in every error.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bcg_deploy.errors import BcgdError
from bcg_deploy.fileio import read_input
from bcg_deploy.motions.motion import Sampled
from bcg_deploy.robots import RobotSpec
from bcg_deploy.rotations import quat_numpy as Q

LAFAN1_FPS = 30.0
CSV_FILE = "a CSV file"
"""What a motion CSV path should name, in errors."""


@dataclass(frozen=True)
class CsvCheck:
    """Validation tolerances for a motion CSV.

    Attributes:
        quat_norm_tol: the xyzw quaternion's norm must be within 1 +/- this (LAFAN1: 1e-6).
        joint_limit_tol: rad a joint may exceed its MJCF range before the file is rejected; values
            inside the tolerance are clamped to the range (LAFAN1 G1 clips stay inside the range).
        min_rows: fewest frames a usable clip has.
    """

    quat_norm_tol: float = 0.01
    joint_limit_tol: float = 0.05
    min_rows: int = 2


@dataclass(frozen=True, eq=False)
class CsvClip(Sampled):
    """A validated clip at its source rate; quaternions already w x y z, continuous, unit norm.

    Attributes:
        path: the file read.
        fps: source frame rate (30).
        root_pos: [N, 3] pelvis position, m, world.
        root_quat: [N, 4] pelvis orientation, w x y z, world.
        joint_pos: [N, J] hinge angles, rad, clamped to the joint ranges.
        clamped: number of joint samples that were outside a range (within tolerance) and clamped.
    """

    path: Path
    fps: float
    root_pos: np.ndarray
    root_quat: np.ndarray
    joint_pos: np.ndarray
    clamped: int


def _fail(path: Path, row: int | None, msg: str) -> BcgdError:
    where = f"{path.name} row {row}" if row is not None else path.name
    return BcgdError(f"{where}: {msg}")


def _read_rows(path: Path, ncols: int) -> np.ndarray:
    """Parse the text into a [N, ncols] float64 array, or raise naming the first bad row."""
    data = read_input(path, CSV_FILE)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BcgdError(f"{path.name}: not a text file (expected comma-separated numbers)") from None
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise _fail(path, None, f"empty file, expected rows of {ncols} comma-separated numbers")
    rows = [line.split(",") for line in lines]
    for i, cells in enumerate(rows):
        if len(cells) != ncols:
            raise _fail(path, i + 1, f"expected {ncols} columns, got {len(cells)}")
    try:
        return np.array(rows, dtype=np.float64)
    except ValueError:
        pass
    for i, cells in enumerate(rows):  # slow path: find the offending cell
        for j, cell in enumerate(cells):
            try:
                float(cell)
            except ValueError:
                raise _fail(path, i + 1, f"column {j + 1}: {cell.strip()[:20]!r} is not a number") from None
    raise _fail(path, None, "cannot parse as numbers")  # pragma: no cover - unreachable


def validate_rows(path: Path, data: np.ndarray, robot: RobotSpec, check: CsvCheck) -> None:
    """Raise a one-line BcgdError naming the first invalid row of ``data`` [N, 7 + J] (xyzw order)."""
    n = len(data)
    if n < check.min_rows:
        raise _fail(path, None, f"{n} rows, expected at least {check.min_rows}")
    problems: list[tuple[int, str]] = []
    bad = ~np.isfinite(data)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        problems.append((int(r), f"column {c + 1}: non-finite value {data[r, c]}"))
    norm = np.linalg.norm(data[:, 3:7], axis=1)
    off = ~(np.abs(norm - 1.0) <= check.quat_norm_tol)
    off &= np.isfinite(norm)
    if off.any():
        r = int(np.argmax(off))
        problems.append((r, f"root quaternion norm {norm[r]:.4g}, expected 1 +/- {check.quat_norm_tol:g}"))
    q = data[:, 7:]
    lo, hi = robot.joint_range[:, 0], robot.joint_range[:, 1]
    with np.errstate(invalid="ignore"):
        excess = np.maximum(lo - q, q - hi)
    over = excess > check.joint_limit_tol
    if over.any():
        r, j = (int(x) for x in np.argwhere(over)[0])
        problems.append(
            (
                r,
                f"{robot.joint_names[j]} = {q[r, j]:.3f} rad is outside its range "
                f"[{lo[j]:.3f}, {hi[j]:.3f}] by more than {check.joint_limit_tol:g} rad",
            )
        )
    if problems:
        r, msg = min(problems, key=lambda p: p[0])
        raise _fail(path, r + 1, msg)


def read_lafan1_csv(path: str | Path, robot: RobotSpec, check: CsvCheck | None = None) -> CsvClip:
    """Read, validate and convert a LAFAN1 G1 CSV (30 fps, xyzw) to a :class:`CsvClip` (wxyz).

    Raises:
        BcgdError: one line naming the file and the first bad row (column count, non-number,
            non-finite value, quaternion norm, joint out of range by more than the tolerance).
    """
    path = Path(path)
    check = check or CsvCheck()
    ncols = 7 + robot.num_joints
    data = _read_rows(path, ncols)
    validate_rows(path, data, robot, check)
    root_quat = Q.make_continuous(Q.normalize(data[:, [6, 3, 4, 5]]))  # xyzw -> wxyz
    q = data[:, 7:]
    clamped_q = np.clip(q, robot.joint_range[:, 0], robot.joint_range[:, 1])
    return CsvClip(
        path=path,
        fps=LAFAN1_FPS,
        root_pos=data[:, :3].copy(),
        root_quat=root_quat,
        joint_pos=clamped_q,
        clamped=int(np.count_nonzero(clamped_q != q)),
    )
