"""``bcgd robot``: what our robot model is."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich import box
from rich.table import Table

from bcg_deploy.cli.app import JSON_OPTION, app, console, json_out
from bcg_deploy.errors import BcgdError
from bcg_deploy.fileio import atomic_write_bytes
from bcg_deploy.robots import load_robot

INFO_CAPTION = (
    "joints in MJCF order (= LAFAN1 CSV order, name without _joint); PD gains kp N m/rad, kd N m s/rad; "
    "effort limit N m, velocity limit rad/s, armature kg m^2, action scale rad"
)
robot_app = typer.Typer(help="Inspect and export the packaged robot model.", no_args_is_help=True)
app.add_typer(robot_app, name="robot")


@robot_app.command("info")
def info(
    name: str = typer.Option("g1", "--robot", help="Packaged robot name."),
    json_path: Path | None = JSON_OPTION,
) -> None:
    """Sizes, mass, joint order, gains and limits of the robot model (fits 80 columns)."""
    d = load_robot(name).summary()
    json_out(json.dumps(d, indent=2), json_path)
    if json_path is not None and str(json_path) == "-":
        return
    console.print(
        f"[bold]{d['name']}[/]  nq {d['nq']}  nv {d['nv']}  nu {d['nu']}  bodies {d['nbody']}  "
        f"mass {d['total_mass']:.3f} kg  model {d['model_hash'][:12]}"
    )
    t = Table(box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True, pad_edge=False, show_edge=False)
    for col in ("joint", "default", "range rad", "kp", "kd", "N m", "rad/s", "arm.", "scale"):
        t.add_column(col, no_wrap=True, justify="left" if col == "joint" else "right")
    for j in d["joints"]:
        lo, hi = j["range"]
        t.add_row(
            j["name"].removesuffix("_joint"),
            f"{j['default']:+.3f}",
            f"{lo:+.2f} {hi:+.2f}",
            f"{j['kp']:.1f}",
            f"{j['kd']:.2f}",
            f"{j['effort_limit']:.0f}",
            f"{j['velocity_limit']:.0f}",
            f"{j['armature']:.3f}",
            f"{j['action_scale']:.3f}",
        )
    console.print(t)
    console.print(INFO_CAPTION, style="dim")


@robot_app.command("export-mjcf")
def export_mjcf(
    path: Path = typer.Argument(..., help="Destination folder (robot + scene files are written into it)."),
    name: str = typer.Option("g1", "--robot", help="Packaged robot name."),
) -> None:
    """Copy the robot MJCF and its scene file to PATH."""
    spec = load_robot(name)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BcgdError(f"cannot write MJCF to {path}: {exc.strerror}") from None
    for src in (spec.mjcf_path, spec.scene_path):  # copies of packaged files: an earlier copy is replaced
        atomic_write_bytes(path / src.name, src.read_bytes(), "MJCF")
    console.print(f"wrote {path / spec.mjcf_path.name} and {path / spec.scene_path.name}")
