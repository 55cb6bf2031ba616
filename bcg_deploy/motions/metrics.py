"""Kinematic figures of a Motion: foot contact heights, stance sliding, speeds, joint limits.

Foot figures use the 8 foot contact spheres (RobotSpec.foot_contact_points): a sphere's *height*
is the z of its bottom point (centre z - radius, m; 0 = touching the floor, negative = below it).
A sphere is in *stance* at a frame when its height is below ``stance_height`` and its speed
(central differences of its centre, m/s) is below ``stance_speed``. The *slide* of a stance
segment (consecutive stance frames of one sphere) is the largest horizontal distance of the sphere
from where the segment began; ``max_stance_slide`` is the largest over all segments and spheres.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from bcg_deploy.motions.kinematics import contact_points_world
from bcg_deploy.motions.motion import Motion
from bcg_deploy.motions.resample import central_difference
from bcg_deploy.robots import RobotSpec


@dataclass(frozen=True)
class FootCfg:
    """Stance detection thresholds (m, m/s)."""

    stance_height: float = 0.01
    stance_speed: float = 0.2


def foot_sphere_heights(motion: Motion, robot: RobotSpec) -> tuple[np.ndarray, np.ndarray]:
    """Sphere centres [T, 8, 3] (m, world) and sphere bottom heights [T, 8] (m)."""
    centres = contact_points_world(robot, motion.body_pos_w, motion.body_quat_w)
    radius = np.array([c.radius for c in robot.foot_contact_points])
    return centres, centres[..., 2] - radius


def stance_slides(motion: Motion, robot: RobotSpec, cfg: FootCfg | None = None) -> tuple[np.ndarray, list[float]]:
    """Stance mask [T, 8] and the slide (m) of every stance segment (see the module docstring)."""
    cfg = cfg or FootCfg()
    centres, height = foot_sphere_heights(motion, robot)
    speed = np.linalg.norm(central_difference(centres, motion.dt), axis=-1)
    stance = (height < cfg.stance_height) & (speed < cfg.stance_speed)
    slides: list[float] = []
    for s in range(stance.shape[1]):
        m = np.concatenate([[False], stance[:, s], [False]])
        edges = np.flatnonzero(np.diff(m.astype(np.int8)))
        for a, b in zip(edges[::2], edges[1::2], strict=True):
            xy = centres[a:b, s, :2]
            slides.append(float(np.linalg.norm(xy - xy[0], axis=-1).max()))
    return stance, slides


@dataclass(frozen=True)
class Soundness:
    """Kinematic soundness figures of a clip (s, rad, m)."""

    duration_s: float
    max_joint_limit_violation: float
    min_foot_height: float
    max_stance_slide: float
    stance_segments: int

    def as_dict(self) -> dict:
        return asdict(self)


def soundness(motion: Motion, robot: RobotSpec, cfg: FootCfg | None = None) -> Soundness:
    """Duration, worst joint-limit excess (rad, <= 0 when inside), lowest sphere height, worst stance slide."""
    lo, hi = robot.joint_range[:, 0], robot.joint_range[:, 1]
    excess = np.maximum(lo - motion.joint_pos, motion.joint_pos - hi).max()
    _, height = foot_sphere_heights(motion, robot)
    _, slides = stance_slides(motion, robot, cfg)
    return Soundness(
        duration_s=motion.duration,
        max_joint_limit_violation=float(excess),
        min_foot_height=float(height.min()),
        max_stance_slide=max(slides, default=0.0),
        stance_segments=len(slides),
    )


def summary(motion: Motion, robot: RobotSpec) -> dict:
    """JSON-ready figures for ``bcgd motions show``: heights (m), speeds (m/s, rad/s), feet (m)."""
    z = motion.root_pos[:, 2]
    vxy = np.linalg.norm(motion.root_lin_vel[:, :2], axis=1)
    jv = np.abs(motion.joint_vel)
    t, j = np.unravel_index(int(np.argmax(jv)), jv.shape)
    _, height = foot_sphere_heights(motion, robot)
    snd = soundness(motion, robot)
    airborne = (height.min(axis=1) > FootCfg().stance_height).mean()
    return {
        "name": motion.name,
        "source": motion.source,
        "fps": motion.fps,
        "frames": motion.num_frames,
        "duration_s": motion.duration,
        "root_height_min": float(z.min()),
        "root_height_max": float(z.max()),
        "root_speed_mean": float(vxy.mean()),
        "root_speed_max": float(vxy.max()),
        "root_travel": float(np.linalg.norm(motion.root_pos[-1, :2] - motion.root_pos[0, :2])),
        "root_ang_speed_max": float(np.linalg.norm(motion.root_ang_vel, axis=1).max()),
        "joint_speed_mean": float(jv.mean()),
        "max_joint_vel": float(jv[t, j]),
        "max_joint_vel_joint": robot.joint_names[j],
        "max_joint_vel_time_s": float(t / motion.fps),
        "max_joint_vel_over_limit": float((jv / robot.velocity_limit).max()),
        "max_joint_limit_violation": snd.max_joint_limit_violation,
        "min_foot_height": snd.min_foot_height,
        "max_stance_slide": snd.max_stance_slide,
        "airborne_fraction": float(airborne),
    }


def summary_rows(d: dict) -> list[tuple[str, str]]:
    """(field, value) rows of a ``show_motion`` result for a two-column table (``bcgd motions show``)."""
    src = d["source"]
    g = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)  # noqa: E731
    rows = [("name", d["name"])]
    if src["kind"] == "builtin":
        rows += [("source", f"built-in (synthetic): {src['description']}"),
                 ("window", f"whole clip ({src['duration_s']:g} s)")]  # fmt: skip
    else:
        rows += [("source", f"{src['file']} (sha256 {src['sha256'][:12]})"),
                 ("window", f"{src['start_s']:g} s + {src['duration_s']:g} s")]  # fmt: skip
        if "window_criterion" in src:
            rows.append(("window criterion", ", ".join(f"{k} {g(v)}" for k, v in src["window_criterion"].items())))
        rows.append(("spikes filtered (file)", str(src["file_spikes_filtered"])))
    return rows + [
        ("frames", f"{d['frames']} at {d['fps']:g} Hz ({d['duration_s']:.2f} s)"),
        ("root height", f"{d['root_height_min']:.3f} .. {d['root_height_max']:.3f} m"),
        ("root speed (xy)", f"mean {d['root_speed_mean']:.2f}, max {d['root_speed_max']:.2f} m/s"),
        ("root travel", f"{d['root_travel']:.2f} m"),
        ("root angular speed", f"max {d['root_ang_speed_max']:.2f} rad/s"),
        ("joint speed", f"mean {d['joint_speed_mean']:.2f} rad/s"),
        ("max joint velocity", f"{d['max_joint_vel']:.2f} rad/s ({d['max_joint_vel_joint']} at "
         f"{d['max_joint_vel_time_s']:.2f} s; {100 * d['max_joint_vel_over_limit']:.0f}% of its limit at worst)"),
        ("lowest foot sphere", f"{1000 * d['min_foot_height']:+.1f} mm"),
        ("max stance slide", f"{1000 * d['max_stance_slide']:.1f} mm"),
        ("airborne", f"{100 * d['airborne_fraction']:.1f}% of frames"),
    ]  # fmt: skip
