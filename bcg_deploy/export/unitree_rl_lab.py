"""What unitree_rl_lab's g1_29dof ``State_Mimic`` reads beyond the unitree policy folder: the motion as CSV and
its FSM entry (``fps``, ``motion_file``, ``policy_dir``) for ``config/config.yaml``.

``bcgd export --profile unitree`` writes these beside unitree_rl_mjlab's ``params/deploy.yaml`` and motion NPZ
(``export/deploy.py``), so one folder serves both of Unitree's deploys: the ONNX and deploy.yaml are the same
for both (same ``ManagerBasedRLEnv``, same registered terms); only the motion file differs.

Read at unitreerobotics/unitree_rl_lab 4711dee (paths under ``deploy/``):

- ``robots/g1_29dof/src/State_Mimic.cpp:116-148``: the state's config node is ``FSM.<state name>``; it reads
  ``policy_dir`` (``param::parser_policy_dir``: relative to the project folder), ``motion_file`` (relative
  to the project folder unless absolute), ``fps`` (``as<float>()``), optional ``time_start`` / ``time_end``
  (s, clamped to the clip), then ``<policy_dir>/params/deploy.yaml`` and ``<policy_dir>/exported/policy.onnx``;
  ``:154`` the time-out transition needs a state named ``Velocity``. The state exists only when
  ``FSM._.<state name>`` registers it with an ``id`` and ``type: Mimic`` (``include/FSM/CtrlFSM.h``).
- ``robots/g1_29dof/include/State_Mimic.h:40-57``: the CSV is read with ``isaaclab::load_csv``; per row,
  columns 0-2 root position, 3-6 root quaternion x y z w (``Eigen::Quaternionf(d[6], d[3], d[4], d[5])``), 7..
  the joints in SDK order; ``dt = 1 / fps``; joint velocities are forward differences of the positions
  (the last one repeated). ``:59-65``: at time t the frame is ``round(t / duration * (N - 1))`` with
  ``duration = N dt`` and a blend to the next frame (positions and velocities linear, root quaternion slerp).
- ``isaaclab::load_csv`` (``include/isaaclab/utils/utils.h``; read in unitree_rl_mjlab 5b7e396
  ``deploy/include/isaaclab/utils/utils.h:19-48``, the same deploy library): every line is one row, fields
  split at ``,`` and parsed with ``std::stof``. So: no header (a non-number field is skipped with a log line,
  which shifts or empties the row: the loader then reads garbage), no blank lines, and no value that
  ``std::stof`` rejects with ``out_of_range`` (a subnormal float32 such as 1e-40: the exception is not
  caught and ends the program). We write float32 values in ``%.9g`` (round-trips float32 exactly) and write
  magnitudes below the smallest normal float32 (1.18e-38) as 0.

The motion is written at the clip's own rate (``fps`` = 50 = the control rate), so at control step k the
deploy reads frame k exactly (blend 0 or 1). The joint velocities it derives (forward differences) are not
the clip's (central differences at the source rate, resampled): the ``motion_command`` term then differs
from training by that much; ``tests/export/test_replica_unitree_rl_lab.py`` measures it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

FSM_ID = 110  # unitree_rl_lab's g1_29dof config uses 1-3 (Passive, FixStand, Velocity) and 101-102 (Mimic_*)
TINY = float(np.finfo(np.float32).tiny)


def _f64(a: Any) -> np.ndarray:
    return np.asarray(a.detach().cpu() if isinstance(a, torch.Tensor) else a, dtype=np.float64)


def motion_rows(motion_arrays: Any) -> np.ndarray:
    """[T, 36] float32: root position (m, world), root quaternion x y z w, 29 joint angles (rad, SDK order)."""
    q = _f64(motion_arrays["root_quat"])  # w x y z inside
    rows = np.concatenate((_f64(motion_arrays["root_pos"]), q[:, 1:4], q[:, :1], _f64(motion_arrays["joint_pos"])), 1)
    rows = rows.astype(np.float32)
    rows[np.abs(rows) < TINY] = 0.0  # std::stof throws out_of_range on subnormals
    return rows


def motion_csv(motion_arrays: Any) -> bytes:
    """The CSV ``State_Mimic``'s loader reads: one line per frame, no header, comma-separated ``%.9g``."""
    lines = [",".join(f"{v:.9g}" for v in row.tolist()) for row in motion_rows(motion_arrays)]
    return ("\n".join(lines) + "\n").encode()


def state_name(motion_name: str) -> str:
    """The FSM state name: ``Mimic_`` + the motion name reduced to letters, digits and underscores."""
    return "Mimic_" + (re.sub(r"[^A-Za-z0-9_]+", "_", motion_name).strip("_") or "motion")


def fsm_config(motion_name: str, policy_folder: str, motion_file: str, fps: float) -> str:
    """The ``config/config.yaml`` fragment that registers and configures the Mimic state of this policy.

    Paths are relative to the deploy's project folder (``deploy/robots/g1_29dof``, where ``config/`` is),
    with this policy folder copied to ``config/policy/mimic/<policy_folder>/``."""
    name = state_name(motion_name)
    base = f"config/policy/mimic/{policy_folder}/"
    doc = {
        "FSM": {
            "_": {name: {"id": FSM_ID, "type": "Mimic"}},
            name: {
                "transitions": {"Passive": "LT + B.on_pressed"},
                "fps": float(fps),
                "motion_file": base + "params/" + motion_file,
                "policy_dir": base,
            },
        }
    }
    head = (
        "# unitree_rl_lab g1_29dof Mimic state, written by bcgd export: merge into deploy/robots/g1_29dof/config/"
        "config.yaml\n"
        f"# with this policy folder at config/policy/mimic/{policy_folder}/ (the config must also have its Velocity "
        "state;\n"
        f"# change the id {FSM_ID} if another state uses it). fps: frames per second of motion_file.\n"
    )
    return head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def side_file_paths(root: Path, motion_name: str) -> dict[str, Path]:
    """``params/<motion>.csv`` and ``params/unitree_rl_lab_fsm.yaml`` in the policy folder ``root``."""
    return {
        "motion_csv": Path(root) / "params" / f"{motion_name}.csv",
        "fsm_config": Path(root) / "params" / "unitree_rl_lab_fsm.yaml",
    }


def side_files(root: Path, motion_name: str, motion_arrays: Any) -> dict[Path, bytes]:
    """{path: bytes} of both files for the policy folder ``root`` (``<root>/exported/policy.onnx``)."""
    paths = side_file_paths(root, motion_name)
    fps = float(motion_arrays["fps"])
    cfg = fsm_config(motion_name, Path(root).resolve().name, paths["motion_csv"].name, fps)
    return {paths["motion_csv"]: motion_csv(motion_arrays), paths["fsm_config"]: cfg.encode()}
