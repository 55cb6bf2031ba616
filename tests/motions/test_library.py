"""The clip library without the dataset: built-in fallback, import of a user folder, task resolution."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from bcg_deploy.cli import main
from bcg_deploy.errors import BcgdError
from bcg_deploy.motions import import_lafan1_dir, library_dir, list_motions, load_task_motion, resolve_task
from bcg_deploy.motions.library import task_source_text
from tests.synthetic import synthetic_rows, write_csv


def test_library_dir_follows_bcgd_home(bcgd_home, monkeypatch):
    assert library_dir() == bcgd_home
    monkeypatch.delenv("BCGD_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", "/somewhere")
    assert str(library_dir()) == "/somewhere/bcg-deploy"


def test_fresh_machine_every_task_is_builtin(robot, monkeypatch, capsys):
    rows = list_motions()["motions"]
    assert [r["name"] for r in rows] == ["run", "jump", "fight", "dance"]
    assert all(r["source"] == "built-in (synthetic)" and r["duration_s"] == 15.0 for r in rows)
    monkeypatch.setattr(sys, "argv", ["bcgd", "motions", "list"])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr().out
    assert exc.value.code in (0, None) and out.count("built-in (synthetic)") == 4
    with pytest.raises(BcgdError, match="no LAFAN1 file for it in the library"):
        resolve_task("dance", prefer="lafan1")
    with pytest.raises(BcgdError, match="unknown motion 'walk'"):
        load_task_motion("walk")


def test_import_user_folder_then_task_resolves_to_it(tmp_path, robot):
    folder = tmp_path / "my_lafan"
    run_csv = write_csv(folder / "run1_subject2.csv", synthetic_rows(robot, 16.0, seed=1))
    write_csv(folder / "walk1_subject1.csv", synthetic_rows(robot, 3.0, seed=2))
    report = import_lafan1_dir(folder, robot)
    assert {e["name"] for e in report.imported} == {"run1_subject2", "walk1_subject1"}
    assert set(report.tasks) == {"run"}
    start = report.tasks["run"]["start_s"]
    assert 0.0 <= start <= 1.0 + 1e-9 and round(start * 10) == start * 10  # on the 0.1 s grid
    m = load_task_motion("run", robot=robot)
    assert m.source["kind"] == "lafan1" and m.source["start_s"] == start and m.num_frames == 751
    assert load_task_motion("run", prefer="builtin", robot=robot).source["kind"] == "builtin"
    assert resolve_task("jump")["kind"] == "builtin"
    assert task_source_text(resolve_task("run")) == f"LAFAN1 run1_subject2.csv [{start:.1f} s, +15 s]"
    assert task_source_text(resolve_task("jump")) == "built-in (synthetic)"
    index = json.loads((library_dir() / "library.json").read_text())
    assert index["files"]["run1_subject2"]["path"] == str(run_csv.resolve())
    # The library points at the user's file; a changed file is refused until re-imported.
    rows = synthetic_rows(robot, 16.0, seed=3)
    write_csv(run_csv, rows)
    with pytest.raises(BcgdError, match="run1_subject2.csv changed since it was imported"):
        load_task_motion("run", robot=robot)
    import_lafan1_dir(folder, robot)
    assert load_task_motion("run", robot=robot).source["sha256"] != m.source["sha256"]
    # A registered file that disappeared is reported, not silently replaced by a built-in clip.
    run_csv.unlink()
    with pytest.raises(BcgdError, match="is missing"):
        load_task_motion("run", robot=robot)


def test_import_skip_bad_and_short_task_file(tmp_path, robot):
    folder = tmp_path / "mixed"
    write_csv(folder / "dance1_subject1.csv", synthetic_rows(robot, 5.0))  # too short for a 15 s window
    rows = synthetic_rows(robot, 2.0)
    rows[3, 3:7] = 0.0
    write_csv(folder / "broken.csv", rows)
    with pytest.raises(BcgdError, match="broken.csv row 4: root quaternion norm 0"):
        import_lafan1_dir(folder, robot)
    report = import_lafan1_dir(folder, robot, skip_bad=True)
    assert [e["name"] for e in report.imported] == ["dance1_subject1"]
    assert any("broken.csv row 4" in s for s in report.skipped)
    assert any("shorter than the 15 s task window" in s for s in report.skipped)
    assert resolve_task("dance")["kind"] == "builtin"
    with pytest.raises(BcgdError, match="shorter than the 15 s task window"):
        resolve_task("dance", prefer="lafan1")


def test_corrupt_library_index_is_a_clear_error(bcgd_home):
    (bcgd_home / "library.json").write_text("{not json")
    with pytest.raises(BcgdError, match="unreadable library index"):
        list_motions()
    (bcgd_home / "library.json").unlink()
    assert np.all([r["kind"] == "builtin" for r in list_motions()["motions"]])


def test_library_clips_by_name_list_remove_and_a_moved_folder(tmp_path, robot, bcgd_home):
    """A clip imported with `motions import` is listed with its state, usable by name (train's config,
    sim2sim's replay), removable; a moved folder is reported as missing with commands that exist."""
    from bcg_deploy.motions.library import registered_file, remove_motions
    from bcg_deploy.sim2sim import Sim2SimConfig, run_sim2sim
    from bcg_deploy.training.run import plan_run
    from tests.cli.util import bcgd

    folder = tmp_path / "lafan"
    walk = write_csv(folder / "walk1_subject1.csv", synthetic_rows(robot, 3.0, seed=2))
    write_csv(folder / "run1_subject2.csv", synthetic_rows(robot, 16.0, seed=1))
    import_lafan1_dir(folder, robot)
    files = {f["name"]: f for f in list_motions()["files"]}
    assert set(files) == {"run1_subject2", "walk1_subject1"} and files["run1_subject2"]["tasks"] == ["run"]
    assert {f["status"] for f in files.values()} == {"ok"}
    env = {"BCGD_HOME": str(bcgd_home)}
    out = bcgd("motions", "list", env=env)
    assert out.returncode == 0 and "walk1_subject1" in out.stdout and "registered LAFAN1 files (2)" in out.stdout

    cfg = plan_run("walk1_subject1", None, 0.5, 2.0, None, None, None, None, None, None, tmp_path / "r", None,
                       [], None)  # fmt: skip
    assert cfg.motion.csv == str(walk.resolve()) and (cfg.motion.start_s, cfg.motion.duration_s) == (0.5, 2.0)
    run_csv = str((folder / "run1_subject2.csv").resolve())
    cfg = plan_run("run", None, 0.5, 2.0, None, None, None, None, None, None, tmp_path / "r", None, [], None)
    assert (cfg.motion.task, cfg.motion.csv, cfg.motion.start_s, cfg.motion.duration_s) == ("run", run_csv, 0.5, 2.0)
    cfg = plan_run("run", None, None, 4.0, None, None, None, None, None, None, tmp_path / "r", None, [], None)
    assert (cfg.motion.csv, cfg.motion.start_s) == (run_csv, resolve_task("run")["start_s"])
    with pytest.raises(BcgdError, match="task 'jump' uses the built-in synthetic clip here"):
        plan_run("jump", None, 3.0, None, None, None, None, None, None, None, tmp_path / "r", None, [], None)
    rep = run_sim2sim(None, Sim2SimConfig(runs=1, replay=True, motion="walk1_subject1", motion_duration_s=1.0))
    assert rep.settings["reference"]["source"] == "motion walk1_subject1" and rep.runs[0].steps == 50

    walk.rename(tmp_path / "moved.csv")
    assert {f["name"]: f["status"] for f in list_motions()["files"]}["walk1_subject1"] == "missing"
    with pytest.raises(BcgdError, match="is missing .*bcgd motions remove walk1_subject1") as exc:
        registered_file("walk1_subject1")
    assert "--builtin" not in str(exc.value)
    out = bcgd("motions", "list", env=env)
    assert out.returncode == 0 and "missing:" in out.stdout
    assert remove_motions(["walk1_subject1"]) == ["walk1_subject1"]
    assert [f["name"] for f in list_motions()["files"]] == ["run1_subject2"]
    gone = bcgd("motions", "remove", "walk1_subject1", env=env)
    assert gone.returncode == 2 and "unknown motion 'walk1_subject1'" in gone.stderr and "Traceback" not in gone.stderr
    (folder / "run1_subject2.csv").rename(tmp_path / "run_moved.csv")
    with pytest.raises(BcgdError, match="is missing") as exc:
        load_task_motion("run", robot=robot)
    assert "--builtin" not in str(exc.value)
