"""Shared fixtures for the motions tests: a private library dir, LAFAN1 paths (synthetic CSVs: tests.synthetic)."""

from __future__ import annotations

from pathlib import Path

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
