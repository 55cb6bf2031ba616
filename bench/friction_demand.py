"""The friction coefficient a reference clip itself needs: |F_tangential| / F_normal of the ground force.

    python bench/friction_demand.py run run@60.9 jump jump@223.3 fight fight@137.6 dance dance@54.4

``TASK`` is the task's window (its LAFAN1 file's most dynamic 15 s, needs ``bcgd motions import``),
``TASK@S`` the 15 s window of the same file from S seconds. For every frame the total external force on
the robot is Newton's law for its centre of mass, F = m (a_com - g) (the root force an inverse-dynamics
replay returns; the CoM comes from MuJoCo's own ``subtree_com`` of the reference poses); on flat ground
with one friction coefficient mu for both feet the ground can supply it only if |F_xy| <= mu F_z, so
|F_xy| / F_z is a lower bound on the friction the clip needs (the feet's torques can only ask for more).
The CoM acceleration is a second difference at 50 Hz, averaged over ``--smooth`` seconds (centred) to keep
motion-capture noise out; frames in flight (F_z < ``--min-load`` x body weight) need no friction and are
left out. Writes JSON (``--out``) with per-window percentiles, the peak, and the share of loaded frames
whose demand exceeds each of ``--levels``; prints ``window.metric: value`` lines.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import mujoco
import numpy as np

from bcg_deploy.fileio import atomic_write_json
from bcg_deploy.motions import load_lafan1_csv
from bcg_deploy.motions.library import load_task_motion, resolve_task
from bcg_deploy.motions.motion import Motion
from bcg_deploy.robots import load_robot

GRAVITY = 9.81


def com_trajectory(motion: Motion, model: mujoco.MjModel) -> np.ndarray:
    """Whole-body centre of mass [T, 3] (m, world) of the clip's poses."""
    data = mujoco.MjData(model)
    out = np.empty((motion.num_frames, 3))
    for t in range(motion.num_frames):
        data.qpos[:3], data.qpos[3:7], data.qpos[7:] = motion.root_pos[t], motion.root_quat[t], motion.joint_pos[t]
        mujoco.mj_kinematics(model, data)
        mujoco.mj_comPos(model, data)
        out[t] = data.subtree_com[1]
    return out


def friction_demand(com: np.ndarray, fps: float, smooth_s: float, min_load: float) -> tuple[np.ndarray, np.ndarray]:
    """(|F_xy| / F_z per loaded frame, loaded-frame mask [T - 2]) of a CoM trajectory sampled at ``fps``."""
    acc = (com[2:] - 2.0 * com[1:-1] + com[:-2]) * fps * fps
    k = max(1, int(round(smooth_s * fps)))
    if k > 1:
        kernel = np.ones(k) / k
        acc = np.stack([np.convolve(acc[:, i], kernel, mode="same") for i in range(3)], axis=1)
    fz = acc[:, 2] + GRAVITY  # per unit mass
    loaded = fz > min_load * GRAVITY
    ratio = np.linalg.norm(acc[:, :2], axis=1)[loaded] / fz[loaded]
    return ratio, loaded


def window_motion(spec: str, robot) -> Motion:  # noqa: ANN001
    """``TASK`` (its chosen window) or ``TASK@START`` (15 s of the task's file from START s)."""
    if "@" not in spec:
        return load_task_motion(spec, prefer="lafan1", robot=robot)
    task, start = spec.split("@", 1)
    src = resolve_task(task, prefer="lafan1")
    return load_lafan1_csv(Path(src["path"]), float(start), 15.0, robot)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("windows", nargs="+", help="TASK or TASK@START_S")
    p.add_argument("--smooth", type=float, default=0.1, help="centred averaging window of the CoM acceleration (s)")
    p.add_argument("--min-load", type=float, default=0.2, help="frames with F_z below this x weight are in flight")
    p.add_argument("--levels", type=float, nargs="+", default=[0.3, 0.4, 0.5, 0.6])
    p.add_argument("--out", type=Path, default=Path("bench/results/friction_demand.json"))
    args = p.parse_args()
    robot = load_robot("g1")
    model = robot.load_model(scene=False)
    report = {"method": "F = m (a_com - g), |F_xy| / F_z over loaded frames", "smooth_s": args.smooth, "windows": {}}
    for spec in args.windows:
        motion = window_motion(spec, robot)
        ratio, loaded = friction_demand(com_trajectory(motion, model), motion.fps, args.smooth, args.min_load)
        row = {
            "source": motion.source.get("file", motion.name),
            "start_s": motion.source.get("start_s"),
            "loaded_frames": int(loaded.sum()),
            "frames": int(loaded.size),
            "p50": float(np.percentile(ratio, 50)),
            "p95": float(np.percentile(ratio, 95)),
            "p99": float(np.percentile(ratio, 99)),
            "max": float(ratio.max()),
            "share_above": {f"{x:g}": float((ratio > x).mean()) for x in args.levels},
        }
        report["windows"][spec] = row
        for k in ("p50", "p95", "p99", "max"):
            print(f"{spec}.{k}: {row[k]:.3f}")
        for x, share in row["share_above"].items():
            print(f"{spec}.share_above_{x}: {share:.4f}")
    atomic_write_json(args.out, report)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
