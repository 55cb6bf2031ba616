"""How hard each task window is: its dynamism against the clip's other windows, and how much of it the PD
target can reach with our action scale and with a uniform 0.4 rad one.

For each LAFAN1 G1 file (``--data``, default ../shared/data/lafan1_g1): every sane 15 s window on the
0.1 s grid is scored as ``motions.windows.choose_window`` scores them (mean joint speed, rad/s); reported
are our window's score and its percentile among the sane windows, the median sane window, and the best
sane window that does not overlap ours (a held-out window for the generalisation runs). Reach: the share of
the window's joint-frames whose reference angle lies outside default +/- action scale (where
``q_target = default + scale * tanh(.)`` cannot be put), and the mean excess beyond it (rad, over all
joint-frames), per scale, overall and per joint group; scales: ours (0.25 x effort / kp), each ``--uniform``
value (rad on every joint; ``env.action_scale``) and each ``--fraction`` (x effort / kp). Also the 95th
percentile of |q - default| per joint group (rad): the scale that would reach 95 % of that group's frames.
And how fast the reference root travels (horizontal speed, m/s: mean, p90, max) in our window, in the
held-out window and in the built-in synthetic clip of the same task, which the earliest result rows used.
Writes ``bench/results/motion_difficulty.json``.

    python bench/motion_difficulty.py [--data DIR] [--uniform 0.4 0.8] [--fraction 0.5]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from bcg_deploy.fileio import atomic_write_json
from bcg_deploy.motions.build import LoadCfg, filtered_source_track
from bcg_deploy.motions.csv_io import read_lafan1_csv
from bcg_deploy.motions.library import load_builtin
from bcg_deploy.motions.windows import WindowCriterion, choose_window, window_scores
from bcg_deploy.robots import load_robot

ROOT = Path(__file__).resolve().parents[1]
FILES = {"run": "run1_subject2.csv", "jump": "jumps1_subject1.csv", "fight": "fight1_subject2.csv",
         "dance": "dance1_subject1.csv"}  # fmt: skip
GROUPS = {"legs": ("hip", "knee", "ankle"), "waist": ("waist",), "arms": ("shoulder", "elbow", "wrist")}


def outside_share(q: np.ndarray, q0: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Per joint: the share of frames with |q - q0| > scale."""
    return (np.abs(q - q0) > scale).mean(axis=0)


def mean_excess(q: np.ndarray, q0: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Per joint: the mean over frames of max(|q - q0| - scale, 0) (rad)."""
    return np.maximum(np.abs(q - q0) - scale, 0.0).mean(axis=0)


def by_group(per_joint: np.ndarray, joint_names: tuple[str, ...]) -> dict[str, float]:
    """Mean of a per-joint figure over each joint group (legs, waist, arms)."""
    return {
        g: float(np.mean([per_joint[j] for j, n in enumerate(joint_names) if any(k in n for k in keys)]))
        for g, keys in GROUPS.items()
    }


def root_speed(root_pos: np.ndarray, fps: float) -> dict[str, float]:
    """Horizontal speed of a root trajectory [T, 3] (m, world) sampled at ``fps``: mean, p90 and max, m/s."""
    v = np.linalg.norm(np.diff(root_pos[:, :2], axis=0), axis=1) * fps
    return {"mean": float(v.mean()), "p90": float(np.percentile(v, 90)), "max": float(v.max())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "lafan1_g1")
    ap.add_argument("--uniform", type=float, nargs="*", default=[0.4], help="uniform action scales (rad)")
    ap.add_argument("--fraction", type=float, nargs="*", default=[], help="action scales as a fraction of effort/kp")
    args = ap.parse_args()
    robot = load_robot("g1")
    crit = WindowCriterion()
    q0 = np.asarray(robot.default_joint_pos)
    scales = {"ours": np.asarray(robot.action_scale)}
    scales |= {f"uniform_{u:g}": np.full(robot.num_joints, u) for u in args.uniform}
    scales |= {f"fraction_{f:g}": f * robot.effort_limit / robot.kp for f in args.fraction}
    ours_scale = dict(zip(robot.joint_names, scales["ours"].tolist(), strict=True))
    out: dict = {"criterion": crit.__dict__, "action_scale_ours": ours_scale}
    for task, fname in FILES.items():
        path = args.data / fname
        if not path.is_file():
            raise SystemExit(f"{path} not found (expected the LAFAN1 G1 clips; --data DIR)")
        clip = read_lafan1_csv(path, robot)
        track, _ = filtered_source_track(clip, robot, LoadCfg().spike_filter)
        choice = choose_window(track, robot, crit, name=task)
        first, score, sane, _ = window_scores(track, robot, crit)
        starts = first / track.fps
        frames = int(round(crit.duration_s * track.fps)) + 1
        ours = int(np.argmin(np.abs(starts - choice.start_s)))
        s_sane = score[sane]
        far = sane & (np.abs(starts - choice.start_s) >= crit.duration_s)
        held = int(np.argmax(np.where(far, score, -np.inf))) if far.any() else None
        i0 = int(round(choice.start_s * track.fps))
        q = track.joint_pos[i0 : i0 + frames]
        reach = {}
        for name, sc in scales.items():
            share, excess = outside_share(q, q0, sc), mean_excess(q, q0, sc)
            reach[name] = {
                "outside_share": float(share.mean()),
                "by_group": by_group(share, robot.joint_names),
                "mean_excess_rad": float(excess.mean()),
                "mean_excess_by_group_rad": by_group(excess, robot.joint_names),
            }
        p95 = by_group(np.percentile(np.abs(q - q0), 95, axis=0), robot.joint_names)
        speed = {"ours": root_speed(track.root_pos[i0 : i0 + frames], track.fps)}
        if held is not None:
            h0 = int(first[held])
            speed["held_out"] = root_speed(track.root_pos[h0 : h0 + frames], track.fps)
        builtin = load_builtin(task, robot)
        speed["builtin"] = root_speed(builtin.root_pos, builtin.fps)
        out[task] = {
            "file": fname,
            "window_start_s": choice.start_s,
            "score_rad_s": float(score[ours]),
            "percentile_among_sane": float((s_sane < score[ours]).mean() * 100.0),
            "sane_windows": int(sane.sum()),
            "median_sane_score_rad_s": float(np.median(s_sane)),
            "held_out_window_start_s": None if held is None else float(starts[held]),
            "held_out_score_rad_s": None if held is None else float(score[held]),
            "reach": reach,
            "p95_abs_offset_by_group_rad": p95,
            "root_speed_m_s": speed,
        }
        r = out[task]
        print(f"motion_difficulty.{task}.window_start_s: {r['window_start_s']:.1f}  score {r['score_rad_s']:.3f} "
              f"(percentile {r['percentile_among_sane']:.0f}, median {r['median_sane_score_rad_s']:.3f}; held-out "
              f"{r['held_out_window_start_s']} s at {r['held_out_score_rad_s']:.3f})")  # fmt: skip
        for name in scales:
            r = reach[name]
            print(
                f"motion_difficulty.{task}.outside_{name}: {r['outside_share']:.3f} {_fmt(r['by_group'])}  "
                f"excess {r['mean_excess_rad']:.3f} rad {_fmt(r['mean_excess_by_group_rad'])}"
            )
        print(f"motion_difficulty.{task}.p95_abs_offset_rad: {_fmt(p95)}")
        print(f"motion_difficulty.{task}.root_speed_m_s (mean / p90 / max): " + "  ".join(
            f"{k} {v['mean']:.2f} / {v['p90']:.2f} / {v['max']:.2f}" for k, v in speed.items()))  # fmt: skip
    res = ROOT / "bench" / "results"
    res.mkdir(parents=True, exist_ok=True)
    atomic_write_json(res / "motion_difficulty.json", out)
    print(f"wrote {res / 'motion_difficulty.json'}")


def _fmt(groups: dict[str, float]) -> str:
    return " ".join(f"{g} {v:.3f}" for g, v in groups.items())


if __name__ == "__main__":
    main()
