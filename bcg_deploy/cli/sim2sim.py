"""``bcgd sim2sim POLICY.onnx``: replay an exported policy in MuJoCo and report its tracking."""

from __future__ import annotations

from pathlib import Path

import typer

from bcg_deploy.cli import app, console


@app.command("sim2sim")
def sim2sim(
    policy: Path | None = typer.Argument(
        None, help="Exported policy (bcgd export). Optional only with --replay --motion.", show_default=False
    ),
    runs: int = typer.Option(5, "--runs", help="Seeded runs over the whole clip."),
    seed: int = typer.Option(0, "--seed", help="Base seed; the same seed reproduces the JSON report."),
    physics_dt: float = typer.Option(0.002, "--physics-dt", help="MuJoCo timestep (s); 0.002 = 500 Hz."),
    latency: str = typer.Option("0", "--latency", help="Action latency in ms, or a uniform range LO:HI."),
    obs_latency: str = typer.Option("0", "--obs-latency", help="Observation latency in ms, or LO:HI."),
    noise: float = typer.Option(0.0, "--noise", help="Sensor noise: SCALE x the training levels (1 = as trained)."),
    randomize: bool = typer.Option(False, "--randomize", help="Training domain randomisation ranges."),
    push: bool = typer.Option(False, "--push", help="Training push schedule."),
    replay: bool = typer.Option(False, "--replay", help="Drive the PD with the reference joints, no policy."),
    pin_base: bool = typer.Option(False, "--pin-base", help="With --replay: pin the pelvis to the reference root."),
    motion: str | None = typer.Option(None, "--motion", help="With --replay: task/library motion NAME or LAFAN1 CSV."),
    start: float = typer.Option(0.0, "--start", help="With --motion CSV: window start (s)."),
    duration: float | None = typer.Option(None, "--duration", help="With --motion CSV: window length (s)."),
    max_seconds: float | None = typer.Option(None, "--max-seconds", help="Evaluate only the clip's first seconds."),
    keep_going: bool = typer.Option(False, "--continue-after-fall", help="Do not stop a run when it falls."),
    force: bool = typer.Option(False, "--force", help="Run even if the policy's robot model hash differs."),
    json_path: Path | None = typer.Option(None, "--json", help="Write the report as JSON."),
    plot_path: Path | None = typer.Option(None, "--plot", help="Write a PNG of the error over time."),
    video_path: Path | None = typer.Option(None, "--video", help="Write an MP4 of run 0 (needs EGL or OSMesa)."),
    viewer: bool = typer.Option(False, "--viewer", help="Show run 0 in the interactive viewer (needs a display)."),
    robot: str = typer.Option("g1", "--robot", help="Packaged robot name."),
    mjcf: Path | None = typer.Option(
        None, "--mjcf", help="Another G1 model (MJCF): joints/bodies by name, gains from the ONNX, its own collisions."
    ),
) -> None:
    """Run POLICY in MuJoCo (500 Hz PD, policy at its control rate) and report falls and tracking error."""
    from bcg_deploy.sim2sim.injection import parse_ms_range
    from bcg_deploy.sim2sim.runner import Sim2SimConfig, run_sim2sim

    cfg = Sim2SimConfig(
        runs=runs,
        seed=seed,
        physics_dt=physics_dt,
        latency_ms=parse_ms_range(latency, "--latency"),
        obs_latency_ms=parse_ms_range(obs_latency, "--obs-latency"),
        noise_scale=noise,
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
    )
    with console.status("sim2sim") as status:
        report = run_sim2sim(
            policy, cfg, video_path=video_path, viewer=viewer, progress=lambda r, n: status.update(f"run {r + 1}/{n}")
        )
    console.print(report.table())
    for note in report.settings["notes"]:
        console.print(f"[dim]note: {note}[/]", highlight=False)
    m, x = report.settings["mujoco"], report.extras
    console.print(
        f"MuJoCo {m['version']} {m['integrator']}/{m['solver']}/{m['cone']}, physics {cfg.physics_dt * 1e3:g} ms, "
        f"control {report.settings['control_dt'] * 1e3:g} ms; {x['sim_s']:.1f} s simulated in {x['wall_s']:.1f} s "
        f"({x['sim_s'] / max(x['wall_s'], 1e-9):.0f}x real time{', video rendering included' if video_path else ''})",
        highlight=False,
    )
    if json_path is not None:
        console.print(f"wrote {report.write_json(json_path)}")
    if plot_path is not None:
        console.print(f"wrote {report.plot(plot_path)}")
    if video_path is not None:
        v = x["video"]
        console.print(f"wrote {v['path']} ({v['frames']} frames, {v['backend']})" if v["path"] else "no video frames")
