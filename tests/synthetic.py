"""TEST HELPER (not a test, not real data): the one small synthetic clip of the tests, as LAFAN1 CSV rows or as
a Motion.

The robot's home pose with the arms and wrists swinging (0.3 rad, 0.3-1.2 Hz, seeded), the pelvis walking
forward at 0.2 m/s with a slight bob and a slow yaw sway. ``synthetic_rows`` samples it at 30 fps in the
LAFAN1 G1 CSV layout (xyzw quaternion), joints kept 0.01 rad inside their ranges; ``synthetic_motion`` samples
it at the control rate and completes it as the library does a clip: finite-difference velocities
(``resample.with_velocities``) and forward kinematics of every body (``build.motion_from_track``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bcg_deploy.motions.build import motion_from_track
from bcg_deploy.motions.motion import Motion
from bcg_deploy.motions.resample import with_velocities
from bcg_deploy.robots import RobotSpec

ARMS = np.arange(15, 29)
"""The swinging joints: waist excluded, both arms and wrists (RobotSpec.joint_names order)."""


def synthetic_pose(robot: RobotSpec, t: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pelvis position [T, 3] (m), pelvis quaternion [T, 4] (w x y z) and joint angles [T, J] (rad) at times t (s)."""
    rng = np.random.default_rng(seed)
    root = np.zeros((len(t), 3))
    root[:, 0] = 0.2 * t
    root[:, 2] = robot.default_root_pos[2] + 0.01 * np.sin(2 * np.pi * t)
    yaw = 0.2 * np.sin(2 * np.pi * 0.3 * t)
    quat = np.stack([np.cos(yaw / 2), 0 * t, 0 * t, np.sin(yaw / 2)], axis=1)
    q = np.tile(robot.default_joint_pos, (len(t), 1))
    freq = rng.uniform(0.3, 1.2, size=len(ARMS))
    q[:, ARMS] += 0.3 * np.sin(2 * np.pi * freq * t[:, None])
    lo, hi = robot.joint_range[:, 0], robot.joint_range[:, 1]
    return root, quat, np.clip(q, lo + 0.01, hi - 0.01)


def _times(seconds: float, fps: float) -> np.ndarray:
    return np.arange(int(round(seconds * fps)) + 1) / fps


def synthetic_rows(robot: RobotSpec, seconds: float, fps: float = 30.0, seed: int = 0) -> np.ndarray:
    """The clip as a valid LAFAN1-format array [N, 36]: pelvis position, quaternion x y z w, joints."""
    root, quat, q = synthetic_pose(robot, _times(seconds, fps), seed)
    return np.concatenate([root, quat[:, [1, 2, 3, 0]], q], axis=1)


def synthetic_motion(robot: RobotSpec, seconds: float = 2.0, fps: float = 50.0, seed: int = 0) -> Motion:
    """The clip as a Motion at ``fps``, velocities and bodies completed by the library's own pipeline."""
    root, quat, q = synthetic_pose(robot, _times(seconds, fps), seed)
    source = {"kind": "builtin", "file": "tests/synthetic.py", "seed": seed, "duration_s": seconds}
    return motion_from_track(with_velocities(fps, root, quat, q), robot, "synthetic", source)


def write_csv(path: Path, rows: np.ndarray) -> Path:
    """``rows`` as a LAFAN1 CSV file (no header, six decimals)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(",".join(f"{v:.6f}" for v in r) for r in rows) + "\n")
    return path
