"""Shared test helpers: where ../shared is, a skip when it is absent, and loading a script of the repo."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

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


def load_script(relative: str) -> ModuleType:
    """The module of a script outside the package (``tools/...``, ``bench/...``), loaded from its file."""
    path = REPO / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
