"""``bcgd export`` and ``bcgd inspect``: run.pt -> verified policy.onnx, and what an ONNX holds."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from bcg_deploy.cli.app import JSON_OPTION, app, console, err_console, json_out, option
from bcg_deploy.errors import BcgdError
from bcg_deploy.fileio import check_writable
from bcg_deploy.training.run_files import find_checkpoint


def _fmt(x: float) -> str:
    return f"{x:.3g}" if isinstance(x, (int, float)) else str(x)


@app.command("export")
def export_cmd(
    checkpoint: Path = typer.Argument(..., help="Training checkpoint (run.pt)."),
    output: Path = typer.Option(Path("policy.onnx"), "--output", "-o", help="Destination .onnx file."),
    inputs: str | None = option(None, "--inputs", "Paper profile: raw (robot state) or obs (849 values).", "raw"),
    profile: str | None = option(
        None, "--profile", "paper, beyondmimic, beyondmimic_wose, unitree or holosoma.", "the checkpoint's"
    ),
    deploy_yaml: bool = option(False, "--deploy-yaml", "Require unitree's side files beside exported/."),
    parity_samples: int = option(1000, "--parity-samples", "Minimum number of parity inputs."),
    force: bool = option(False, "--force", "Overwrite existing outputs (ONNX, side files, --json)."),
    json_path: Path | None = JSON_OPTION,
) -> None:
    """Export a checkpoint to one self-contained ONNX, verified against torch with onnxruntime.

    A bare file name that is not in this folder is looked up in runs/*/ (where bcgd train writes run.pt).
    """
    from bcg_deploy.export import ExportConfig, export_policy  # onnx and the exporter load only when it runs

    checkpoint, note = find_checkpoint(checkpoint)
    if note:
        err_console.print(f"note: {note}", highlight=False, soft_wrap=True)
    check_writable(output, "the policy", overwrite=force)
    if json_path is not None and str(json_path) != "-":
        check_writable(json_path, "--json", overwrite=force)
    cfg = ExportConfig(
        checkpoint=checkpoint,
        output=output,
        inputs=inputs,  # type: ignore[arg-type]
        profile=profile,
        parity_samples=parity_samples,
        overwrite=force,
    )
    if deploy_yaml and profile != "unitree":
        raise BcgdError("--deploy-yaml: only --profile unitree has a deploy.yaml (unitree_rl_mjlab's layout)")
    res = export_policy(cfg)
    p = res.parity
    json_out(json.dumps(res.to_dict(), indent=2), json_path, overwrite=force)
    if json_path is not None and str(json_path) == "-":
        return
    console.print(
        f"wrote [bold]{res.path}[/] ({res.size_bytes / 1e6:.2f} MB, {res.num_nodes} nodes, {res.signature} inputs, "
        f"{res.obs_dtype} observation, {res.profile} profile, {len(res.metadata)} metadata keys)"
    )
    t = Table("output", "max abs err", "max rel err", title=f"parity onnxruntime vs torch on {p['num_inputs']} inputs")
    for name, v in p["per_output"].items():
        t.add_row(name, _fmt(v["max_abs_err"]), _fmt(v["max_rel_err"]))
    console.print(t)
    console.print(
        f"max abs {_fmt(p['max_abs_err'])}  max rel {_fmt(p['max_rel_err'])}  (tolerance {p['tolerance']:g}; "
        f"vs torch float64 {_fmt(p['max_abs_err_vs_torch_float64'])})"
    )
    console.print("parity inputs: " + ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in p["sources"].items()))
    for path in res.side_files.values():
        console.print(f"wrote {path}")
    console.print(f"next: bcgd sim2sim {res.path} --noise", highlight=False, soft_wrap=True)


@app.command("inspect")
def inspect_cmd(
    policy: Path = typer.Argument(..., help="An exported policy.onnx."),
    checkpoint: Path | None = typer.Option(None, "--checkpoint", help="Re-run torch parity against this run.pt."),
    samples: int = typer.Option(1000, "--samples", help="Inputs for the parity re-run."),
    json_path: Path | None = JSON_OPTION,
) -> None:
    """Inputs, outputs and metadata of a policy, and a re-run of its parity check (exit 1 if it fails)."""
    from bcg_deploy.export import inspect_policy  # onnx and the exporter load only when it runs

    if checkpoint is not None:
        checkpoint, note = find_checkpoint(checkpoint)
        if note:
            err_console.print(f"note: {note}", highlight=False, soft_wrap=True)
    rep = inspect_policy(policy, checkpoint=checkpoint, samples=samples)
    rerun = rep["parity_rerun"]
    json_out(json.dumps(rep, indent=2), json_path)
    if json_path is None or str(json_path) != "-":
        console.print(
            f"[bold]{rep['path']}[/]  {rep['size_bytes'] / 1e6:.2f} MB  opset {rep['opset']}  "
            f"{rep['num_nodes']} nodes  signature {rep['signature']}"
        )
        for title, rows in (("inputs", rep["inputs"]), ("outputs", rep["outputs"])):
            t = Table("name", "shape", "dtype", title=title)
            for r in rows:
                t.add_row(r["name"], str(r["shape"]), r["dtype"])
            console.print(t)
        t = Table("key", "value", title="metadata_props")
        for k, v in rep["metadata"].items():
            t.add_row(k, v if len(v) <= 100 else v[:97] + "...")
        console.print(t)
        console.print(f"integrity: {rep['integrity']}", highlight=False, soft_wrap=True)
        sp = rep["stored_parity"] or {}
        if sp:
            console.print(
                f"stored parity: max abs {_fmt(sp.get('max_abs_err'))}, max rel {_fmt(sp.get('max_rel_err'))} "
                f"on {sp.get('num_inputs')} inputs (tolerance {sp.get('tolerance')})"
            )
        else:
            console.print("stored parity: none (not a bcgd export)")
        shown = {k: v for k, v in rerun.items() if k != "per_output"}
        console.print(f"parity re-run ({rerun['mode']}): {'[green]passed[/]' if rerun['passed'] else '[red]FAILED[/]'}")
        console.print("  ".join(f"{k} {_fmt(v)}" for k, v in shown.items()), highlight=False, soft_wrap=True)
    if not rerun["passed"]:
        raise typer.Exit(1)
