"""Shared test helpers: where ../shared is, and a skip when it is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FACTS = SHARED / "reference" / "g1_29dof.json"
LAFAN1_DIR = SHARED / "data" / "lafan1_g1"


def require_shared(path: Path) -> Path:
    """Return ``path`` or skip the test when ../shared (licensed data, facts) is absent."""
    if not path.exists():
        pytest.skip(f"{path} not present (../shared is only on development machines)")
    return path
