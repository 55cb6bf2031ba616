"""Shared test helpers: where ../shared is, a skip when it is absent, loading a script of the repo, a child process
whose writes fail for real, and our deploy exports of untrained policies (for sim2sim's contract and the stacks'
runtimes)."""

from __future__ import annotations

import importlib.util
import os
import resource
import signal
import subprocess
import sys
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


def child_env() -> dict[str, str]:
    """This process's environment for a child running this checkout's code outside any torch.distributed launch."""
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "BCGD_RUN_DIR_HELD")}
    env["PYTHONPATH"] = str(REPO)
    return env


def run_under_size_limit(args: list[str], limit: int, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python ARGS`` (this checkout's code, outside any torch.distributed launch) in a child whose files may not
    grow past ``limit`` bytes (RLIMIT_FSIZE, SIGXFSZ ignored): the kernel fails the write with EFBIG, as it fails
    one with ENOSPC on a full disk, so the write errors the tests see are real ones."""

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing the child
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=child_env(), preexec_fn=limited,
                          timeout=timeout)  # fmt: skip


DEPLOY_PROFILES = ("beyondmimic", "beyondmimic_wose", "unitree")


def export_deploy(folder: Path, trained: str, profile: str) -> Path:
    """``folder/PROFILE/exported/policy.onnx``: the export for ``profile`` of an untrained actor that reads the
    ``trained`` profile, on the short synthetic clip (its checkpoint ``folder/run_TRAINED.pt`` made once)."""
    from bcg_deploy.export import ExportConfig, export_policy
    from bcg_deploy.robots import load_robot
    from bcg_deploy.training.checkpoint import save_checkpoint
    from tests.export.conftest import make_profile_payload
    from tests.synthetic import synthetic_motion

    robot = load_robot()
    ck = folder / f"run_{trained}.pt"
    if not ck.exists():
        save_checkpoint(ck, make_profile_payload(robot, synthetic_motion(robot, seconds=1.5), trained))
    out = folder / profile / "exported" / "policy.onnx"
    out.parent.mkdir(parents=True)
    export_policy(ExportConfig(checkpoint=ck, output=out, profile=profile, parity_samples=64))
    return out


@pytest.fixture(scope="session")
def deploy_exports(tmp_path_factory) -> dict[str, Path]:
    """{profile: ONNX} of ``DEPLOY_PROFILES`` (``unitree`` from a beyondmimic_wose actor: the same terms), made
    on one torch thread. Read only: copy one before changing it."""
    import torch

    d, n = tmp_path_factory.mktemp("deploy_exports"), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {p: export_deploy(d, "beyondmimic_wose" if p == "unitree" else p, p) for p in DEPLOY_PROFILES}
    finally:
        torch.set_num_threads(n)
