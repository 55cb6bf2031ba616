"""``bcgd train TASK``: parse the options, ``training.run.plan_run`` them into a checked ``TrainConfig``,
start the ranks (``training.parallel.launch``), ``training.run.train``, and show its progress."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import typer
from rich.progress import BarColumn, Progress, TextColumn

from bcg_deploy.cli.app import app, console, err_console, option
from bcg_deploy.errors import BcgdError
from bcg_deploy.training.config import TrainConfig
from bcg_deploy.training.device import init_warp
from bcg_deploy.training.parallel.distributed import LOST_PEERS_EXIT, MIN_ENVS_PER_RANK
from bcg_deploy.training.parallel.launch import Launch, LostPeers, run_rank, start_ranks, stop_signal_interrupts
from bcg_deploy.training.progress import ProgressLine, closing, header
from bcg_deploy.training.run import BCG_OPTIONS, claim_run_folder, plan_run, precision_notes, train
from bcg_deploy.training.run_files import find_checkpoint, stopped_run_note

OUT, BCG, RANKS = "Output and resume", "Bundled Contact Gradients (SHAC + BCG)", "Data-parallel"


@app.command("train")
def train_cmd(
    task: str | None = typer.Argument(None, help="run, jump, fight, dance, or an imported clip.", show_default="dance"),
    motion: Path | None = option(None, "--motion", "A LAFAN1 G1 CSV to train on, not a task."),
    start: float | None = option(None, "--start", "Window start (s); a TASK: in its file.", "0"),
    duration: float | None = option(None, "--duration", "Window length (s).", "15"),
    iterations: int | None = option(None, "--iterations", "Iterations (paper: 3000).", "1800"),
    envs: int | None = option(None, "--envs", "Environments.", "128, --bundle 64"),
    horizon: int | None = option(None, "--horizon", "Window (control steps).", "32"),
    device: str | None = option(None, "--device", "cpu or cuda[:N].", "cpu"),
    kappa: float | None = option(None, "--kappa", "Contact stiffness (1/m).", "300"),
    seed: int | None = option(None, "--seed", "Random seed.", "0"),
    obs: str | None = option(None, "--obs", "Actor: beyondmimic[_wose], unitree, holosoma, paper.", "beyondmimic_wose"),
    algo: str = option("shac", "--algo", "shac, or ppo (rsl_rl, forward only; needs the \\[ppo] extra)."),
    overrides: list[str] = option([], "--set", "A config field: shac.actor_lr=1e-3.", metavar="KEY=VALUE"),
    deterministic: bool = option(False, "--deterministic", "Deterministic kernels (slower)."),
    out: Path | None = option(None, "--out", "Run folder.", "runs/TASK or runs/TASK-N", OUT),
    force: bool = option(False, "--force", "Overwrite the run in --out (not one in use).", panel=OUT),
    resume: Path | None = option(None, "--resume", "Continue the run of this run.pt.", panel=OUT),
    lr_schedule: str = option("continue", "--lr-schedule", "Longer resume: continue or stretch the decay.", panel=OUT),
    save_every: int | None = option(None, "--save-every", "Write run.pt every K iterations.", "50", OUT),
    keep_every: int | None = option(None, "--keep-every", "Also snapshot every K iterations.", "300", OUT),
    log_every: int = option(10, "--log-every", "Without a terminal: log every K.", panel=OUT),
    bundle: bool | None = option(None, "--bundle/--no-bundle", "SHAC + BCG (64 envs), or plain SHAC.", "off", BCG),
    branches: int | None = option(None, "--branches", "Branches per bundle.", "10", BCG),
    bundle_steps: int | None = option(None, "--bundle-steps", "Bundle length, steps.", "2", BCG),
    sigma_p: float | None = option(None, "--sigma-p", "Foot position std (m).", "0.01", BCG),
    sigma_v: float | None = option(None, "--sigma-v", "Foot velocity std (m/s).", "0.02", BCG),
    tau: float | None = option(None, "--tau", "Trigger: foot normal force (N).", "400", BCG),
    max_dq: float | None = option(None, "--bcg-max-dq", "Joint angle offset clamp (rad).", "off", BCG),
    max_dqd: float | None = option(None, "--bcg-max-dqd", "Joint rate offset clamp (rad/s).", "off", BCG),
    nproc: int | None = option(
        None, "--nproc", "Ranks on this machine.", f"1 per core, >= {MIN_ENVS_PER_RANK} envs each", RANKS
    ),
    nnodes: int = option(1, "--nnodes", "Machines (started through torchrun).", panel=RANKS),
    node_rank: int = option(0, "--node-rank", "This machine's index.", panel=RANKS),
    rdzv_endpoint: str | None = option(
        None, "--rdzv-endpoint", "Machine 0's address (torchrun's rendezvous).", panel=RANKS, metavar="HOST:PORT"
    ),
) -> None:
    """Train a motion-imitation policy (SHAC + ADD); writes run.pt, metrics.jsonl and TensorBoard logs."""
    if log_every < 1:
        raise BcgdError(f"--log-every {log_every}: expected a number of iterations >= 1")
    if resume is not None:
        resume, found = find_checkpoint(resume)
        if found:
            err_console.print(f"note: {found}", highlight=False)
    bcg = dict(zip(BCG_OPTIONS, (branches, bundle_steps, sigma_p, sigma_v, tau, max_dq, max_dqd), strict=True))
    notes: list[str] = []
    cfg = plan_run(task, motion, start, duration, envs, iterations, horizon, device, kappa, seed, out, save_every,
                   overrides, resume, {"enabled": bundle, **bcg}, algo, force, lr_schedule, notes, obs=obs,
                   keep_every=keep_every, deterministic=deterministic)  # fmt: skip
    claim = claim_run_folder(cfg, auto=out is None and resume is None, resume=resume is not None, force=force,
                             node_rank=node_rank)  # fmt: skip
    for note in claim.notes if claim is not None else []:  # held to the end; the ranks inherit it
        err_console.print(f"note: {note}", highlight=False, soft_wrap=True)
    ranks_argv = sys.argv[1:]  # ranks started from this command line train in the same folder
    if out is None and "WORLD_SIZE" not in os.environ:
        ranks_argv += ["--out", cfg.runner.out_dir]
    stop_signal_interrupts()
    world = start_ranks(cfg, Launch(nproc, nnodes, node_rank, rdzv_endpoint), ranks_argv)
    if isinstance(world, int):  # this process only launched the ranks, which have finished
        raise typer.Exit(world)
    warp_note = init_warp(cfg.runner.device)
    if not world.is_main:  # a rank other than 0 trains silently; rank 0 reports
        _rank(lambda: train(cfg, resume=resume, world=world), world)
        return
    if warp_note:
        err_console.print(f"note: {warp_note}", highlight=False)
    console.print(f"[bold]bcgd train[/] {header(cfg, resume, world)}", soft_wrap=True)
    for note in notes + precision_notes(cfg):
        console.print(f"note: {note}", highlight=False, soft_wrap=True)
    t0 = time.perf_counter()
    try:
        result = _run(cfg, resume, log_every, world)
    except KeyboardInterrupt:
        err_console.print(f"interrupted: {stopped_run_note(Path(cfg.runner.out_dir))}", highlight=False)
        raise typer.Exit(130) from None
    lines, warning, code = closing(result, cfg.runner.iterations, time.perf_counter() - t0)
    for text in lines[:1] + ([f"[yellow]{warning}[/]"] if warning else []) + lines[1:]:
        console.print(text, highlight=False, soft_wrap=True)
    if code:
        raise typer.Exit(code)


def _rank(fn, world):  # noqa: ANN001, ANN202
    """``run_rank``: a rank that lost its peers is one line (unless the launcher reports it) and exit 3."""
    try:
        return run_rank(fn, world)
    except LostPeers as exc:
        if not exc.reported:  # under torchrun each rank reports; our launcher reports for all
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(LOST_PEERS_EXIT) from None


def _run(cfg: TrainConfig, resume: Path | None, log_every: int, world):  # noqa: ANN001, ANN202 - World, TrainResult
    """Train (rank 0 of ``world``) with a rich bar on a terminal, else one plain line every ``log_every``
    iterations. Events (an interruption, a refused checkpoint) print on lines of their own, above the bar."""
    total, line = cfg.runner.iterations, ProgressLine(cfg.runner.iterations)
    say = console.print if console.is_terminal else err_console.print  # the bar's console keeps it below

    def on_event(e: dict) -> None:
        say(f"[yellow]iteration {e['iteration']}: {e['event']}[/] {e['message']}", highlight=False)

    def on_line(m: dict) -> None:
        text = line(m)  # sets line.first, the iteration this process started after
        if m["iteration"] % log_every == 0 or m["iteration"] in (total, line.first + 1):
            console.print(f"iteration {m['iteration']}/{total}  {text}", highlight=False, soft_wrap=True)

    if not console.is_terminal:
        return _rank(lambda: train(cfg, resume=resume, on_iteration=on_line, on_event=on_event, world=world), world)
    columns = (
        TextColumn("[bold]{task.completed}/{task.total}"),
        BarColumn(bar_width=20),
        TextColumn("{task.fields[line]}"),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task("train", total=total, line="compiling kernels + first window ...")
        on_bar = lambda m: progress.update(bar, completed=m["iteration"], line=line(m))  # noqa: E731
        return _rank(lambda: train(cfg, resume=resume, on_iteration=on_bar, on_event=on_event, world=world), world)
