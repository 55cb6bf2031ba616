"""Fixtures for the command-line tests: an exported (untrained) policy, a folder nobody may write."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def policy_onnx(tmp_path_factory) -> Path:
    from tests.sim2sim.conftest import export_untrained

    return export_untrained(tmp_path_factory.mktemp("cli_policy"))


@pytest.fixture(scope="session")
def readonly_dir(tmp_path_factory) -> Path:
    """A folder in which no file can be created: mode 0555, or (as root, who ignores modes) a folder of
    the read-only /sys tree that cannot be created."""
    d = tmp_path_factory.mktemp("ro")
    os.chmod(d, 0o555)
    try:
        (d / "probe").touch()
    except OSError:
        return d
    (d / "probe").unlink()
    os.chmod(d, 0o755)
    sys_dir = Path("/sys/bcgd-readonly-test")
    try:
        sys_dir.mkdir()
    except OSError:
        return sys_dir
    sys_dir.rmdir()
    pytest.skip("no read-only folder on this machine (root, and /sys is writable)")
