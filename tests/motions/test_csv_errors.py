"""Malformed CSVs: one-line BcgdError naming file and row; the CLI exits 2 without a traceback."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from bcg_deploy.cli import main
from bcg_deploy.errors import BcgdError
from bcg_deploy.motions import load_lafan1_csv
from bcg_deploy.motions.csv_io import read_lafan1_csv
from tests.synthetic import synthetic_rows, write_csv

ROW = 17  # 1-based row that is broken in each case


def _lines(rows: np.ndarray) -> list[str]:
    return [",".join(f"{v:.6f}" for v in r) for r in rows]


def _case(name: str, robot) -> tuple[list[str], str]:
    """File lines with row ROW broken as ``name`` and the expected message fragment."""
    rows = synthetic_rows(robot, 2.0)
    lines = _lines(rows)
    r = ROW - 1
    if name == "columns":
        lines[r] = ",".join(lines[r].split(",")[:35])
        return lines, f"row {ROW}: expected 36 columns, got 35"
    if name == "not_a_number":
        cells = lines[r].split(",")
        cells[9] = "abc"
        lines[r] = ",".join(cells)
        return lines, f"row {ROW}: column 10: 'abc' is not a number"
    if name == "nan":
        rows[r, 20] = np.nan
        return _lines(rows), f"row {ROW}: column 21: non-finite value nan"
    if name == "inf":
        rows[r, 1] = np.inf
        return _lines(rows), f"row {ROW}: column 2: non-finite value inf"
    if name == "quat_norm":
        rows[r, 3:7] *= 0.5
        return _lines(rows), f"row {ROW}: root quaternion norm 0.5"
    if name == "joint_limit":
        knee = robot.joint_names.index("left_knee_joint")
        rows[r, 7 + knee] = robot.joint_range[knee, 1] + 0.3
        return _lines(rows), f"row {ROW}: left_knee_joint = "
    raise AssertionError(name)


CASES = ("columns", "not_a_number", "nan", "inf", "quat_norm", "joint_limit")


@pytest.mark.parametrize("case", CASES)
def test_bad_row_is_named(tmp_path, robot, case):
    lines, expected = _case(case, robot)
    path = tmp_path / "run.csv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(BcgdError) as exc:
        read_lafan1_csv(path, robot)
    msg = str(exc.value)
    assert msg.startswith("run.csv row 17"), msg
    assert expected in msg, msg
    assert "\n" not in msg


def test_joint_within_tolerance_is_clamped_not_rejected(tmp_path, robot):
    rows = synthetic_rows(robot, 1.0)
    knee = robot.joint_names.index("left_knee_joint")
    rows[5, 7 + knee] = robot.joint_range[knee, 1] + 0.02
    clip = read_lafan1_csv(write_csv(tmp_path / "ok.csv", rows), robot)
    assert clip.clamped == 1 and clip.joint_pos[5, knee] == robot.joint_range[knee, 1]


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("empty", "empty.csv: empty file"),
        ("one_row", "one_row.csv: 1 rows, expected at least 2"),
        ("missing", "missing.csv: no such file"),
        ("window", "window.csv: window 1.5 s + 1 s runs past the end of the clip (2.00 s)"),
        ("negative", "negative.csv: window start -1.0 s, expected >= 0"),
    ],
)
def test_file_and_window_errors(tmp_path, robot, setup, expected):
    path = tmp_path / f"{setup}.csv"
    rows = synthetic_rows(robot, 2.0)
    start, dur = 0.0, None
    if setup == "empty":
        path.write_text("\n\n")
    elif setup == "one_row":
        write_csv(path, rows[:1])
    elif setup == "window":
        write_csv(path, rows)
        start, dur = 1.5, 1.0
    elif setup == "negative":
        write_csv(path, rows)
        start = -1.0
    with pytest.raises(BcgdError) as exc:
        load_lafan1_csv(path, start, dur, robot)
    assert expected in str(exc.value)
    assert "\n" not in str(exc.value)


def _run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["bcgd", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


@pytest.mark.parametrize("case", CASES)
def test_cli_show_csv_bad_file_exits_2_with_one_line(tmp_path, robot, monkeypatch, capsys, case):
    lines, expected = _case(case, robot)
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(lines) + "\n")
    code, out, err = _run_cli(monkeypatch, capsys, "motions", "show", "--csv", str(path))
    assert code == 2
    assert err.strip().count("\n") == 0, err
    assert err.startswith("error: bad.csv row 17") and expected in err
    assert "Traceback" not in err + out


def test_cli_import_folder_with_bad_file(tmp_path, robot, monkeypatch, capsys, bcgd_home):
    folder = tmp_path / "lafan"
    write_csv(folder / "walk1_subject1.csv", synthetic_rows(robot, 2.0))
    lines, _ = _case("columns", robot)
    (folder / "zbad.csv").write_text("\n".join(lines) + "\n")
    code, out, err = _run_cli(monkeypatch, capsys, "motions", "import", str(folder))
    assert code == 2
    assert err.startswith("error: zbad.csv row 17: expected 36 columns, got 35 (nothing imported")
    assert err.strip().count("\n") == 0 and "Traceback" not in err + out
    assert not (bcgd_home / "library.json").exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("motions", "show", "walk"), "error: unknown motion 'walk': expected one of run, jump, fight, dance"),
        (("motions", "show"), "error: give a motion NAME or --csv FILE (exactly one)"),
        (("motions", "import", "/nonexistent/lafan"), "error: /nonexistent/lafan: no such directory"),
    ],
)
def test_cli_bad_arguments(monkeypatch, capsys, args, expected):
    code, out, err = _run_cli(monkeypatch, capsys, *args)
    assert code == 2 and err.startswith(expected), err
    assert "Traceback" not in err + out


def test_real_process_prints_one_line_and_exits_2(tmp_path, robot):
    """End to end through the installed ``bcgd`` entry point (a real process, its real stderr)."""
    lines, _ = _case("quat_norm", robot)
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(lines) + "\n")
    proc = subprocess.run(
        [sys.executable, "-c", "from bcg_deploy.cli import main; main()", "motions", "show", "--csv", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: bad.csv row 17: root quaternion norm 0.5, expected 1 +/- 0.01"
    assert "Traceback" not in proc.stdout
