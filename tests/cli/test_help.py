"""Output that reads well: flags as flags in --help, defaults shown, --version, the speed line's precision,
bare --noise."""

from __future__ import annotations

import pytest

import bcg_deploy
from bcg_deploy.cli import fill_bare_values
from bcg_deploy.sim2sim.report import speed
from tests.cli.util import bcgd


@pytest.mark.parametrize("command", ["sim2sim", "train", "export"])
def test_help_shows_flags_as_flags_and_defaults(command):
    out = bcgd(command, "--help", env={"COLUMNS": "120"})
    assert out.returncode == 0, out.stderr
    assert "<bool>" not in out.stdout
    assert "[default:" in out.stdout
    if command == "sim2sim":
        line = next(ln for ln in out.stdout.splitlines() if "--randomize" in ln)
        assert "<" not in line  # a flag takes no value
        assert "--no-init-noise" in out.stdout and "--jobs" in out.stdout and "--width" in out.stdout
    if command == "train":
        assert "--lr-schedule" in out.stdout and "continue" in out.stdout and "stretch" in out.stdout


def test_version():
    out = bcgd("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"bcgd {bcg_deploy.__version__}"


def test_real_time_factor_precision():
    assert speed(1.0, 5.0) == "0.2x"  # not "0x real time"
    assert speed(3.0, 7.0) == "0.43x"
    assert speed(34.0, 10.0) == "3.4x"
    assert speed(270.0, 10.0) == "27x"
    assert speed(1500.0, 10.0) == "150x"


def test_bare_noise_means_scale_one():
    assert fill_bare_values(["sim2sim", "p.onnx", "--noise"]) == ["sim2sim", "p.onnx", "--noise", "1"]
    assert fill_bare_values(["sim2sim", "--noise", "p.onnx"]) == ["sim2sim", "--noise", "1", "p.onnx"]
    assert fill_bare_values(["sim2sim", "--noise", "--runs", "2"])[:3] == ["sim2sim", "--noise", "1"]
    assert fill_bare_values(["sim2sim", "--noise", "0.5"]) == ["sim2sim", "--noise", "0.5"]
    assert fill_bare_values(["train", "--noise"]) == ["train", "--noise"]  # only sim2sim has it
