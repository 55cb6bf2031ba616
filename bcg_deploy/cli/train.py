"""``bcgd train TASK``: SHAC (+ ADD) imitation training through the differentiable simulator.

Thin: parse options into a ``TrainConfig`` (``--set a.b=v`` for any other field), call
``bcg_deploy.training.runner.train`` once, show rich progress from its per-iteration metrics.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import typer
from rich.progress import BarColumn, Progress, TextColumn

from bcg_deploy.cli import app, console, err_console
from bcg_deploy.cli.paths import RUNS_DIR, find_checkpoint
from bcg_deploy.errors import BcgdError
from bcg_deploy.rundir import claim_for_training
from bcg_deploy.training.config import (
    TASKS,
    TrainConfig,
    apply_overrides,
    bcg_defaults,
    cuda_defaults,
    ppo_defaults,
)
from bcg_deploy.training.distributed import MIN_ENVS_PER_RANK

CHECKPOINT_NAME = "run.pt"
SNAPSHOT_DIR = "snapshots"  # training.runner's, without importing torch here


def _fmt(v: float | None, spec: str) -> str:
    if v is None or v != v:  # NaN
        return "-"
    return format(v, spec)


def library_file(name: str) -> str:
    """The path of the LAFAN1 file registered as ``name`` (``bcgd motions import``), or a one-line error."""
    from bcg_deploy.motions.library import read_library, registered_file

    files = read_library()["files"]
    if name not in files:
        reg = ", ".join(sorted(files)) if files else "none yet: bcgd motions import DIR"
        raise BcgdError(
            f"unknown task {name!r}: expected one of {', '.join(TASKS)}, a registered clip ({reg}), "
            "or --motion FILE.csv"
        )
    return str(registered_file(name))


def task_window(task: str, start: float | None) -> tuple[str, float]:
    """The LAFAN1 file of task ``task`` and a window start in it (s; default the task's chosen window).

    ``bcgd train jump --start 223.3`` trains another window of the file the task uses. The built-in clips
    have no windows, so there it is a one-line error.
    """
    from bcg_deploy.motions.library import resolve_task

    src = resolve_task(task)
    if src["kind"] != "lafan1":
        raise BcgdError(
            f"--start/--duration: task {task!r} uses the built-in synthetic clip here, which has no windows; "
            "register its LAFAN1 file (bcgd motions import DIR) or give --motion FILE.csv"
        )
    return str(src["path"]), float(src.get("start_s", 0.0) if start is None else start)


BCG_OPTIONS = {
    "num_branches": "--branches",
    "horizon": "--bundle-steps",
    "sigma_p": "--sigma-p",
    "sigma_v": "--sigma-v",
    "tau": "--tau",
    "max_dq": "--bcg-max-dq",
    "max_dqd": "--bcg-max-dqd",
}
"""The command-line option of each ``BCGCfg`` field the CLI sets."""


def build_config(
    task: str | None,
    motion: Path | None,
    start: float | None,
    duration: float | None,
    envs: int | None,
    iterations: int | None,
    horizon: int | None,
    device: str | None,
    kappa: float | None,
    seed: int | None,
    out: Path | None,
    save_every: int | None,
    overrides: list[str],
    resume: Path | None,
    bcg: dict | None = None,
    algo: str = "shac",
    force: bool = False,
    lr_schedule: str = "continue",
    notes: list[str] | None = None,
) -> TrainConfig:
    """The run's config: defaults (or the resumed run's config) + the options given + ``--set``.

    ``algo`` "ppo" starts from the paper's PPO scale (``config.ppo_defaults``); there ``horizon`` is PPO's
    rollout length (``ppo.num_steps_per_env``). ``bcg`` maps ``BCGCfg`` field names (enabled, num_branches,
    horizon, sigma_p, sigma_v, tau, max_dq, max_dqd) to the values given on the command line (None = not
    given); they may change on resume.
    """
    if resume is not None:
        from bcg_deploy.training.runner import resume_point

        cfg, stored_it = resume_point(resume)
        stored = (cfg.runner.iterations, cfg.shac.actor_lr, cfg.shac.critic_lr)
        if out is None:
            if resume.parent.name == SNAPSHOT_DIR:
                raise BcgdError(
                    f"--resume {resume}: a kept snapshot; give --out DIR for the continued run (continuing in "
                    f"{resume.parent.parent} would overwrite its later run.pt)"
                )
            cfg.runner.out_dir = str(resume.parent)
        stored_motion = None if cfg.motion.csv is None else Path(cfg.motion.csv).resolve()
        fixed = [
            ("TASK", task, cfg.motion.task if cfg.motion.csv is None else None),
            ("--motion", None if motion is None else Path(motion).resolve(), stored_motion),
            ("--start", start, cfg.motion.start_s if cfg.motion.csv is not None else "the task's window"),
            ("--duration", duration, cfg.motion.duration_s if cfg.motion.csv is not None else "the task's window"),
            ("--envs", envs, cfg.env.num_envs),
            ("--horizon", horizon, cfg.shac.horizon),
            ("--kappa", kappa, cfg.sim.kappa),
            ("--seed", seed, cfg.runner.seed),
        ]
        changed = [f"{name} {given} (stored: {stored})" for name, given, stored in fixed if given not in (None, stored)]
        if changed:
            raise BcgdError(f"--resume continues the stored run; {', '.join(changed)} cannot change (use a new run)")
    else:
        if algo not in ("shac", "ppo"):
            raise BcgdError(f"--algo {algo!r}: expected shac or ppo")
        cfg = ppo_defaults(TrainConfig()) if algo == "ppo" else TrainConfig()
        window = None  # (csv, start_s) of a CSV window; None: a task's own clip
        if motion is not None:
            window = (str(motion), 0.0 if start is None else start)
        elif task in TASKS:
            cfg.motion.task = task
            if start is not None or duration is not None:
                window = task_window(task, start)
        elif task is not None:
            window = (library_file(task), 0.0 if start is None else start)
        if window is not None:
            cfg.motion.csv, cfg.motion.start_s = window
            if duration is not None:
                cfg.motion.duration_s = duration
        default_dir = RUNS_DIR / (Path(motion).stem if motion else (task or cfg.motion.task))
        cfg.runner.out_dir = str(out) if out is not None else str(default_dir)  # claimed (or -2, -3...) in train
    if out is not None:
        cfg.runner.out_dir = str(out)
    for value, setter in (
        (envs, lambda v: setattr(cfg.env, "num_envs", v)),
        (iterations, lambda v: setattr(cfg.runner, "iterations", v)),
        (horizon, lambda v: setattr(cfg.ppo if cfg.algo == "ppo" else cfg.shac, _horizon_field(cfg), v)),
        (device, lambda v: setattr(cfg.runner, "device", v)),
        (kappa, lambda v: setattr(cfg.sim, "kappa", v)),
        (seed, lambda v: setattr(cfg.runner, "seed", v)),
        (save_every, lambda v: setattr(cfg.runner, "save_every", v)),
    ):
        if value is not None:
            setter(value)
    for name, value in (bcg or {}).items():
        if value is not None:
            setattr(cfg.bcg, name, value)
    apply_overrides(cfg, overrides)
    given = [BCG_OPTIONS[name] for name, value in (bcg or {}).items() if name != "enabled" and value is not None]
    if cfg.algo == "ppo" and (given or cfg.bcg.enabled):
        raise BcgdError(f"{', '.join(given or ['--bundle'])}: SHAC + BCG, but this run is PPO (--algo ppo)")
    if given and not cfg.bcg.enabled:
        raise BcgdError(f"{', '.join(given)}: options of SHAC + BCG, but this run is plain SHAC; add --bundle")
    if resume is None and envs is None and not any(o.startswith("env.num_envs=") for o in overrides):
        bcg_defaults(cfg)  # SHAC + BCG gets the paper's 64 envs, plain SHAC keeps its 128
        cuda_defaults(cfg)  # a GPU run gets GPU-sized batches unless --envs says otherwise
    cfg.validate()
    if resume is not None:
        if stored_it >= cfg.runner.iterations:
            raise BcgdError(
                f"--resume {resume}: the run is at iteration {stored_it}, so --iterations {cfg.runner.iterations} "
                f"leaves nothing to train; give --iterations above {stored_it} to continue it"
            )
        note = extend_schedule(cfg, stored_it, *stored, lr_schedule) if cfg.algo == "shac" else None
        if note is not None and notes is not None:
            notes.append(note)
    else:
        run_pt = Path(cfg.runner.out_dir) / CHECKPOINT_NAME
        if out is not None and run_pt.exists() and not force:
            raise BcgdError(
                f"--out {cfg.runner.out_dir}: it holds a run ({run_pt}); continue it with --resume {run_pt}, "
                "pick another --out, or overwrite it with --force"
            )
    return cfg


def extend_schedule(
    cfg: TrainConfig, at: int, stored_total: int, actor_lr: float, critic_lr: float, mode: str = "continue"
) -> str | None:
    """Lay the linear learning-rate decay over a resumed run's new total ``cfg.runner.iterations``.

    SHAC's rate at iteration i of a total T is ``lr0 + (lr_min - lr0) * i / T``. A resume to a larger T
    with the stored ``lr0`` would put the rate back up at iteration ``at`` (a restart at a high rate).
    ``continue`` (default) instead sets the start rates ``lr0`` (recorded in the config's
    ``shac.actor_lr``/``critic_lr``) so that the line passes through the stored run's current rate at
    ``at`` and still ends at ``lr_min`` at the new total: the decay goes on from where it was.
    ``stretch`` keeps ``lr0``: the whole decay is re-laid over the new total. Returns a one-line
    description for the user (None when the total is unchanged).
    """
    total, lmin = cfg.runner.iterations, cfg.shac.lr_min
    if total == stored_total:
        return None

    def rate(lr0: float, t: int) -> float:
        return lr0 + (lmin - lr0) * min(at / t, 1.0)

    now = rate(actor_lr, stored_total)
    if mode == "stretch":
        return (
            f"learning rate: the decay is re-laid over {total} iterations: at iteration {at} the actor rate goes "
            f"from {now:.3g} to {rate(cfg.shac.actor_lr, total):.3g}, then decays to {lmin:g}"
        )
    if mode != "continue":
        raise BcgdError(f"--lr-schedule {mode}: expected continue or stretch")
    for name, lr0 in (("actor_lr", actor_lr), ("critic_lr", critic_lr)):
        cur = rate(lr0, stored_total)
        setattr(cfg.shac, name, (cur * total - lmin * at) / (total - at))
    return (
        f"learning rate: the decay continues from the current actor rate {now:.3g} at iteration {at} to "
        f"{lmin:g} at {total} (shac.actor_lr = {cfg.shac.actor_lr:.4g}, critic_lr = {cfg.shac.critic_lr:.4g} "
        "in config.yaml give this line; --lr-schedule stretch re-lays the original decay instead)"
    )


LR_SCHEDULE_HELP = (
    "On --resume to more iterations than the run was planned for: continue = the linear decay goes on from "
    "the run's current rate down to shac.lr_min at the new total (the start rates in config.yaml are set to "
    "give that line); stretch = the original decay re-laid over the new total (the rate jumps back up)."
)


def _horizon_field(cfg: TrainConfig) -> str:
    return "num_steps_per_env" if cfg.algo == "ppo" else "horizon"


@app.command("train")
def train_cmd(
    task: str | None = typer.Argument(
        None, help="run | jump | fight | dance, or a clip registered with `bcgd motions import`.", show_default="dance"
    ),
    motion: Path | None = typer.Option(None, "--motion", help="Train on a LAFAN1-format G1 CSV instead of a task."),
    start: float | None = typer.Option(
        None,
        "--start",
        help="Window start in the CSV (s); with a TASK, in its LAFAN1 file (another window of it).",
        show_default="0; a TASK's chosen window",
    ),
    duration: float | None = typer.Option(None, "--duration", help="Window length in the CSV (s).", show_default="15"),
    envs: int | None = typer.Option(
        None, "--envs", help="Parallel environments.", show_default="128; 64 with --bundle"
    ),
    iterations: int | None = typer.Option(
        None,
        "--iterations",
        help="SHAC iterations (paper 3000; 1200 at 128 envs: about 1.5 h on a 2-core CPU).",
        show_default="1200",
    ),
    horizon: int | None = typer.Option(
        None, "--horizon", help="Differentiable window, control steps.", show_default="32"
    ),
    device: str | None = typer.Option(None, "--device", help="cpu | cuda.", show_default="cpu"),
    kappa: float | None = typer.Option(None, "--kappa", help="Contact stiffness 1/m.", show_default="300"),
    seed: int | None = typer.Option(None, "--seed", help="Random seed.", show_default="0"),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="Run folder (default runs/TASK, or runs/TASK-2, -3, ... when that holds a run or is in use).",
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="Overwrite the run in --out DIR (its files are removed first) instead of refusing; never a run being "
        "written.",
    ),
    save_every: int | None = typer.Option(
        None, "--save-every", help="Write run.pt every K iterations.", show_default="50"
    ),
    keep_every: int | None = typer.Option(
        None,
        "--keep-every",
        help="Also keep run.pt as snapshots/run_<iteration>.pt every K iterations (one schedule, evaluated "
        "along the way; runner.keep_every).",
        show_default="0: none",
    ),
    resume: Path | None = typer.Option(None, "--resume", help="Continue a run from its run.pt."),
    lr_schedule: str = typer.Option("continue", "--lr-schedule", help=LR_SCHEDULE_HELP),
    log_every: int = typer.Option(
        10, "--log-every", help="When the output is not a terminal: one progress line every K iterations."
    ),
    overrides: list[str] = typer.Option([], "--set", help="Override any config field: --set shac.actor_lr=1e-3."),
    bundle: bool | None = typer.Option(
        None,
        "--bundle/--no-bundle",
        help="Bundled Contact Gradients on (SHAC + BCG, at the paper's 64 envs unless --envs) or off (plain SHAC, "
        "128 envs; the default: docs/decisions.md D34).",
        show_default="--no-bundle",
    ),
    branches: int | None = typer.Option(None, "--branches", help="BCG branches B per bundle.", show_default="10"),
    bundle_steps: int | None = typer.Option(
        None, "--bundle-steps", help="BCG bundle length H, control steps.", show_default="2"
    ),
    sigma_p: float | None = typer.Option(
        None, "--sigma-p", help="BCG foot position perturbation std, m.", show_default="0.01"
    ),
    sigma_v: float | None = typer.Option(
        None, "--sigma-v", help="BCG foot velocity perturbation std, m/s.", show_default="0.02"
    ),
    tau: float | None = typer.Option(None, "--tau", help="BCG trigger: per-foot normal force, N.", show_default="400"),
    max_dq: float | None = typer.Option(
        None,
        "--bcg-max-dq",
        help="BCG per-joint clamp of the angle offsets, rad (paper's early table: 0.1).",
        show_default="off",
    ),
    max_dqd: float | None = typer.Option(
        None,
        "--bcg-max-dqd",
        help="BCG per-joint clamp of the rate offsets, rad/s (paper's early table: 0.5).",
        show_default="off",
    ),
    obs: str | None = typer.Option(
        None, "--obs", help="Actor observation profile: paper (default), beyondmimic, beyondmimic_wose, unitree."
    ),
    nproc: int | None = typer.Option(
        None,
        "--nproc",
        help="Data-parallel ranks on this machine (torch.distributed; default one per core, at least "
        f"{MIN_ENVS_PER_RANK} envs each: 2 on a 2-core CPU).",
    ),
    nnodes: int = typer.Option(1, "--nnodes", help="Machines in a multi-machine run (started through torchrun)."),
    node_rank: int = typer.Option(0, "--node-rank", help="This machine's index in a multi-machine run."),
    rdzv_endpoint: str | None = typer.Option(
        None, "--rdzv-endpoint", help="HOST:PORT of node 0 in a multi-machine run (torchrun's rendezvous)."
    ),
    algo: str = typer.Option(
        "shac",
        "--algo",
        help="shac (through the differentiable simulator) or ppo (rsl_rl, forward-only; paper "
        "defaults 4096 envs x 24 steps x 3000 iterations, --horizon = rollout steps; needs bcg-deploy[ppo]).",
    ),
    deterministic: bool = typer.Option(
        False, "--deterministic", help="Deterministic kernels for checks (torch + Warp on CUDA; slower)."
    ),
) -> None:
    """Train a motion-imitation policy (SHAC + ADD) and write run.pt, metrics.jsonl, TensorBoard logs."""
    if motion is None and task is None and resume is None:
        task = "dance"
    if motion is not None and task is not None:
        raise BcgdError("give either TASK or --motion FILE.csv, not both")
    if log_every < 1:
        raise BcgdError(f"--log-every {log_every}: expected a number of iterations >= 1")
    if resume is not None:
        resume, found = find_checkpoint(resume)
        if found:
            err_console.print(f"note: {found}", highlight=False)
    given_bcg = (branches, bundle_steps, sigma_p, sigma_v, tau, max_dq, max_dqd)  # in BCG_OPTIONS' order
    bcg = {"enabled": bundle, **dict(zip(BCG_OPTIONS, given_bcg, strict=True))}
    if obs is not None:
        overrides = [*overrides, f"env.obs_profile={obs}"]
    if keep_every is not None:
        if keep_every < 0:
            raise BcgdError(f"--keep-every {keep_every}: expected a number of iterations >= 0 (0: keep no snapshots)")
        overrides = [*overrides, f"runner.keep_every={keep_every}"]
    notes: list[str] = []
    cfg = build_config(task, motion, start, duration, envs, iterations, horizon, device, kappa, seed, out,
                       save_every, overrides, resume, bcg, algo, force, lr_schedule, notes)  # fmt: skip
    if deterministic:
        cfg.runner.deterministic = True
    from bcg_deploy.training.runner import train

    claim = claim_for_training(cfg.runner.out_dir, out is None and resume is None, resume is not None, force, node_rank)
    if claim is not None:  # this process writes the folder (or starts the ranks that do): held to the end
        cfg.runner.out_dir = str(claim.path)
        for note in claim.notes:
            err_console.print(f"note: {note}", highlight=False, soft_wrap=True)
    run_dir = Path(cfg.runner.out_dir)
    if out is None and "WORLD_SIZE" not in os.environ:  # ranks started from this argv train in the same folder
        sys.argv = [*sys.argv, "--out", cfg.runner.out_dir]
    _stop_signal_interrupts()
    world = _distributed_world(cfg, nproc, nnodes, node_rank, rdzv_endpoint)
    if world is None:  # this process only launched the ranks, which have finished
        return
    _quiet_warp(cfg.runner.device, say=world.is_main)
    if not world.is_main:  # a rank other than 0 trains silently; rank 0 reports
        _run_rank(lambda: train(cfg, resume=resume, world=world), world)
        return
    _header(cfg, resume, notes, world)
    if force and resume is None:
        stale = sorted(str(p) for p in run_dir.glob("*.onnx"))
        if stale:
            err_console.print(f"note: {', '.join(stale)} came from the run being overwritten", highlight=False)
    t0 = time.perf_counter()
    try:
        result = _run(cfg, resume, log_every, world)
    except KeyboardInterrupt:
        err_console.print(f"interrupted: {_kept(run_dir)}", highlight=False)
        raise typer.Exit(130) from None
    _summary(result, cfg, time.perf_counter() - t0)


def _header(cfg: TrainConfig, resume: Path | None, notes: list[str], world) -> None:  # noqa: ANN001 - World
    src = _motion_text(cfg, resume)
    b = cfg.bcg
    bcg_note = f"BCG B {b.num_branches} H {b.horizon} tau {b.tau:g} N" if b.enabled else "plain SHAC (no BCG)"
    if cfg.shac.critic_bf16:
        bcg_note += "  critic regression bf16"
    if cfg.algo == "ppo":
        bcg_note = "PPO (rsl_rl, forward-only simulator)"
    horizon_now = getattr(cfg.ppo if cfg.algo == "ppo" else cfg.shac, _horizon_field(cfg))
    console.print(
        f"[bold]bcgd train[/] {src}  envs {cfg.env.num_envs}  horizon {horizon_now}  "
        f"iterations {cfg.runner.iterations}  kappa {cfg.sim.kappa:g}  device {cfg.runner.device}  "
        f"seed {cfg.runner.seed}  {bcg_note}"
        + (f"  ranks {world.size} x {world.local_envs} envs" if world.distributed else "")
        + f"  -> {cfg.runner.out_dir}"
        + (f"  (resume {resume})" if resume else ""),
        soft_wrap=True,
    )
    for note in notes + _precision_notes(cfg):
        console.print(f"note: {note}", highlight=False, soft_wrap=True)


def _precision_notes(cfg: TrainConfig) -> list[str]:
    """A bf16 critic regression on a device that converts bf16 in software is slower than float32: say so."""
    if not cfg.shac.critic_bf16 or cfg.algo == "ppo":
        return []
    from bcg_deploy.training.device import native_bf16, resolve_device

    if native_bf16(resolve_device(cfg.runner.device)):
        return []
    return [f"shac.critic_bf16 on {cfg.runner.device}, which has no bf16 matrix hardware (AVX512-BF16, AMX or a "
            "CUDA 8.0+ GPU): expect it slower than float32"]  # fmt: skip


def _motion_text(cfg: TrainConfig, resume: Path | None) -> str:
    """The task and where its clip comes from (a LAFAN1 window or the built-in synthetic clip): the two train
    very differently, so the header says which."""
    if cfg.motion.csv is not None:
        return f"{cfg.motion.csv} [{cfg.motion.start_s:g} s, +{cfg.motion.duration_s:g} s]"
    from bcg_deploy.motions.library import motion_source_text, resolve_task, task_source_text

    if resume is not None:
        from bcg_deploy.training.checkpoint import load_checkpoint

        stored = load_checkpoint(resume).get("motion", {})  # validated by the resume point already
        return f"{stored.get('name', cfg.motion.task)} ({motion_source_text(stored)}, from the checkpoint)"

    try:
        return f"{cfg.motion.task} ({task_source_text(resolve_task(cfg.motion.task))})"
    except BcgdError:
        return cfg.motion.task  # the run itself reports the bad name in one line


def _quiet_warp(device: str, say: bool = True) -> None:
    """Initialise Warp before any progress output: its banner off, its CUDA-driver warning (written by the
    native library to the process's stderr) captured and shown as one note only when a GPU was asked for."""
    import tempfile

    import warp as wp

    wp.config.log_level = wp.LOG_WARNING
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as cap:
        os.dup2(cap.fileno(), 2)
        try:
            wp.init()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        cap.seek(0)
        text = cap.read().decode(errors="replace").strip()
    if say and text and (not device.startswith("cpu") or "CUDA" not in text):
        err_console.print(f"note: warp: {' '.join(text.split())}", highlight=False)


def _progress_line(m: dict, total: int, first: dict) -> str:
    it = m["iteration"]
    first.setdefault("t", time.perf_counter() - m.get("time_s", 0.0))
    first.setdefault("it", it - 1)
    done = it - first["it"]
    avg = (time.perf_counter() - first["t"]) / max(done, 1)
    eta = avg * (total - it)
    line = (
        f"{m.get('iterations_per_s', 0.0):.2f} it/s  "
        f"ETA {int(eta // 3600)}:{int(eta % 3600 // 60):02d}:{int(eta % 60):02d}  "
        f"reward {_fmt(m.get('reward'), '.3f')}  track {_fmt(m.get('tracking_error_cm'), '.1f')} cm  "
        f"ep-len {_fmt(m.get('episode_length'), '.0f')}"
    )
    if "bcg_starts" in m:
        line += f"  bundles {m['bcg_starts']} (+{100 * m.get('bcg_row_overhead', 0.0):.0f}% sim rows)"
    return line


def _run(cfg: TrainConfig, resume: Path | None, log_every: int, world):  # noqa: ANN001 - distributed.World
    """Train (rank 0 of ``world``) with a rich bar on a terminal, else one plain line every ``log_every``
    iterations."""
    from bcg_deploy.training.runner import train

    total = cfg.runner.iterations
    first: dict = {}

    def on_event(e: dict) -> None:
        err_console.print(f"[yellow]iteration {e['iteration']}: {e['event']}[/] {e['message']}", highlight=False)

    if not console.is_terminal:

        def on_line(m: dict) -> None:
            line = _progress_line(m, total, first)
            if m["iteration"] % log_every == 0 or m["iteration"] in (total, first["it"] + 1):
                console.print(f"iteration {m['iteration']}/{total}  {line}", highlight=False, soft_wrap=True)

        return _run_rank(lambda: train(cfg, resume=resume, on_iteration=on_line, on_event=on_event, world=world), world)
    progress = Progress(
        TextColumn("[bold]{task.completed}/{task.total}"),
        BarColumn(bar_width=20),
        TextColumn("{task.fields[line]}"),
        console=console,
        transient=False,
    )
    with progress:
        bar = progress.add_task("train", total=total, line="compiling kernels + first window ...")

        def on_bar(m: dict) -> None:
            progress.update(bar, completed=m["iteration"], line=_progress_line(m, total, first))

        return _run_rank(lambda: train(cfg, resume=resume, on_iteration=on_bar, on_event=on_event, world=world), world)


def _summary(result, cfg: TrainConfig, wall: float) -> None:  # noqa: ANN001 - runner.TrainResult
    m = result.metrics
    kinds = {e["event"] for e in result.events}
    stopped = "interrupted" in kinds
    console.print(
        f"{'interrupted' if stopped else 'done'}: iteration {result.iteration}/{cfg.runner.iterations} in "
        f"{wall:.0f} s; reward {_fmt(m.get('reward'), '.3f')}, tracking error "
        f"{_fmt(m.get('tracking_error_cm'), '.1f')} cm, episode length {_fmt(m.get('episode_length'), '.0f')} steps",
        soft_wrap=True,
    )
    d = result.run_dir
    if result.checkpoint is None or not Path(result.checkpoint).exists():
        raise BcgdError(f"no checkpoint written in {d} (see {d / 'events.jsonl'})")
    ck = Path(result.checkpoint)
    if "checkpoint_refused" in kinds:
        console.print(f"[yellow]the model at iteration {result.iteration} was not saved (non-finite): {ck} holds "
                      "an earlier iteration[/]", soft_wrap=True)  # fmt: skip
    files = [("checkpoint", ck), ("metrics", d / "metrics.jsonl"), ("curve", d / "learning_curve.png")]
    shown = [f"{name} {path}" for name, path in files if path.exists()]
    if (d / "tb").is_dir():
        shown.append(f"tensorboard --logdir {d / 'tb'}")
    console.print("  ".join(shown), highlight=False, soft_wrap=True)
    if stopped:
        console.print(f"continue with: bcgd train --resume {ck}", highlight=False, soft_wrap=True)
        signum = next(e.get("signal", 2) for e in result.events if e["event"] == "interrupted")
        raise typer.Exit(128 + int(signum))  # 130 for Ctrl-C, 143 for SIGTERM
    else:
        console.print(f"next: bcgd export {ck}   (then: bcgd sim2sim policy.onnx)", highlight=False, soft_wrap=True)


def _distributed_world(cfg, nproc: int | None, nnodes: int, node_rank: int, rdzv: str | None):  # noqa: ANN001, ANN202
    """This process's ``World`` when it is a rank (started by ``--nproc`` or torchrun), or None after
    launching the ranks itself (``--nproc N`` on this machine, or torchrun for ``--nnodes`` > 1)."""
    import os
    import sys

    from bcg_deploy.training import distributed as dd

    if "WORLD_SIZE" in os.environ:  # a rank: torchrun's (or our launcher's) environment
        return dd.world_from_env(cfg.env.num_envs, cfg.runner.device, cfg.runner.host_reduce)
    if nproc is not None and nproc < 1:
        raise BcgdError(f"--nproc {nproc}: expected at least 1")
    per_node = nproc if nproc is not None else dd.default_nproc(cfg.env.num_envs, cfg.runner.device)
    if cfg.algo == "ppo":
        per_node = 1 if nproc is None else nproc
    argv = _without_launch_options(sys.argv[1:])  # the ranks run the same command, as ranks
    if nnodes > 1:
        if rdzv is None:
            raise BcgdError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (node 0's address)")
        if cfg.env.num_envs // (per_node * nnodes) < 1:
            raise BcgdError(f"env.num_envs {cfg.env.num_envs} cannot be split over {per_node * nnodes} ranks")
        from torch.distributed.run import main as torchrun

        torchrun(
            [f"--nnodes={nnodes}", f"--nproc-per-node={per_node}", f"--node-rank={node_rank}",
             f"--rdzv-endpoint={rdzv}", "--max-restarts=0", "-m", "bcg_deploy.cli", *argv]
        )  # fmt: skip
        return None
    if per_node <= 1:
        return dd.World(env_sizes=[cfg.env.num_envs])
    if cfg.env.num_envs < per_node:
        raise BcgdError(f"--nproc {per_node}: env.num_envs {cfg.env.num_envs} gives a rank no env")
    try:
        code = dd.launch_local(argv, per_node)
    except dd.RankFailed as exc:
        raise BcgdError(f"{exc}; every rank stopped; {_kept(Path(cfg.runner.out_dir))}") from None
    if code != 0:
        raise typer.Exit(code)
    return None


def _kept(run_dir: Path) -> str:
    """What a stopped run leaves: its last checkpoint and how to continue, or nothing."""
    ckpt = run_dir / "run.pt"
    return f"{ckpt} is intact; continue with --resume {ckpt}" if ckpt.exists() else "no run.pt was written yet"


def _stop_signal_interrupts() -> None:
    """In a rank of ``bcgd train --nproc N``, the launcher's stop request before the trainer listens for it
    (set-up, first compile) interrupts, as Ctrl-C does: nothing has been trained to save."""
    import signal

    from bcg_deploy.training.distributed import STOP_SIGNAL, launched_rank

    if launched_rank():
        signal.signal(STOP_SIGNAL, signal.default_int_handler)


def _run_rank(fn, world):  # noqa: ANN001, ANN202
    """Run a rank's training; a lost peer (a collective that failed or timed out) is one line, exit 3."""
    try:
        return fn()
    except RuntimeError as exc:
        if not world.distributed:
            raise
        from bcg_deploy.training.distributed import LOST_PEERS_EXIT, launched_rank

        if not launched_rank():  # under torchrun each rank reports; our launcher reports for all
            msg = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            err_console.print(f"[bold red]error:[/] rank {world.rank}: lost the other ranks ({msg})", highlight=False)
        raise typer.Exit(LOST_PEERS_EXIT) from None
    finally:
        from bcg_deploy.training.distributed import shutdown

        shutdown()


LAUNCH_OPTIONS = ("--nproc", "--nnodes", "--node-rank", "--rdzv-endpoint")


def _without_launch_options(argv: list[str]) -> list[str]:
    """``argv`` without the launch options and their values (torchrun would take them for its own)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in LAUNCH_OPTIONS:
            skip = True
        elif not a.startswith(tuple(f"{o}=" for o in LAUNCH_OPTIONS)):
            out.append(a)
    return out
