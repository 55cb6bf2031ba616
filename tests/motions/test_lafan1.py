"""The four shared LAFAN1 G1 clips: import, task windows, loading (skipped where ../shared is absent)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from bcg_deploy.cli import main
from bcg_deploy.motions import cache, import_lafan1_dir, list_motions, load_lafan1_csv, load_task_motion
from bcg_deploy.motions.build import LoadCfg, filtered_source_track
from bcg_deploy.motions.csv_io import read_lafan1_csv
from bcg_deploy.motions.filters import SpikeFilterCfg, _spikes
from bcg_deploy.motions.motion import ARRAY_FIELDS
from bcg_deploy.motions.windows import WindowCriterion, choose_window
from tests.motions.conftest import LAFAN1_FILES, lafan1_dir

TASK_FILES = dict(zip(("run", "jump", "fight", "dance"), LAFAN1_FILES, strict=True))


@pytest.fixture(scope="module")
def imported(robot):
    report = import_lafan1_dir(lafan1_dir(), robot)
    return report, {task: load_task_motion(task, robot=robot) for task in TASK_FILES}


def test_import_registers_all_four_and_picks_windows(imported):
    report, _ = imported
    assert sorted(e["name"] for e in report.imported) == sorted(LAFAN1_FILES) and not report.skipped
    for task, stem in TASK_FILES.items():
        w = report.tasks[task]
        print(
            f"{task}: {stem} start {w['start_s']:.1f} s, mean joint speed {w['score']:.3f} rad/s, "
            f"pelvis >= {w['root_height_min']:.3f} m, lowest foot {1000 * w['min_foot_height']:+.1f} mm"
        )
        assert w["file"] == stem and w["sane_candidates"] > 0
    rows = {r["name"]: r for r in list_motions()["motions"]}
    assert all(r["kind"] == "lafan1" and r["source"].startswith("LAFAN1 ") for r in rows.values())


@pytest.mark.parametrize("task", list(TASK_FILES))
def test_task_motion_loads(imported, robot, task):
    _, motions = imported
    m = motions[task]
    assert m.name == task and m.fps == 50.0 and m.num_frames == 751 and m.duration == pytest.approx(15.0)
    assert m.source["kind"] == "lafan1" and m.source["file"] == f"{TASK_FILES[task]}.csv"
    for field in ARRAY_FIELDS:
        arr = getattr(m, field)
        assert arr.shape[0] == 751 and np.isfinite(arr).all(), field
    assert m.body_pos_w.shape == (751, 30, 3) and m.body_quat_w.shape == (751, 30, 4)
    np.testing.assert_allclose(np.linalg.norm(m.root_quat, axis=1), 1.0, atol=1e-9)
    lo, hi = robot.joint_range[:, 0], robot.joint_range[:, 1]
    assert ((m.joint_pos >= lo) & (m.joint_pos <= hi)).all()
    assert m.root_pos[:, 2].min() >= 0.45
    np.testing.assert_allclose(m.body_pos_w[:, 0], m.root_pos, atol=1e-12)


@pytest.mark.parametrize("task", list(TASK_FILES))
def test_window_is_the_argmax_of_the_stated_criterion(imported, robot, task):
    """Recompute the criterion by brute force on a coarse grid: no sane window scores higher."""
    _, motions = imported
    clip = read_lafan1_csv(lafan1_dir() / f"{TASK_FILES[task]}.csv", robot)
    track, _ = filtered_source_track(clip, robot, SpikeFilterCfg())
    speed = np.abs(track.joint_vel).mean(axis=1)
    start = motions[task].source["start_s"]
    i0 = int(round(start * 30))
    best = speed[i0 : i0 + 451].mean()
    choice = choose_window(track, robot, WindowCriterion())
    assert choice.start_s == pytest.approx(start) and choice.score == pytest.approx(best)
    from bcg_deploy.motions.windows import frame_sanity

    ok, _ = frame_sanity(track, robot, WindowCriterion())
    for j in range(0, len(speed) - 451, 30):  # every whole second
        if ok[j : j + 451].all():
            assert speed[j : j + 451].mean() <= best + 1e-12


def test_spike_filter_leaves_no_spike(robot):
    cfg = SpikeFilterCfg()
    for stem in LAFAN1_FILES:
        clip = read_lafan1_csv(lafan1_dir() / f"{stem}.csv", robot)
        raw_steps = np.abs(np.diff(clip.joint_pos, axis=0)).max()
        track, found = filtered_source_track(clip, robot, cfg)
        left = sum(len(_spikes(track.joint_pos[:, j], cfg)) for j in range(robot.num_joints))
        steps = np.abs(np.diff(track.joint_pos, axis=0)).max()
        print(f"{stem}: {found} spikes, largest step {raw_steps:.2f} -> {steps:.2f} rad/frame")
        assert found > 0 and left == 0 and steps <= cfg.max_step + 0.02


def test_explicit_window_and_cache(robot, bcgd_home):
    path = lafan1_dir() / "run1_subject2.csv"
    m1 = load_lafan1_csv(path, 10.0, 2.0, robot)
    n_cached = len(list((bcgd_home / "cache").glob("*.npz")))
    m2 = load_lafan1_csv(path, 10.0, 2.0, robot)
    assert len(list((bcgd_home / "cache").glob("*.npz"))) == n_cached
    fresh = load_lafan1_csv(path, 10.0, 2.0, robot, LoadCfg(use_cache=False))
    assert m1.num_frames == 101 and m1.source["start_s"] == 10.0
    for field in ("root_pos", "joint_vel", "body_pos_w", "body_ang_vel_w"):
        np.testing.assert_array_equal(getattr(m2, field), getattr(fresh, field))
    # A corrupt cache entry is ignored and rewritten.
    for p in (bcgd_home / "cache").glob("*.npz"):
        p.write_bytes(b"garbage")
    m3 = load_lafan1_csv(path, 10.0, 2.0, robot)
    np.testing.assert_array_equal(m3.joint_pos, fresh.joint_pos)
    assert cache.code_version()


def test_cli_import_list_show(monkeypatch, capsys, imported):
    monkeypatch.setattr(sys, "argv", ["bcgd", "motions", "import", str(lafan1_dir())])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code in (0, None)
    out = capsys.readouterr().out
    assert "registered 4 file(s)" in out and "run1_subject2.csv" in out
    monkeypatch.setattr(sys, "argv", ["bcgd", "motions", "show", "jump"])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr().out
    assert exc.value.code in (0, None) and "jumps1_subject1.csv" in out and "max joint velocity" in out
