"""Where in its clip a trained policy fails, in the training simulator: a fall in MuJoCo at 3.5 s is either a
transfer gap (the policy survives there in training) or a moment of the clip it never learned.

For each run.pt, one env starts at every ``--every`` seconds of the clip from the reference state and runs
deterministically until its first episode ends (``training.evaluate.failure_map``): nominal parameters, no
pushes, no reset noise, no stray termination, unless ``--randomized`` (domain randomisation, pushes and reset
noise as in training, seeded) or ``--stray`` (keep the run's ``env.max_tracking_error``). Printed per start:
how it ended, when, and the mean tracking error; then the clip times where most episodes end (a "wall": a
moment that ends every episode started before it). Writes ``bench/results/failure_map.json``.

    python bench/failure_map.py fight=runs/s13/fight_f2/run.pt jump=runs/s14/gen_jump/run.pt [--every 0.5]
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np
from bench_common import named_checkpoints

from bcg_deploy.errors import run_script
from bcg_deploy.fileio import atomic_write_json
from bcg_deploy.training.evaluate import failure_map, load_policy

RESULTS = Path(__file__).resolve().parent / "results"


def walls(rows: list[dict], width_s: float = 0.5) -> list[tuple[float, int]]:
    """Clip times (binned to ``width_s``) at which two or more episodes ended by a fall or a stray, most first."""
    ends = Counter(round(r["end_s"] / width_s) * width_s for r in rows if r["end"] in ("fall", "stray"))
    return [(t, n) for t, n in ends.most_common() if n >= 2]


def summarise(rows: list[dict]) -> dict:
    survived = np.array([r["survived_s"] for r in rows])
    return {
        "starts": len(rows),
        "reach_clip_end": sum(r["end"] == "clip end" for r in rows),
        "falls": sum(r["end"] == "fall" for r in rows),
        "strays": sum(r["end"] == "stray" for r in rows),
        "median_survived_s": float(np.median(survived)),
        "from_first_frame_s": rows[0]["survived_s"],
        "walls": walls(rows),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="NAME=path/to/run.pt")
    ap.add_argument("--every", type=float, default=0.5, help="seconds between start phases")
    ap.add_argument("--randomized", action="store_true", help="domain randomisation, pushes, reset noise on")
    ap.add_argument("--stray", action="store_true", help="keep the run's stray termination")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", type=Path, default=RESULTS / "failure_map.json")
    args = ap.parse_args()
    out: dict = {"every_s": args.every, "randomized": args.randomized, "stray": args.stray, "runs": {}}
    for name, path in named_checkpoints(args.runs):  # every path checked before the first map
        cfg, motion, actor, norm, iteration = load_policy(path)
        rows = failure_map(cfg, motion, actor, norm, every_s=args.every, nominal=not args.randomized,
                           stray=args.stray, seed=args.seed)  # fmt: skip
        summary = summarise(rows)
        out["runs"][name] = {"path": str(path), "iteration": iteration, "clip": motion.name, **summary, "rows": rows}
        print(f"{name} ({path}, iteration {iteration}, clip {motion.name})")
        for r in rows:
            print(f"  start {r['start_s']:5.1f} s: {r['end']:8s} at {r['end_s']:5.1f} s "
                  f"({r['survived_s']:4.1f} s, {r['tracking_error_cm']:5.1f} cm)")  # fmt: skip
        print(f"{name}.reach_clip_end: {summary['reach_clip_end']}/{summary['starts']}")
        print(f"{name}.median_survived_s: {summary['median_survived_s']:.2f}")
        print(f"{name}.from_first_frame_s: {summary['from_first_frame_s']:.2f}")
        print(f"{name}.walls: " + ", ".join(f"{t:.1f} s x{n}" for t, n in summary["walls"]))
    atomic_write_json(args.out, out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    run_script(main)
