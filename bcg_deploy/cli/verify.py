"""``bcgd verify POLICY``: check, before anything runs, that the files a deploy stack loads agree."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from bcg_deploy.cli import JSON_OPTION, app, console, json_out


@app.command("verify")
def verify(
    policy: Path = typer.Argument(
        ...,
        help="A policy as its stack loads it: an ONNX file, or a Unitree policy folder (params/ + exported/).",
        show_default=False,
    ),  # fmt: skip
    stack: str | None = typer.Option(
        None,
        "--stack",
        help="motion_tracking_controller, unitree_rl_mjlab, unitree_rl_lab, holosoma, bcgd (default: from the files).",
        show_default=False,
    ),  # fmt: skip
    json_path: Path | None = JSON_OPTION,
) -> None:
    """One line per mismatch between the files and the stack that loads them (exit 1), or a summary (exit 0)."""
    from bcg_deploy.stacks import verify as verify_policy

    result = verify_policy(policy, stack)
    doc = {"path": str(policy), "stack": result.stack, "chosen": result.detected, "ok": result.ok,
           "mismatches": result.findings.mismatches, "notes": result.findings.notes,
           "summary": result.findings.summary}  # fmt: skip
    json_out(json.dumps(doc, indent=1), json_path)
    if json_path is None or str(json_path) != "-":
        for line in result.lines():
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(0 if result.ok else 1)
