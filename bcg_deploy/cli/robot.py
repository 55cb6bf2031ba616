"""``bcgd robot``: what our robot model is."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import typer
from rich.table import Table

from bcg_deploy.cli import app, console
from bcg_deploy.errors import BcgdError
from bcg_deploy.robots import load_robot

robot_app = typer.Typer(help="Inspect and export the packaged robot model.", no_args_is_help=True)
app.add_typer(robot_app, name="robot")


def robot_info_dict(name: str) -> dict:
    spec = load_robot(name)
    m = spec.load_model(scene=False)
    return {
        "name": spec.name,
        "mjcf": str(spec.mjcf_path),
        "model_hash": spec.model_hash,
        "nq": m.nq,
        "nv": m.nv,
        "nu": m.nu,
        "nbody": m.nbody - 1,
        "total_mass": spec.total_mass,
        "joints": [
            {
                "name": n,
                "default": float(spec.default_joint_pos[i]),
                "range": spec.joint_range[i].tolist(),
                "kp": float(spec.kp[i]),
                "kd": float(spec.kd[i]),
                "effort_limit": float(spec.effort_limit[i]),
                "velocity_limit": float(spec.velocity_limit[i]),
                "armature": float(spec.armature[i]),
                "action_scale": float(spec.action_scale[i]),
            }
            for i, n in enumerate(spec.joint_names)
        ],
        "foot_contact_points": [
            {"body": c.body, "pos": list(c.pos), "radius": c.radius} for c in spec.foot_contact_points
        ],
        "key_bodies": [{"name": k.name, "body": k.body, "offset": list(k.offset)} for k in spec.key_bodies],
    }


@robot_app.command("info")
def info(
    name: str = typer.Option("g1", "--robot", help="Packaged robot name."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Sizes, mass, joint order, gains and limits of the robot model."""
    try:
        d = robot_info_dict(name)
    except ValueError as exc:
        raise BcgdError(str(exc)) from None
    if as_json:
        typer.echo(json.dumps(d, indent=2))
        return
    console.print(
        f"[bold]{d['name']}[/]  nq {d['nq']}  nv {d['nv']}  nu {d['nu']}  bodies {d['nbody']}  "
        f"mass {d['total_mass']:.3f} kg  model {d['model_hash'][:12]}"
    )
    t = Table("#", "joint", "default", "range", "kp", "kd", "effort", "vel", "armature", "scale")
    for i, j in enumerate(d["joints"]):
        t.add_row(
            str(i),
            j["name"],
            f"{j['default']:+.3f}",
            f"[{j['range'][0]:+.3f}, {j['range'][1]:+.3f}]",
            f"{j['kp']:.2f}",
            f"{j['kd']:.3f}",
            f"{j['effort_limit']:.0f}",
            f"{j['velocity_limit']:.0f}",
            f"{j['armature']:.5f}",
            f"{j['action_scale']:.4f}",
        )
    console.print(t)


@robot_app.command("export-mjcf")
def export_mjcf(
    path: Path = typer.Argument(..., help="Destination folder (robot + scene files are written into it)."),
    name: str = typer.Option("g1", "--robot", help="Packaged robot name."),
) -> None:
    """Copy the robot MJCF and its scene file to PATH."""
    spec = load_robot(name)
    try:
        path.mkdir(parents=True, exist_ok=True)
        for src in (spec.mjcf_path, spec.scene_path):
            shutil.copyfile(src, path / src.name)
    except OSError as exc:
        raise BcgdError(f"cannot write MJCF to {path}: {exc.strerror}") from None
    console.print(f"wrote {path / spec.mjcf_path.name} and {path / spec.scene_path.name}")
