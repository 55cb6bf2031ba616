"""``bcgd verify POLICY``: check, before anything runs, that the files a deploy stack loads agree."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from bcg_deploy.cli.app import JSON_OPTION, app, console, json_out, option


@app.command("verify")
def verify(
    policy: Path = typer.Argument(..., help="An ONNX file, or a Unitree policy folder (params/, exported/).",
                                  show_default=False),
    stack: str | None = option(None, "--stack", "motion_tracking_controller, unitree_rl_mjlab, unitree_rl_lab, "
                               "holosoma or bcgd.", "from its files"),
    json_path: Path | None = JSON_OPTION,
) -> None:  # fmt: skip
    """One line per mismatch between the files and the stack that loads them (exit 1), or a summary (exit 0)."""
    from bcg_deploy.stacks import verify as verify_policy  # onnx and the stack readers load only when it runs

    result = verify_policy(policy, stack)
    json_out(json.dumps(result.to_dict(policy), indent=1), json_path)
    if json_path is None or str(json_path) != "-":
        for line in result.lines():
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(0 if result.ok else 1)
