"""Cold compile and cached start of the simulator's Warp kernels.

    python bench/compile_time.py [--dtypes float32 float64] [--out bench/results/compile_time.json]

Each measurement runs in a fresh Python process whose Warp kernel cache is a new empty temporary
directory (``wp.config.kernel_cache_dir``), so nothing is reused from ~/.cache/warp. "cold" = building the
Simulator and running one differentiable control step (forward + backward), which loads (compiles)
every kernel the step and the oracle helpers use; "cached" = the same in a second process on the now
filled cache. Both are also given as whole-process wall time (including importing torch/warp/mujoco).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bcg_deploy.fileio import atomic_write_json

CHILD = r"""
import sys, time, json
t0 = time.perf_counter()
import torch, warp as wp
wp.config.kernel_cache_dir = sys.argv[1]
wp.config.quiet = True
from bcg_deploy.diffsim import SimConfig, Simulator
from bcg_deploy.robots import load_robot
t_import = time.perf_counter()
robot = load_robot("g1")
out = {}
for dtype in sys.argv[2:]:
    t1 = time.perf_counter()
    sim = Simulator(robot, SimConfig(num_envs=2, dtype=dtype))
    tdt = sim.types.torch_dtype
    q = torch.zeros(2, 36, dtype=tdt); q[:, 2] = 0.8; q[:, 3] = 1.0
    target = torch.zeros(2, 29, dtype=tdt, requires_grad=True)
    s = sim.step(q, torch.zeros(2, 35, dtype=tdt), target)
    (s.q.sum() + s.qd.sum()).backward()
    sim.mass_matrix(q)
    out[dtype] = time.perf_counter() - t1
out["import_s"] = t_import - t0
print(json.dumps(out))
"""


def _run(cache_dir: str, dtypes: list[str]) -> dict:
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", CHILD, cache_dir, *dtypes], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out["process_wall_s"] = wall
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtypes", nargs="*", default=["float32", "float64"])
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "compile_time.json"))
    args = p.parse_args()
    report = {"dtypes": args.dtypes, "cpus": os.cpu_count(), "per_dtype": {}}
    with tempfile.TemporaryDirectory(prefix="bcgd_warp_cache_") as tmp:
        for dtype in args.dtypes:
            cache = os.path.join(tmp, dtype)
            cold = _run(cache, [dtype])
            cached = _run(cache, [dtype])
            report["per_dtype"][dtype] = {
                "cold_sim_s": cold[dtype],
                "cold_process_s": cold["process_wall_s"],
                "cached_sim_s": cached[dtype],
                "cached_process_s": cached["process_wall_s"],
                "import_s": cached["import_s"],
            }
            r = report["per_dtype"][dtype]
            for k, v in r.items():
                print(f"{dtype}.{k}: {v:.2f}")
        both = _run(os.path.join(tmp, "both"), args.dtypes)
        report["all_dtypes_cold_sim_s"] = sum(both[d] for d in args.dtypes)
        print(f"all.cold_sim_s: {report['all_dtypes_cold_sim_s']:.2f}")
    out = Path(args.out)
    atomic_write_json(out, report)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
