"""From positions to a :class:`Motion`: LAFAN1 CSV pipeline and forward kinematics.

LAFAN1 pipeline (:func:`load_lafan1_csv`): read + validate the CSV (``csv_io``), quaternions
xyzw -> wxyz, joint-spike filter on the whole file at 30 fps (``filters``), clamp joints to their
ranges, finite-difference velocities at 30 fps, resample the window [start, start + duration] to
the control rate (slerp for the root orientation, linear otherwise; ``resample``), then forward
kinematics on our model for every body's pose and velocity (``kinematics``). The generalized
trajectory is cached (``cache``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from bcg_deploy.errors import BcgdError
from bcg_deploy.fileio import file_sha256
from bcg_deploy.motions import cache
from bcg_deploy.motions.csv_io import CSV_FILE, CsvCheck, CsvClip, read_lafan1_csv
from bcg_deploy.motions.filters import SpikeFilterCfg, despike
from bcg_deploy.motions.kinematics import forward_kinematics, to_qpos, to_qvel
from bcg_deploy.motions.motion import Motion
from bcg_deploy.motions.resample import resample, sample_times, with_velocities
from bcg_deploy.robots import RobotSpec, load_robot

CONTROL_FPS = 50.0


@dataclass(frozen=True)
class LoadCfg:
    """How a CSV becomes a Motion.

    Attributes:
        fps: output rate (Hz), the control rate.
        spike_filter: the joint-spike filter (``filters.SpikeFilterCfg``).
        check: validation tolerances (``csv_io.CsvCheck``).
        use_cache: read/write the npz cache in the per-user data dir.
    """

    fps: float = CONTROL_FPS
    spike_filter: SpikeFilterCfg = field(default_factory=SpikeFilterCfg)
    check: CsvCheck = field(default_factory=CsvCheck)
    use_cache: bool = True


def motion_from_track(track: Motion, robot: RobotSpec, name: str, source: dict, extras: dict | None = None) -> Motion:
    """Complete a generalized trajectory with forward kinematics of every body (poses and velocities)."""
    model = robot.load_model(scene=False)
    qpos = to_qpos(track.root_pos, track.root_quat, track.joint_pos)
    qvel = to_qvel(track.root_quat, track.root_lin_vel, track.root_ang_vel, track.joint_vel)
    fk = forward_kinematics(model, qpos, qvel)
    return Motion(
        name=name,
        source=source,
        fps=track.fps,
        root_pos=track.root_pos,
        root_quat=track.root_quat,
        joint_pos=track.joint_pos,
        joint_vel=track.joint_vel,
        root_lin_vel=track.root_lin_vel,
        root_ang_vel=track.root_ang_vel,
        body_pos_w=fk.pos,
        body_quat_w=fk.quat,
        body_lin_vel_w=fk.lin_vel,
        body_ang_vel_w=fk.ang_vel,
        extras=dict(extras or {}),
    )


def filtered_source_track(clip: CsvClip, robot: RobotSpec, spike_filter: SpikeFilterCfg) -> tuple[Motion, int]:
    """The whole clip at its source rate, spike-filtered, clamped, with velocities; and the spike count."""
    q, spikes = despike(clip.joint_pos, spike_filter)
    q = np.clip(q, robot.joint_range[:, 0], robot.joint_range[:, 1])
    return with_velocities(clip.fps, clip.root_pos, clip.root_quat, q), spikes


def check_window(name: str, clip_duration: float, start_s: float, duration_s: float | None) -> float:
    """Validate a window against a clip; returns the duration (to the end of the clip when None)."""
    if not np.isfinite(start_s) or start_s < 0:
        raise BcgdError(f"{name}: window start {start_s} s, expected >= 0")
    if start_s >= clip_duration:
        raise BcgdError(f"{name}: window start {start_s:g} s is past the end of the clip ({clip_duration:.2f} s)")
    if duration_s is None:
        duration_s = clip_duration - start_s
    if not np.isfinite(duration_s) or duration_s <= 0:
        raise BcgdError(f"{name}: window duration {duration_s:g} s, expected > 0 (clip is {clip_duration:.2f} s)")
    if start_s + duration_s > clip_duration + 1e-6:
        raise BcgdError(
            f"{name}: window {start_s:g} s + {duration_s:g} s runs past the end of the clip ({clip_duration:.2f} s)"
        )
    return float(duration_s)


def load_lafan1_csv(
    path: str | Path,
    start_s: float = 0.0,
    duration_s: float | None = None,
    robot: RobotSpec | None = None,
    cfg: LoadCfg | None = None,
    name: str | None = None,
) -> Motion:
    """Load a window of a LAFAN1 G1 CSV as a :class:`Motion` at ``cfg.fps`` (50 Hz).

    Args:
        path: the CSV (30 fps, 36 columns, xyzw quaternion; see ``csv_io``).
        start_s: window start, s from the first row.
        duration_s: window length in s (None: to the end of the file).
        robot: the robot the clip is retargeted to (default ``load_robot("g1")``).
        cfg: processing options.
        name: Motion name (default: the file stem).

    Raises:
        BcgdError: unreadable or malformed file (one line naming file and row), or a window outside it.
    """
    path = Path(path)
    robot = robot or load_robot("g1")
    cfg = cfg or LoadCfg()
    sha = file_sha256(path, CSV_FILE)
    key_parts = {
        "kind": "lafan1",
        "sha256": sha,
        "start_s": float(start_s),
        "duration_s": None if duration_s is None else float(duration_s),
        "fps": cfg.fps,
        "spike_filter": asdict(cfg.spike_filter),
        "check": asdict(cfg.check),
        "model_hash": robot.model_hash,
    }
    key = cache.cache_key(key_parts)
    hit = cache.load_track(key) if cfg.use_cache else None
    if hit is not None:
        track, info = hit
    else:
        clip = read_lafan1_csv(path, robot, cfg.check)
        dur = check_window(path.name, clip.duration, float(start_s), duration_s)
        src, spikes = filtered_source_track(clip, robot, cfg.spike_filter)
        track = resample(src, sample_times(float(start_s), dur, cfg.fps), cfg.fps)
        info = {
            "kind": "lafan1",
            "file": path.name,
            "sha256": sha,
            "start_s": float(start_s),
            "duration_s": dur,
            "source_fps": clip.fps,
            "source_rows": clip.num_frames,
            "file_spikes_filtered": spikes,
            "file_joints_clamped": clip.clamped,
        }
        if cfg.use_cache:
            cache.save_track(key, track, info)
    source = {k: v for k, v in info.items() if k != "fps"}
    return motion_from_track(track, robot, name or path.stem, source)
