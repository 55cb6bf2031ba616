"""Issue 16's bad inputs: each is one ``error:`` line naming the thing and what was expected, exit code 2,
no traceback, and nothing is simulated or trained before it is refused."""

from __future__ import annotations

import pytest

from tests.cli.util import assert_one_line_error, bcgd
from tests.synthetic import synthetic_rows, write_csv


@pytest.fixture(scope="module")
def files(tmp_path_factory, policy_onnx):
    import torch

    from bcg_deploy.robots import load_robot

    d = tmp_path_factory.mktemp("bad")
    (d / "notes.pt").write_text("these are my notes, not a checkpoint\n")
    torch.save({"format": "bcg-deploy/run", "w": torch.randn(20000)}, d / "big.pt")
    data = (d / "big.pt").read_bytes()
    (d / "truncated.pt").write_bytes(data[: len(data) // 2])
    write_csv(d / "clip.csv", synthetic_rows(load_robot(), 3.0))
    return {"dir": d, "onnx": policy_onnx}


def _cases(f, ro):
    d, onnx = f["dir"], f["onnx"]
    return {
        "export a text file": (["export", d / "notes.pt", "-o", d / "p.onnx"], "is not a checkpoint (not a torch file"),
        "export a truncated file": (["export", d / "truncated.pt", "-o", d / "p.onnx"], "is truncated or damaged"),
        "inspect --checkpoint text": (["inspect", onnx, "--checkpoint", d / "notes.pt"], "is not a checkpoint"),
        "sim2sim --obs-latency 1e9": (["sim2sim", onnx, "--obs-latency", "1e9"], "expected 0 <= LO <= HI <= 1000 ms"),
        "sim2sim --latency 1e9": (["sim2sim", onnx, "--latency", "1e9"], "--latency 1e+09:1e+09: expected 0 <= LO"),
        "sim2sim --robot h1": (["sim2sim", onnx, "--robot", "h1"], "--robot h1: unknown robot, expected one of g1"),
        "sim2sim --noise nan": (["sim2sim", onnx, "--noise", "nan"], "--noise nan: expected a finite scale >= 0"),
        "sim2sim --max-seconds -1": (["sim2sim", onnx, "--max-seconds", "-1"], "--max-seconds -1.0: expected seconds"),
        "sim2sim window past the end": (
            ["sim2sim", "--replay", "--motion", d / "clip.csv", "--start", "100"],
            "clip.csv: window start 100 s is past the end of the clip (3.00 s)",
        ),
        "train --out read-only": (["train", "--out", ro / "run", "--iterations", "1"], "cannot write the run folder"),
        "train --keep-every -5": (["train", "--keep-every", "-5", "--out", d / "k"], "--keep-every -5: expected"),
        "sim2sim --video read-only": (["sim2sim", onnx, "--video", ro / "r.mp4"], "cannot write --video"),
        "sim2sim --json read-only": (["sim2sim", onnx, "--json", ro / "r.json"], "cannot write --json"),
        "sim2sim --plot read-only": (["sim2sim", onnx, "--plot", ro / "e.png"], "cannot write --plot"),
        "sim2sim --video .avi": (["sim2sim", onnx, "--video", d / "r.avi"], "expected a file name ending in .mp4 or"),
    }


CASE_NAMES = [
    "export a text file",
    "export a truncated file",
    "inspect --checkpoint text",
    "sim2sim --obs-latency 1e9",
    "sim2sim --latency 1e9",
    "sim2sim --robot h1",
    "sim2sim --noise nan",
    "sim2sim --max-seconds -1",
    "sim2sim window past the end",
    "train --out read-only",
    "train --keep-every -5",
    "sim2sim --video read-only",
    "sim2sim --json read-only",
    "sim2sim --plot read-only",
    "sim2sim --video .avi",
]


@pytest.mark.parametrize("case", CASE_NAMES)
def test_bad_input_is_one_line_exit_2(case, files, readonly_dir):
    args, needle = _cases(files, readonly_dir)[case]
    proc = bcgd(*args)
    line = assert_one_line_error(proc, needle)
    assert "sim2sim" not in proc.stdout and "MuJoCo" not in proc.stdout, proc.stdout  # refused before any run
    if case.startswith("export") or case.startswith("inspect"):
        assert "miniz" not in line and "pickled objects" not in line and "KeyError" not in line


def test_glfw_without_display_is_one_line(files, tmp_path):
    """MUJOCO_GL=glfw and no display: one line before any run (or the video dependency message when
    imageio is not installed, also one line)."""
    proc = bcgd("sim2sim", files["onnx"], "--video", tmp_path / "v.mp4", env={"MUJOCO_GL": "glfw", "DISPLAY": ""})
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
    assert "MUJOCO_GL=glfw needs a display" in lines[0] or "needs imageio" in lines[0], lines[0]
    assert not (tmp_path / "v.mp4").exists()
