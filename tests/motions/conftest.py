"""Shared fixtures for the motions tests: a private library dir, LAFAN1 paths, synthetic CSVs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bcg_deploy.robots import load_robot

REPO = Path(__file__).resolve().parents[2]
LAFAN1_DIR = REPO.parent / "shared" / "data" / "lafan1_g1"
LAFAN1_FILES = ("run1_subject2", "jumps1_subject1", "fight1_subject2", "dance1_subject1")


@pytest.fixture(scope="module", autouse=True)
def bcgd_home(tmp_path_factory):
    """Every test module gets its own empty library dir (BCGD_HOME), never the user's."""
    home = tmp_path_factory.mktemp("bcgd_home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BCGD_HOME", str(home))
        yield home


@pytest.fixture(scope="session")
def robot():
    return load_robot("g1")


def lafan1_dir() -> Path:
    """The shared LAFAN1 folder, or skip the test when this machine has none."""
    if not all((LAFAN1_DIR / f"{n}.csv").is_file() for n in LAFAN1_FILES):
        pytest.skip(f"LAFAN1 G1 clips not found in {LAFAN1_DIR}")
    return LAFAN1_DIR


def synthetic_rows(robot, seconds: float, fps: float = 30.0, seed: int = 0) -> np.ndarray:
    """A valid LAFAN1-format array [N, 36] (xyzw quaternion): home pose, walking pelvis, swinging arms."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(round(seconds * fps)) + 1) / fps
    n = len(t)
    rows = np.zeros((n, 36))
    rows[:, 0] = 0.2 * t
    rows[:, 2] = robot.default_root_pos[2] + 0.01 * np.sin(2 * np.pi * t)
    yaw = 0.2 * np.sin(2 * np.pi * 0.3 * t)
    rows[:, 3:7] = np.stack([0 * t, 0 * t, np.sin(yaw / 2), np.cos(yaw / 2)], axis=1)  # x y z w
    q = np.tile(robot.default_joint_pos, (n, 1))
    arms = np.arange(15, 29)
    freq = rng.uniform(0.3, 1.2, size=len(arms))
    q[:, arms] += 0.3 * np.sin(2 * np.pi * freq * t[:, None])
    lo, hi = robot.joint_range[:, 0], robot.joint_range[:, 1]
    rows[:, 7:] = np.clip(q, lo + 0.01, hi - 0.01)
    return rows


def write_csv(path: Path, rows: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(",".join(f"{v:.6f}" for v in r) for r in rows) + "\n")
    return path
