"""`bcgd robot` commands, end to end through the console script."""

from __future__ import annotations

import json

import mujoco

from tests.cli.util import bcgd as _bcgd


def test_robot_info_json():
    out = _bcgd("robot", "info", "--json", "-")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert (info["nq"], info["nv"], info["nu"], info["nbody"]) == (36, 35, 29, 30)
    assert len(info["joints"]) == 29 and info["joints"][0]["name"] == "left_hip_pitch_joint"


def test_export_mjcf_loads(tmp_path):
    out = _bcgd("robot", "export-mjcf", str(tmp_path / "g1"))
    assert out.returncode == 0, out.stderr
    m = mujoco.MjModel.from_xml_path(str(tmp_path / "g1" / "scene.xml"))
    assert m.nu == 29


def test_unknown_robot_is_one_line_error():
    out = _bcgd("robot", "info", "--robot", "h1")
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "unknown robot" in out.stderr
    assert "Traceback" not in out.stderr


def test_robot_info_fits_80_columns():
    out = _bcgd("robot", "info", env={"COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= 80 and "\u2026" not in out.stdout  # nothing cut off with an ellipsis
    assert any(ln.startswith("left_shoulder_pitch ") for ln in lines) and any("right_wrist_yaw" in ln for ln in lines)
