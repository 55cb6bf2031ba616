"""``bcgd train`` argument handling that needs no simulator: bad --resume files, bad options."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from bcg_deploy.cli import _register, app

_register()
runner = CliRunner()


def _bcgd(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from bcg_deploy.cli import main; sys.argv = ['bcgd', *sys.argv[1:]]; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("ckpt")
    foreign = d / "foreign.pt"
    torch.save({"model": torch.zeros(3), "epoch": 3}, foreign)
    truncated = d / "truncated.pt"
    big = d / "big.pt"
    torch.save({"format": "bcg-deploy/run", "w": torch.randn(20000)}, big)
    truncated.write_bytes(big.read_bytes()[: big.stat().st_size // 2])
    text = d / "notes.pt"
    text.write_text("hello\n")
    return {"foreign": foreign, "truncated": truncated, "text": text, "missing": d / "nope.pt"}


@pytest.mark.parametrize("kind", ["foreign", "truncated", "text", "missing"])
def test_resume_from_bad_checkpoint_is_one_line_error(bad_files, kind):
    r = _bcgd("train", "--resume", str(bad_files[kind]))
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "args,needle",
    [
        (["train", "walk"], "unknown task"),
        (["train", "--set", "shac.bogus=1"], "unknown config key"),
        (["train", "--envs", "0"], "num_envs"),
        (["train", "dance", "--motion", "x.csv"], "either TASK or --motion"),
    ],
)
def test_bad_options(args, needle):
    r = runner.invoke(app, args)
    assert r.exit_code != 0
    assert needle in str(r.exception) or needle in r.output
