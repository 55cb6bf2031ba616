"""``bcgd sim2sim POLICY.onnx``: replay an exported policy in MuJoCo and report its tracking."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from bcg_deploy.cli.app import JSON_OPTION, app, console, err_console, json_out, option
from bcg_deploy.fileio import check_writable

INJECT, REPLAY, OUTPUT = "Perturbations", "Replay a clip (no policy)", "Outputs"
FELL_EXIT = 3  # sim2sim.report.FELL_EXIT, here without importing the simulator for --help (a test keeps them equal)


@app.command("sim2sim")
def sim2sim(
    policy: Path | None = typer.Argument(
        None, help="An ONNX policy or a Unitree policy folder; optional with --replay --motion.", show_default=False
    ),
    runs: int = option(5, "--runs", "Seeded runs over the whole clip."),
    jobs: int = option(0, "--jobs", "Processes (0: one per core when runs x clip >= 100 s; same report)."),
    seed: int = option(0, "--seed", "Base seed; the same seed gives the same report."),
    physics_dt: float = option(0.002, "--physics-dt", "MuJoCo timestep (s); 0.002 = 500 Hz."),
    max_seconds: float | None = option(None, "--max-seconds", "Evaluate only the clip's first seconds.", "all"),
    keep_going: bool = option(False, "--continue-after-fall", "Do not stop a run when it falls."),
    force: bool = option(False, "--force", "Run even if the policy's robot model hash differs."),
    robot: str = option("g1", "--robot", "Packaged robot name."),
    mjcf: Path | None = option(None, "--mjcf", "Another G1 MJCF: its bodies and collisions, the ONNX's gains."),
    stack: str | None = option(
        None, "--stack", "Deploy stack that replays POLICY (see bcgd verify).", "from its files"
    ),
    latency: str = option("0", "--latency", "Action latency (ms), or a uniform range LO:HI (<= 1000).", panel=INJECT),
    obs_latency: str = option("0", "--obs-latency", "Observation latency (ms), or LO:HI (<= 1000).", panel=INJECT),
    noise: float = option(0.0, "--noise", "Sensor noise, x the training levels (--noise alone: 1).", panel=INJECT),
    init_noise: bool = option(
        True, "--init-noise/--no-init-noise", "Perturb each start, as training's resets.", panel=INJECT
    ),
    randomize: bool = option(False, "--randomize", "Training's domain randomisation ranges.", panel=INJECT),
    push: bool = option(False, "--push", "Training's push schedule.", panel=INJECT),
    replay: bool = option(False, "--replay", "Drive the PD with the reference joints.", panel=REPLAY),
    pin_base: bool = option(False, "--pin-base", "Pin the pelvis to the reference root.", panel=REPLAY),
    motion: str | None = option(None, "--motion", "Task, clip NAME (bcgd motions list) or LAFAN1 CSV.", panel=REPLAY),
    start: float = option(0.0, "--start", "Window start in the --motion clip (s).", panel=REPLAY),
    duration: float | None = option(None, "--duration", "Window length (s).", "to the end", REPLAY),
    json_path: Path | None = JSON_OPTION,
    plot_path: Path | None = option(None, "--plot", "Write a PNG of the error over time.", panel=OUTPUT),
    video_path: Path | None = option(
        None, "--video", "Run 0 as .mp4 or .gif (the \\[video] extra, EGL or OSMesa).", panel=OUTPUT
    ),
    width: int = option(640, "--width", "Video width (pixels).", panel=OUTPUT),
    height: int = option(480, "--height", "Video height (pixels).", panel=OUTPUT),
    viewer: bool = option(False, "--viewer", "Show run 0 in the interactive viewer (a display).", panel=OUTPUT),
    overwrite: bool = option(False, "--overwrite", "Replace existing --json, --plot, --video files.", panel=OUTPUT),
    fail_on_fall: bool = option(
        False, "--fail-on-fall", f"Exit with code {FELL_EXIT} when any run fell (else 0), for CI.", panel=OUTPUT
    ),
) -> None:
    """Run POLICY in MuJoCo (500 Hz PD, policy at its control rate) and report falls and tracking error."""
    from bcg_deploy.sim2sim.evaluate import run_sim2sim  # MuJoCo's stack and onnxruntime load only when it runs
    from bcg_deploy.sim2sim.injection import parse_ms_range
    from bcg_deploy.sim2sim.setup import Sim2SimConfig, prepare

    cfg = Sim2SimConfig(
        runs=runs, seed=seed, physics_dt=physics_dt, noise_scale=noise, init_noise=init_noise, randomize=randomize,
        push=push, replay=replay, pin_base=pin_base, motion=motion, motion_start_s=start, motion_duration_s=duration,
        max_duration_s=max_seconds, stop_on_fall=not keep_going, force=force, robot=robot, jobs=jobs,
        mjcf=None if mjcf is None else str(mjcf), latency_ms=parse_ms_range(latency, "--latency"),
        obs_latency_ms=parse_ms_range(obs_latency, "--obs-latency"), stack=stack,
    )  # fmt: skip
    to_stdout = json_path is not None and str(json_path) == "-"
    out = err_console if to_stdout else console
    for path, what in ((json_path, "--json"), (plot_path, "--plot")):
        if path is not None and str(path) != "-":
            check_writable(path, what, overwrite=overwrite, flag="--overwrite")
    if video_path is not None:
        from bcg_deploy.sim2sim.video import VideoRecorder  # as above

        VideoRecorder(video_path, fps=50.0, width=width, height=height, overwrite=overwrite)  # format, path, imageio
    setup = prepare(policy, cfg)  # every input checked before the progress bar and the worker processes start
    bar = Progress(
        TextColumn("sim2sim"),
        BarColumn(bar_width=24),
        MofNCompleteColumn(),
        TextColumn("control steps  {task.fields[text]}"),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
        disable=not err_console.is_terminal,
    )
    with bar:
        task = bar.add_task("sim2sim", total=None, text="starting")
        report = run_sim2sim(
            policy,
            cfg,
            video_path=video_path,
            viewer=viewer,
            progress=lambda done, total, text: bar.update(task, completed=done, total=total, text=text),
            video_size=(width, height),
            setup=setup,
            overwrite=overwrite,
        )
    json_out(report.to_json(), json_path, overwrite=overwrite, flag="--overwrite")
    out.print(report.table())
    for note in [*report.settings["notes"], report.stack_text(), report.fall_starts()]:
        if note:
            out.print(f"[dim]note: {note}[/]", highlight=False)
    out.print(report.speed_text(), highlight=False)
    if plot_path is not None:
        report.plot(plot_path, overwrite=overwrite)
        out.print(f"wrote {plot_path}")
    if video_path is not None:
        v = report.extras["video"]
        out.print(f"wrote {v['path']} ({v['frames']} frames, {v['backend']})" if v["path"] else "no video frames")
    if fail_on_fall and report.any_fell:
        a = report.aggregate
        err_console.print(f"{a['falls']} of {a['runs']} runs fell (--fail-on-fall): exit {FELL_EXIT}", highlight=False)
        raise typer.Exit(FELL_EXIT)
