"""``bcgd sim2sim POLICY.onnx``: replay an exported policy in MuJoCo and report its tracking."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from bcg_deploy.cli import JSON_OPTION, app, console, err_console, json_out
from bcg_deploy.cli.paths import check_writable


def speed(sim_s: float, wall_s: float) -> str:
    """The real-time factor, to two significant figures (``0.2x``, ``3.4x``, ``27x``, ``150x``)."""
    if wall_s <= 0:
        return "-"
    rtf = sim_s / wall_s
    if rtf >= 100:
        return f"{rtf:.0f}x"
    return f"{float(f'{rtf:.2g}'):g}x"


def stack_line(stack: dict | None) -> str | None:
    """One line naming the stack that replayed the policy and which of its runtime behaviours are modelled."""
    if not stack or "behaviours" not in stack:
        return None
    rows = stack["behaviours"]
    skipped = [r["name"] for r in rows if not r["modelled"].startswith("yes")]
    not_modelled = f"; not: {'; '.join(skipped)}" if skipped else ""
    return (
        f"stack {stack['name']} ({stack['repo']}; {stack['chosen']}): {len(rows) - len(skipped)} of {len(rows)} "
        f"runtime behaviours modelled{not_modelled} (--json: settings.stack)"
    )


@app.command("sim2sim")
def sim2sim(
    policy: Path | None = typer.Argument(
        None, help="Exported policy (bcgd export). Optional only with --replay --motion.", show_default=False
    ),
    runs: int = typer.Option(5, "--runs", help="Seeded runs over the whole clip."),
    jobs: int = typer.Option(
        0,
        "--jobs",
        help="Processes for the runs (0 = one per core when runs x clip >= 100 s, else 1; the report is the same).",
    ),
    seed: int = typer.Option(0, "--seed", help="Base seed; the same seed reproduces the JSON report."),
    physics_dt: float = typer.Option(0.002, "--physics-dt", help="MuJoCo timestep (s); 0.002 = 500 Hz."),
    latency: str = typer.Option("0", "--latency", help="Action latency in ms, or a uniform range LO:HI (<= 1000)."),
    obs_latency: str = typer.Option("0", "--obs-latency", help="Observation latency in ms, or LO:HI (<= 1000)."),
    noise: float = typer.Option(
        0.0, "--noise", help="Sensor noise: SCALE x the training levels; --noise alone = 1 (as trained)."
    ),
    init_noise: bool = typer.Option(
        True, "--init-noise/--no-init-noise", help="Seeded initial-state perturbation per run, as training's resets."
    ),
    randomize: bool = typer.Option(False, "--randomize", help="Training domain randomisation ranges."),
    push: bool = typer.Option(False, "--push", help="Training push schedule."),
    replay: bool = typer.Option(False, "--replay", help="Drive the PD with the reference joints, no policy."),
    pin_base: bool = typer.Option(False, "--pin-base", help="With --replay: pin the pelvis to the reference root."),
    motion: str | None = typer.Option(
        None, "--motion", help="With --replay: task, registered clip NAME (bcgd motions list) or LAFAN1 CSV."
    ),
    start: float = typer.Option(0.0, "--start", help="With --motion CSV or clip: window start (s)."),
    duration: float | None = typer.Option(
        None, "--duration", help="With --motion CSV or clip: window length (s).", show_default="to the end"
    ),
    max_seconds: float | None = typer.Option(
        None, "--max-seconds", help="Evaluate only the clip's first seconds.", show_default="whole clip"
    ),
    keep_going: bool = typer.Option(False, "--continue-after-fall", help="Do not stop a run when it falls."),
    force: bool = typer.Option(False, "--force", help="Run even if the policy's robot model hash differs."),
    json_path: Path | None = JSON_OPTION,
    plot_path: Path | None = typer.Option(None, "--plot", help="Write a PNG of the error over time."),
    video_path: Path | None = typer.Option(
        None, "--video", help="Write run 0 as .mp4 or .gif (needs the [video] extra and EGL or OSMesa)."
    ),
    width: int = typer.Option(640, "--width", help="Video width (pixels)."),
    height: int = typer.Option(480, "--height", help="Video height (pixels)."),
    viewer: bool = typer.Option(False, "--viewer", help="Show run 0 in the interactive viewer (needs a display)."),
    robot: str = typer.Option("g1", "--robot", help="Packaged robot name."),
    stack: str | None = typer.Option(
        None,
        "--stack",
        help="Deploy stack whose runtime replays POLICY (default: from its files; bcgd verify).",
        show_default=False,
    ),  # fmt: skip
    mjcf: Path | None = typer.Option(
        None, "--mjcf", help="Another G1 model (MJCF): joints/bodies by name, gains from the ONNX, its own collisions."
    ),
) -> None:
    """Run POLICY in MuJoCo (500 Hz PD, policy at its control rate) and report falls and tracking error."""
    from bcg_deploy.sim2sim.injection import parse_ms_range
    from bcg_deploy.sim2sim.runner import Sim2SimConfig, prepare, run_sim2sim

    cfg = Sim2SimConfig(
        runs=runs,
        seed=seed,
        physics_dt=physics_dt,
        latency_ms=parse_ms_range(latency, "--latency"),
        obs_latency_ms=parse_ms_range(obs_latency, "--obs-latency"),
        noise_scale=noise,
        init_noise=init_noise,
        randomize=randomize,
        push=push,
        replay=replay,
        pin_base=pin_base,
        motion=motion,
        motion_start_s=start,
        motion_duration_s=duration,
        max_duration_s=max_seconds,
        stop_on_fall=not keep_going,
        force=force,
        robot=robot,
        mjcf=None if mjcf is None else str(mjcf),
        jobs=jobs,
        stack=stack,
    )
    to_stdout = json_path is not None and str(json_path) == "-"
    out = err_console if to_stdout else console
    for path, what in ((json_path, "--json"), (plot_path, "--plot")):
        if path is not None and str(path) != "-":
            check_writable(path, what)
    if video_path is not None:
        from bcg_deploy.sim2sim.video import VideoRecorder

        VideoRecorder(video_path, fps=50.0, width=width, height=height)  # checks format, imageio, path up front
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
        )
    json_out(report.to_json(), json_path)
    out.print(report.table())
    for note in [*report.settings["notes"], stack_line(report.settings.get("stack")), report.fall_starts()]:
        if note:
            out.print(f"[dim]note: {note}[/]", highlight=False)
    m, x = report.settings["mujoco"], report.extras
    out.print(
        f"MuJoCo {m['version']} {m['integrator']}/{m['solver']}/{m['cone']}, physics {cfg.physics_dt * 1e3:g} ms, "
        f"control {report.settings['control_dt'] * 1e3:g} ms; {x['sim_s']:.1f} s simulated in "
        f"{x['elapsed_s']:.1f} s ({speed(x['sim_s'], x['elapsed_s'])} real time; "
        f"{speed(x['sim_s'], x['wall_s'])} per process{', video rendering included' if video_path else ''})",
        highlight=False,
    )
    if plot_path is not None:
        out.print(f"wrote {report.plot(plot_path)}")
    if video_path is not None:
        v = x["video"]
        out.print(f"wrote {v['path']} ({v['frames']} frames, {v['backend']})" if v["path"] else "no video frames")
