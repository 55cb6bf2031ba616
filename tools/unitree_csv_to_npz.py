"""Write unitree_rl_mjlab's motion NPZ for a LAFAN1-retargeted G1 CSV (the repository ships the policy and the CSV,
not the NPZ its deploy loads). The conversion is unitree_rl_mjlab's ``scripts/csv_to_npz.py``, reimplemented with
MuJoCo forward kinematics (``bcg_deploy.stacks.unitree_motion``). Usage::

    python tools/unitree_csv_to_npz.py mjlab/motions/g1/dance1_subject2.csv \\
        deploy/robots/g1/config/policy/mimic/dance1_subject2/params/dance1_subject2.npz \\
        [--mjcf mjlab/asset_zoo/robots/unitree_g1/xmls/g1.xml] [--input-fps 30] [--output-fps 50]

Without ``--mjcf`` the bodies come from bcgd's packaged G1 (the deploy reads only body 0, the CSV's root).
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import mujoco
import numpy as np

from bcg_deploy.errors import BcgdError, run_script
from bcg_deploy.fileio import atomic_write_bytes
from bcg_deploy.robots import load_robot
from bcg_deploy.stacks.unitree_motion import npz_arrays


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--mjcf", type=Path, default=None)
    ap.add_argument("--input-fps", type=float, default=30.0)
    ap.add_argument("--output-fps", type=float, default=50.0)
    a = ap.parse_args()
    spec = load_robot("g1")
    if a.mjcf is not None:
        try:
            model = mujoco.MjModel.from_xml_path(str(a.mjcf))
        except ValueError as exc:
            raise BcgdError(f"--mjcf {a.mjcf}: {str(exc).splitlines()[0][:120]}") from None
    else:
        model = spec.load_model()
    arrays = npz_arrays(a.csv, model, spec.joint_names, a.input_fps, a.output_fps)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    written = atomic_write_bytes(a.out, buf.getvalue())
    t = arrays["joint_pos"].shape[0]
    print(f"wrote {written}: {t} frames at {a.output_fps:g} Hz ({t / a.output_fps:.2f} s), {model.nbody - 1} bodies")


if __name__ == "__main__":
    run_script(main)
