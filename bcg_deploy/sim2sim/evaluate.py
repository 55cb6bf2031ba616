"""A sim2sim evaluation: ``run_sim2sim(policy.onnx, Sim2SimConfig)`` -> ``Report``, the library call behind
``bcgd sim2sim``: set up once (``setup.prepare``), run every seeded run (``parallel.run_all``, each run
``runner.simulate_run``), optionally record run 0 as a video or show it in the viewer, and build the report.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import mujoco

from bcg_deploy.errors import BcgdError
from bcg_deploy.sim2sim.parallel import run_all
from bcg_deploy.sim2sim.report import Report
from bcg_deploy.sim2sim.setup import Sim2SimConfig, Sim2SimSetup, prepare
from bcg_deploy.sim2sim.video import VideoRecorder, ViewerHook


def run_sim2sim(
    onnx_path: str | Path | None,
    cfg: Sim2SimConfig,
    video_path: str | Path | None = None,
    viewer: bool = False,
    on_control_step: Callable[[int, int, mujoco.MjModel, mujoco.MjData], None] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    video_size: tuple[int, int] = (640, 480),
    setup: Sim2SimSetup | None = None,
    overwrite: bool = True,
):
    """Evaluate a policy (or a replay) over ``cfg.runs`` seeded runs; returns a :class:`Report`.

    ``video_path``: MP4 or GIF of run 0 (``video_size`` width, height in pixels) from a camera tracking
    the pelvis, the reference drawn as a translucent ghost. ``viewer``: show run 0 in MuJoCo's
    interactive viewer. ``on_control_step(run, k, m, d)`` is called after every control step of run 0
    (which then runs in this process). The runs go to ``cfg.jobs`` worker processes
    (``sim2sim.parallel``); ``progress(steps done, total steps, text)`` follows them. ``setup``: the
    result of ``prepare(onnx_path, cfg)`` when the caller already has it. ``overwrite``: the video may
    replace an existing file (``bcgd sim2sim --overwrite``).
    """
    if viewer and video_path is not None:
        raise BcgdError("--viewer and --video cannot be used together; pick one")
    setup = setup if setup is not None else prepare(onnx_path, cfg)
    hooks = [on_control_step] if on_control_step is not None else []
    recorder, label = None, ""
    if video_path is not None:
        recorder = VideoRecorder(
            video_path, fps=1.0 / setup.control_dt, width=video_size[0], height=video_size[1], ghost=setup.reference,
            overwrite=overwrite,
        )  # fmt: skip
        hooks.append(recorder)
        label = f"rendering run 0 to {Path(video_path).name}"
    elif viewer:
        recorder = ViewerHook(setup.control_dt)
        hooks.append(recorder)
    hook = (lambda r, k, m, d: [h(r, k, m, d) for h in hooks]) if hooks else None  # noqa: E731
    t0 = time.perf_counter()
    try:
        results = run_all(setup, onnx_path, cfg, hook, progress, label)
    finally:
        written = recorder.close() if recorder is not None else None
    report = Report.build(setup.settings, results)
    report.extras["wall_s"] = sum(x.wall_s for x in results)
    report.extras["sim_s"] = sum(x.duration_s for x in results)
    report.extras["elapsed_s"] = time.perf_counter() - t0
    if video_path is not None:
        report.extras["video"] = {"path": written, "frames": recorder.frames, "backend": recorder.backend}
    return report
