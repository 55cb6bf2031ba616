"""Reference motions at the control rate: LAFAN1 G1 CSV loading, the user's clip library, built-in clips.

Public API (pure loaders; nothing here imports the simulator, training or the CLI):

- ``load_task_motion(name)`` -> Motion for ``run``, ``jump``, ``fight``, ``dance`` (the user's LAFAN1
  library when imported, else a built-in synthetic clip).
- ``load_lafan1_csv(path, start_s, duration_s, robot)`` -> Motion from any LAFAN1 G1 CSV window.
- ``load_builtin(name)`` -> the built-in synthetic clip.
- ``import_lafan1_dir(dir)``, ``list_motions()``, ``resolve_task(name)``, ``library_dir()``.
- ``soundness(motion, robot)`` / ``summary(motion, robot)``: kinematic figures of a clip.
"""

from __future__ import annotations

from bcg_deploy.motions.build import CONTROL_FPS as CONTROL_FPS
from bcg_deploy.motions.build import LoadCfg as LoadCfg
from bcg_deploy.motions.build import load_lafan1_csv as load_lafan1_csv
from bcg_deploy.motions.library import TASKS as TASKS
from bcg_deploy.motions.library import MotionQuery as MotionQuery
from bcg_deploy.motions.library import import_lafan1_dir as import_lafan1_dir
from bcg_deploy.motions.library import list_motions as list_motions
from bcg_deploy.motions.library import load_builtin as load_builtin
from bcg_deploy.motions.library import load_task_motion as load_task_motion
from bcg_deploy.motions.library import resolve_task as resolve_task
from bcg_deploy.motions.library import show_motion as show_motion
from bcg_deploy.motions.metrics import soundness as soundness
from bcg_deploy.motions.metrics import summary as summary
from bcg_deploy.motions.motion import Motion as Motion
from bcg_deploy.motions.paths import library_dir as library_dir

__all__ = [
    "CONTROL_FPS",
    "LoadCfg",
    "Motion",
    "MotionQuery",
    "TASKS",
    "import_lafan1_dir",
    "library_dir",
    "list_motions",
    "load_builtin",
    "load_lafan1_csv",
    "load_task_motion",
    "resolve_task",
    "show_motion",
    "soundness",
    "summary",
]
