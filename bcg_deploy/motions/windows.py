"""Choosing the task window of a long LAFAN1 clip, deterministically from its data.

Criterion (stated in ``WindowCriterion``): among the windows of ``duration_s`` whose start lies on a
``step_s`` grid, keep those where EVERY frame is sane, and pick the one with the largest mean joint
speed (mean over the window's frames of the mean over joints of |dq/dt|, rad/s, from the
spike-filtered 30 fps data); ties go to the earliest start. Sane frame: pelvis height >=
``min_root_height`` (well above the 0.3 m fall line), pelvis tilt (angle between its z axis and
world z) <= ``max_tilt``, lowest foot contact sphere bottom >= ``min_foot_height`` (the data dips
1.5 cm below the floor) and at least one foot sphere within ``max_support_height`` of the floor
or the pelvis above its clip median (a frame neither supported nor airborne-high is a glitch or the
actor lying).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from bcg_deploy.errors import BcgdError
from bcg_deploy.motions.kinematics import contact_points_world, forward_kinematics, to_qpos
from bcg_deploy.motions.motion import Motion
from bcg_deploy.robots import RobotSpec
from bcg_deploy.rotations import quat_numpy as Q


@dataclass(frozen=True)
class WindowCriterion:
    """Parameters of the window choice (s, m, rad); see the module docstring."""

    duration_s: float = 15.0
    step_s: float = 0.1
    min_root_height: float = 0.45
    max_tilt: float = 1.0
    min_foot_height: float = -0.03
    max_support_height: float = 0.1


@dataclass(frozen=True)
class WindowChoice:
    """The chosen window and its criterion values (rad/s for speeds, m for heights)."""

    start_s: float
    duration_s: float
    score: float
    candidates: int
    sane_candidates: int
    root_height_min: float
    min_foot_height: float

    def as_dict(self) -> dict:
        return asdict(self)


def frame_sanity(track: Motion, robot: RobotSpec, crit: WindowCriterion) -> tuple[np.ndarray, np.ndarray]:
    """Per-frame sanity mask [N] and lowest foot-sphere bottom height [N] (m) of a source-rate track."""
    model = robot.load_model(scene=False)
    fk = forward_kinematics(model, to_qpos(track.root_pos, track.root_quat, track.joint_pos))
    spheres = contact_points_world(robot, fk.pos, fk.quat)
    radius = np.array([c.radius for c in robot.foot_contact_points])
    bottom = (spheres[..., 2] - radius).min(axis=1)
    up = Q.rotate(track.root_quat, np.array([0.0, 0.0, 1.0]))
    tilt = np.arccos(np.clip(up[:, 2], -1.0, 1.0))
    z = track.root_pos[:, 2]
    supported = (bottom <= crit.max_support_height) | (z >= np.median(z))
    ok = (z >= crit.min_root_height) & (tilt <= crit.max_tilt) & (bottom >= crit.min_foot_height) & supported
    return ok, bottom


def window_scores(
    track: Motion, robot: RobotSpec, crit: WindowCriterion
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every window on the ``step_s`` grid: (start frame indices, mean joint speed rad/s, all frames sane,
    per-frame lowest foot-sphere bottom m) of a source-rate track at least one window long."""
    win = int(round(crit.duration_s * track.fps))
    step = max(int(round(crit.step_s * track.fps)), 1)
    ok, bottom = frame_sanity(track, robot, crit)
    speed = np.abs(track.joint_vel).mean(axis=1)
    starts = np.arange(0, len(track.root_pos) - win, step)
    csum = np.concatenate([[0.0], np.cumsum(speed)])
    score = (csum[starts + win + 1] - csum[starts]) / (win + 1)
    bad = np.concatenate([[0], np.cumsum(~ok)])
    sane = (bad[starts + win + 1] - bad[starts]) == 0
    return starts, score, sane, bottom


def choose_window(
    track: Motion, robot: RobotSpec, crit: WindowCriterion | None = None, name: str = "clip"
) -> WindowChoice:
    """The most dynamic sane window of ``track`` (source rate, spike-filtered, with velocities)."""
    crit = crit or WindowCriterion()
    fps = track.fps
    n = len(track.root_pos)
    win = int(round(crit.duration_s * fps))  # intervals per window; frames = win + 1
    if n - 1 < win:
        raise BcgdError(f"{name}: {((n - 1) / fps):.2f} s long, shorter than the {crit.duration_s:g} s task window")
    starts, score, sane, bottom = window_scores(track, robot, crit)
    if not sane.any():
        raise BcgdError(f"{name}: no {crit.duration_s:g} s window passes the sanity checks (root height, tilt, feet)")
    best = int(np.argmax(np.where(sane, score, -np.inf)))
    i0 = int(starts[best])
    sl = slice(i0, i0 + win + 1)
    return WindowChoice(
        start_s=round(i0 / fps, 6),
        duration_s=crit.duration_s,
        score=float(score[best]),
        candidates=len(starts),
        sane_candidates=int(sane.sum()),
        root_height_min=float(track.root_pos[sl, 2].min()),
        min_foot_height=float(bottom[sl].min()),
    )
