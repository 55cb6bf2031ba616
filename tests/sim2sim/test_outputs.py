"""Report outputs: JSON (atomic, NaN-free, deterministic), PNG plot, MP4 video (skips without GL)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bcg_deploy.errors import BcgdError
from bcg_deploy.robots import load_robot
from bcg_deploy.sim2sim.reference import reference_from_states
from bcg_deploy.sim2sim.report import Report
from bcg_deploy.sim2sim.runner import simulate_run
from bcg_deploy.sim2sim.setup import Sim2SimConfig, setup_from_reference


@pytest.fixture(scope="module")
def report():
    m = load_robot().load_model()
    q = np.tile(m.key_qpos[0], (16, 1))
    q[:, 2] = 2.0  # in the air: no contact, so penetration is NaN -> null in JSON
    ref = reference_from_states(m, q, np.zeros((16, m.nv)), 50.0)
    cfg = Sim2SimConfig(runs=2, replay=True)
    setup = setup_from_reference(ref, cfg)
    return Report.build(setup.settings, [simulate_run(setup, cfg, r) for r in range(2)]), setup


def test_json_schema_and_null_for_nan(report, tmp_path):
    rep, _ = report
    path = rep.write_json(tmp_path / "sub" / "r.json")
    d = json.loads(path.read_text())
    assert set(d) == {"report_version", "settings", "aggregate", "runs"}
    s = d["settings"]
    for key in ("physics_dt", "control_dt", "latency_ms", "noise_scale", "randomize", "seed", "mujoco"):
        assert key in s
    assert s["mujoco"]["integrator"] == "mjINT_EULER" and s["mujoco"]["timestep"] == 0.002
    assert d["aggregate"]["falls"] == 0  # 0.3 s of free fall from 2 m stays above 0.3 m
    assert d["runs"][0]["foot_penetration_mm"] is None  # never touched the floor: NaN -> null
    assert d["aggregate"]["foot_penetration_mm"] == {"mean": None, "std": None}
    assert d["aggregate"]["e_track_cm"]["std"] == 0.0  # nothing random: identical runs
    assert not list(path.parent.glob(".*"))  # no temporary left behind


def test_plot_png(report, tmp_path):
    rep, _ = report
    path = rep.plot(tmp_path / "err.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _record(setup, path, **kw):
    """Render one replay run to ``path``; skip (with the one-line reason) when imageio or GL is missing."""
    from bcg_deploy.sim2sim.video import VideoRecorder

    cfg = Sim2SimConfig(runs=1, replay=True)
    try:
        rec = VideoRecorder(path, fps=50.0, ghost=setup.reference, **kw)
        simulate_run(setup, cfg, 0, on_control_step=lambda k, m, d: rec(0, k, m, d))
    except BcgdError as exc:
        msg = str(exc)
        assert "\n" not in msg
        assert "OpenGL" in msg or 'pip install "bcg-deploy[video]"' in msg, msg
        pytest.skip(f"no video here: {msg}")
    return rec, rec.close()


def test_video_mp4_or_clear_dependency_error(report, tmp_path):
    _, setup = report
    rec, path = _record(setup, tmp_path / "v.mp4", width=160, height=120)
    assert path is not None and path.stat().st_size > 1000
    assert rec.frames > 1
    import imageio.v2 as imageio

    frames = imageio.mimread(path)
    assert len(frames) == rec.frames and frames[0].shape[:2] == (120, 160)
    assert np.asarray(frames[0]).std() > 1.0  # not a blank image
    other = tmp_path / "other.json"
    rep, _ = report
    rep.write_json(other)
    assert (path.stat().st_mode & 0o777) == (other.stat().st_mode & 0o777)  # the permissions of any output
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left behind


def test_video_gif_is_a_gif(report, tmp_path):
    _, setup = report
    rec, path = _record(setup, tmp_path / "v.GIF", width=96, height=64)
    assert path.read_bytes()[:6] in (b"GIF89a", b"GIF87a")
    assert rec.frames == 8  # every 2nd of the 15 control steps


def test_video_shows_body_and_ghost(report, tmp_path):
    """The robot is drawn with its body-sized shapes (torso dark, limbs light) and the reference as a green
    ghost: both colours cover a real part of a frame."""
    _, setup = report
    rec, path = _record(setup, tmp_path / "v.mp4", width=160, height=120)
    import imageio.v2 as imageio

    f = np.asarray(imageio.mimread(path)[3]).astype(int)
    r, g, b = f[..., 0], f[..., 1], f[..., 2]
    dark = (r < 90) & (g < 90) & (b < 110) & (abs(r - g) < 25)
    greenish = (g > r + 25) & (g > b + 10)
    assert dark.mean() > 0.004 and greenish.mean() > 0.004, (dark.mean(), greenish.mean())


def test_video_path_checks(tmp_path):
    from bcg_deploy.sim2sim.video import check_video_path

    assert check_video_path(tmp_path / "a.mp4")[1] == "FFMPEG"
    with pytest.raises(BcgdError, match="ending in .mp4 or .gif"):
        check_video_path(tmp_path / "a.avi")


def test_viewer_without_display_is_a_one_line_error(monkeypatch):
    from bcg_deploy.sim2sim.video import ViewerHook

    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    with pytest.raises(BcgdError, match="needs a display") as exc:
        ViewerHook(0.02)
    assert "\n" not in str(exc.value)


def test_fall_starts_names_how_the_falling_runs_started():
    from bcg_deploy.sim2sim.setup import RunResult

    def run(i, fell, rpy):
        start = {"root_offset_m": [0.0] * 3, "root_roll_pitch_yaw_rad": rpy, "joint_offset_max_abs_rad": 0.1}
        return RunResult(i, [0, i], fell, 1.2 if fell else None, 60, 1.2, 20.0, 0.3, 15.0, 1.6, 0.0,
                         initial_perturbation=start if rpy else None)  # fmt: skip

    rep = Report.build({}, [run(0, False, [0.01, 0.0, 0.0]), run(1, True, [0.061, -0.047, 0.188])])
    assert rep.fall_starts() == "the runs that fell started rolled, pitched, yawed (rad): 1 (+0.06, -0.05, +0.19)"
    assert Report.build({}, [run(0, False, [0.01, 0.0, 0.0])]).fall_starts() is None
    assert Report.build({}, [run(0, True, None), run(1, False, None)]).fall_starts() is None  # --no-init-noise
    assert Report.build({}, [run(0, True, [0.01, 0.0, 0.0]), run(1, True, [0.0, 0.02, 0.0])]).fall_starts() is None


def test_a_step_hook_sees_run_0_and_every_run_is_simulated_without_workers():
    """``--video`` / ``--viewer`` with several runs on one core: the hook watches run 0 and the others still run."""
    from bcg_deploy.sim2sim.parallel import run_all

    m = load_robot().load_model()
    q = np.tile(m.key_qpos[0], (6, 1))
    ref = reference_from_states(m, q, np.zeros((6, m.nv)), 50.0)
    cfg = Sim2SimConfig(runs=3, replay=True, jobs=1)
    seen: set[int] = set()
    results = run_all(setup_from_reference(ref, cfg), None, cfg, local_hook=lambda run, k, m, d: seen.add(run))
    assert seen == {0}
    assert len(results) == 3 and all(r is not None for r in results)
