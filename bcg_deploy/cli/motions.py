"""``bcgd motions``: the clip library (list, show, import)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from bcg_deploy.cli.app import JSON_OPTION, app, console, json_out
from bcg_deploy.motions import MotionQuery, import_lafan1_dir, library_dir, list_motions, show_motion
from bcg_deploy.motions.library import remove_motions
from bcg_deploy.motions.metrics import summary_rows

motions_app = typer.Typer(
    help="Reference motions: task clips (run, jump, fight, dance), LAFAN1 import, built-in synthetic clips.",
    no_args_is_help=True,
)
app.add_typer(motions_app, name="motions")


@motions_app.command("list")
def list_cmd(json_path: Path | None = JSON_OPTION) -> None:
    """The task motions, where each comes from, and every registered LAFAN1 file (with its state)."""
    d = list_motions()
    json_out(json.dumps(d, indent=2), json_path)
    if json_path is not None and str(json_path) == "-":
        return
    t = Table("task", "source", "duration", title="tasks")
    for row in d["motions"]:
        style = "yellow" if row["kind"] == "builtin" else ""
        t.add_row(row["name"], f"[{style}]{row['source']}[/]" if style else row["source"], f"{row['duration_s']:.1f} s")
    console.print(t)
    n = len(d["files"])
    if n:
        f = Table("name", "duration", "state", "task", title=f"registered LAFAN1 files ({n})")
        for e in d["files"]:
            state = e["status"] if e["status"] == "ok" else f"[red]{e['status']}[/]"
            dur = "-" if e["duration_s"] is None else f"{e['duration_s']:.1f} s"
            f.add_row(e["name"], dur, state, ", ".join(e["tasks"]))
        console.print(f)
        bad = [e for e in d["files"] if e["status"] != "ok"]
        for e in bad:
            console.print(f"[red]{e['status']}:[/] {e['path']}", highlight=False, soft_wrap=True)
        if bad:
            console.print("re-import the folder (bcgd motions import DIR) or forget them (bcgd motions remove NAME)")
        console.print("use a file by name: bcgd train NAME, bcgd sim2sim --replay --motion NAME", highlight=False)
    console.print(f"library {d['library']}: {n} LAFAN1 file{'s' if n != 1 else ''} registered", highlight=False)
    if n == 0:
        console.print("import your LAFAN1 G1 folder with `bcgd motions import DIR` to use the real clips")


@motions_app.command("remove")
def remove_cmd(names: list[str] = typer.Argument(..., help="Registered file names (see bcgd motions list).")) -> None:
    """Forget registered LAFAN1 files (the CSV files themselves are left alone)."""
    removed = remove_motions(names)
    console.print(f"removed {', '.join(removed)} from {library_dir()}", highlight=False)


@motions_app.command("show")
def show(
    name: str | None = typer.Argument(None, help="Task (run, jump, fight, dance) or a registered LAFAN1 file name."),
    csv: Path | None = typer.Option(None, "--csv", help="Load and validate this LAFAN1 G1 CSV instead of NAME."),
    start: float = typer.Option(0.0, "--start", help="Window start in s (files and --csv only)."),
    duration: float | None = typer.Option(None, "--duration", help="Window length in s (default: to the end)."),
    builtin: bool = typer.Option(False, "--builtin", help="Use the built-in synthetic clip even if LAFAN1 is there."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the clip cache."),
    json_path: Path | None = JSON_OPTION,
) -> None:
    """Source, window, duration, heights, speeds and joint velocities of a motion."""
    q = MotionQuery(
        name=name,
        csv=None if csv is None else str(csv),
        start_s=start,
        duration_s=duration,
        prefer="builtin" if builtin else "auto",
        use_cache=not no_cache,
    )
    d = show_motion(q)
    json_out(json.dumps(d, indent=2), json_path)
    if json_path is not None and str(json_path) == "-":
        return
    t = Table("field", "value", show_header=False)
    for row in summary_rows(d):
        t.add_row(*row)
    console.print(t)


@motions_app.command("import")
def import_cmd(
    directory: Path = typer.Argument(..., help="Folder of LAFAN1 G1 CSV files (e.g. Unitree's g1/ folder)."),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="Register the valid files and skip invalid ones."),
) -> None:
    """Validate a LAFAN1 G1 folder and register it (by path) in your library; choose the task windows."""
    r = import_lafan1_dir(directory, skip_bad=skip_bad)
    console.print(f"registered {len(r.imported)} file(s) from {r.directory} in {r.library}", highlight=False)
    for msg in r.skipped:
        console.print(f"[yellow]skipped:[/] {msg}", highlight=False)
    if r.tasks:
        t = Table("task", "file", "window start", "mean joint speed")
        for task, w in r.tasks.items():
            t.add_row(task, f"{w['file']}.csv", f"{w['start_s']:.1f} s", f"{w['score']:.3f} rad/s")
        console.print(t)
