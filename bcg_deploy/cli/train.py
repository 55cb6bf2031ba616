"""``bcgd train TASK``: SHAC (+ ADD) imitation training through the differentiable simulator.

Thin: parse options into a ``TrainConfig`` (``--set a.b=v`` for any other field), call
``bcg_deploy.training.runner.train`` once, show rich progress from its per-iteration metrics.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.progress import BarColumn, Progress, TextColumn

from bcg_deploy.cli import app, console, err_console
from bcg_deploy.errors import BcgdError
from bcg_deploy.training.config import TASKS, TrainConfig, apply_overrides, ppo_defaults
from bcg_deploy.training.distributed import MIN_ENVS_PER_RANK


def _fmt(v: float | None, spec: str) -> str:
    if v is None or v != v:  # NaN
        return "-"
    return format(v, spec)


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
) -> TrainConfig:
    """The run's config: defaults (or the resumed run's config) + the options given + ``--set``.

    ``algo`` "ppo" starts from the paper's PPO scale (``config.ppo_defaults``); there ``horizon`` is PPO's
    rollout length (``ppo.num_steps_per_env``). ``bcg`` maps ``BCGCfg`` field names (enabled, num_branches,
    horizon, sigma_p, sigma_v, tau) to the values given on the command line (None = not given); they may
    change on resume.
    """
    if resume is not None:
        from bcg_deploy.training.runner import resume_config

        cfg = resume_config(resume)
        if out is None:
            cfg.runner.out_dir = str(resume.parent)
        stored_motion = None if cfg.motion.csv is None else Path(cfg.motion.csv).resolve()
        fixed = [
            ("TASK", task, cfg.motion.task if cfg.motion.csv is None else None),
            ("--motion", None if motion is None else Path(motion).resolve(), stored_motion),
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
        if motion is not None:
            cfg.motion.csv = str(motion)
            cfg.motion.start_s = 0.0 if start is None else start
            if duration is not None:
                cfg.motion.duration_s = duration
        elif task is not None:
            if task not in TASKS:
                raise BcgdError(f"unknown task {task!r}: expected one of {', '.join(TASKS)} or --motion FILE.csv")
            cfg.motion.task = task
        cfg.runner.out_dir = str(out) if out is not None else f"runs/{Path(motion).stem if motion else cfg.motion.task}"
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
    return cfg.validate()


def _horizon_field(cfg: TrainConfig) -> str:
    return "num_steps_per_env" if cfg.algo == "ppo" else "horizon"


@app.command("train")
def train_cmd(
    task: str | None = typer.Argument(None, help="run | jump | fight | dance (default dance)."),
    motion: Path | None = typer.Option(None, "--motion", help="Train on a LAFAN1-format G1 CSV instead of a task."),
    start: float | None = typer.Option(None, "--start", help="Window start in the CSV (s)."),
    duration: float | None = typer.Option(None, "--duration", help="Window length in the CSV (s, default 15)."),
    envs: int | None = typer.Option(None, "--envs", help="Parallel environments (default 64)."),
    iterations: int | None = typer.Option(
        None, "--iterations", help="SHAC iterations (default 300, ~22 min on a 2-core CPU; paper 3000)."
    ),
    horizon: int | None = typer.Option(None, "--horizon", help="Differentiable window, control steps (default 32)."),
    device: str | None = typer.Option(None, "--device", help="cpu | cuda (default cpu)."),
    kappa: float | None = typer.Option(None, "--kappa", help="Contact stiffness 1/m (default 300)."),
    seed: int | None = typer.Option(None, "--seed", help="Random seed (default 0)."),
    out: Path | None = typer.Option(None, "--out", help="Run directory (default runs/TASK)."),
    save_every: int | None = typer.Option(None, "--save-every", help="Write run.pt every K iterations (default 50)."),
    resume: Path | None = typer.Option(None, "--resume", help="Continue a run from its run.pt."),
    overrides: list[str] = typer.Option([], "--set", help="Override any config field: --set shac.actor_lr=1e-3."),
    bundle: bool | None = typer.Option(
        None, "--bundle/--no-bundle", help="Bundled Contact Gradients on (SHAC + BCG) or off (plain SHAC)."
    ),
    branches: int | None = typer.Option(None, "--branches", help="BCG branches B per bundle (default 10)."),
    bundle_steps: int | None = typer.Option(None, "--bundle-steps", help="BCG bundle length H, control steps (2)."),
    sigma_p: float | None = typer.Option(None, "--sigma-p", help="BCG foot position perturbation std, m (0.01)."),
    sigma_v: float | None = typer.Option(None, "--sigma-v", help="BCG foot velocity perturbation std, m/s (0.02)."),
    tau: float | None = typer.Option(None, "--tau", help="BCG trigger: per-foot normal force above tau, N (400)."),
    obs: str | None = typer.Option(
        None, "--obs", help="Actor observation profile: paper (default), beyondmimic, beyondmimic_wose, unitree."
    ),
    nproc: int | None = typer.Option(
        None,
        "--nproc",
        help="Data-parallel ranks on this machine (torch.distributed; default one per core, at least "
        f"{MIN_ENVS_PER_RANK} envs each: 2 on a 2-core CPU at 64 envs).",
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
    from bcg_deploy.training.runner import train

    if motion is None and task is None and resume is None:
        task = "dance"
    if motion is not None and task is not None:
        raise BcgdError("give either TASK or --motion FILE.csv, not both")
    bcg = {"enabled": bundle, "num_branches": branches, "horizon": bundle_steps, "sigma_p": sigma_p,
           "sigma_v": sigma_v, "tau": tau}  # fmt: skip
    if obs is not None:
        overrides = [*overrides, f"env.obs_profile={obs}"]
    cfg = build_config(task, motion, start, duration, envs, iterations, horizon, device, kappa, seed, out,
                       save_every, overrides, resume, bcg, algo)  # fmt: skip
    if deterministic:
        cfg.runner.deterministic = True
    world = _distributed_world(cfg, nproc, nnodes, node_rank, rdzv_endpoint)
    if world is None:  # this process only launched the ranks, which have finished
        return
    if not world.is_main:  # a rank other than 0 trains silently; rank 0 reports
        _run_rank(lambda: train(cfg, resume=resume, world=world), world)
        return
    src = cfg.motion.csv or cfg.motion.task
    b = cfg.bcg
    bcg_note = f"BCG B {b.num_branches} H {b.horizon} tau {b.tau:g} N" if b.enabled else "plain SHAC (no BCG)"
    if cfg.algo == "ppo":
        bcg_note = "PPO (rsl_rl, forward-only simulator)"
    horizon_now = getattr(cfg.ppo if cfg.algo == "ppo" else cfg.shac, _horizon_field(cfg))
    console.print(
        f"[bold]bcgd train[/] {src}  envs {cfg.env.num_envs}  horizon {horizon_now}  "
        f"iterations {cfg.runner.iterations}  kappa {cfg.sim.kappa:g}  device {cfg.runner.device}  "
        f"seed {cfg.runner.seed}  {bcg_note}"
        + (f"  ranks {world.size} x {world.local_envs} envs" if world.distributed else "")
        + f"  -> {cfg.runner.out_dir}"
        + (f"  (resume {resume})" if resume else "")
    )
    progress = Progress(
        TextColumn("[bold]{task.completed}/{task.total}"),
        BarColumn(bar_width=20),
        TextColumn("{task.fields[line]}"),
        console=console,
        transient=False,
    )
    t0 = time.perf_counter()
    with progress:
        bar = progress.add_task("train", total=cfg.runner.iterations, line="compiling kernels + first window ...")
        first: dict = {}

        def on_iteration(m: dict) -> None:
            it = m["iteration"]
            first.setdefault("t", time.perf_counter() - m["time_s"])
            first.setdefault("it", it - 1)
            done = it - first["it"]
            avg = (time.perf_counter() - first["t"]) / max(done, 1)
            eta = avg * (cfg.runner.iterations - it)
            line = (
                f"{m['iterations_per_s']:.2f} it/s  {m['env_steps_per_s']:.0f} env-steps/s  "
                f"ETA {int(eta // 3600)}:{int(eta % 3600 // 60):02d}:{int(eta % 60):02d}  "
                f"reward {_fmt(m.get('reward'), '.3f')}  track {_fmt(m.get('tracking_error_cm'), '.1f')} cm  "
                f"ep-len {_fmt(m.get('episode_length'), '.0f')}  |grad| {_fmt(m.get('actor_grad_norm'), '.2f')}"
            )
            if "bcg_starts" in m:
                line += f"  bundles {m['bcg_starts']} (+{100 * m.get('bcg_row_overhead', 0.0):.0f}% sim rows)"
            progress.update(bar, completed=it, line=line)

        def on_event(e: dict) -> None:
            err_console.print(f"[yellow]iteration {e['iteration']}: {e['event']}[/] {e['message']}", highlight=False)

        result = _run_rank(
            lambda: train(cfg, resume=resume, on_iteration=on_iteration, on_event=on_event, world=world), world
        )
    m = result.metrics
    wall = time.perf_counter() - t0
    console.print(
        f"done: iteration {result.iteration} in {wall:.0f} s; reward {_fmt(m.get('reward'), '.3f')}, "
        f"tracking error {_fmt(m.get('tracking_error_cm'), '.1f')} cm, episode length "
        f"{_fmt(m.get('episode_length'), '.0f')} steps"
    )
    if result.checkpoint is None:
        raise BcgdError(f"no checkpoint written in {result.run_dir} (see events.jsonl)")
    d = result.run_dir
    console.print(
        f"checkpoint {result.checkpoint}  metrics {d / 'metrics.jsonl'}  curve {d / 'learning_curve.png'}  "
        f"tensorboard --logdir {d / 'tb'}"
    )


def _distributed_world(cfg, nproc: int | None, nnodes: int, node_rank: int, rdzv: str | None):  # noqa: ANN001, ANN202
    """This process's ``World`` when it is a rank (started by ``--nproc`` or torchrun), or None after
    launching the ranks itself (``--nproc N`` on this machine, or torchrun for ``--nnodes`` > 1)."""
    import os
    import sys

    from bcg_deploy.training import distributed as dd

    if "WORLD_SIZE" in os.environ:  # a rank: torchrun's (or our launcher's) environment
        return dd.world_from_env(cfg.env.num_envs, cfg.runner.device)
    if nproc is not None and nproc < 1:
        raise BcgdError(f"--nproc {nproc}: expected at least 1")
    per_node = nproc if nproc is not None else dd.default_nproc(cfg.env.num_envs, cfg.runner.device)
    if cfg.algo == "ppo":
        per_node = 1 if nproc is None else nproc
    argv = sys.argv[1:]
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
        ckpt = Path(cfg.runner.out_dir) / "run.pt"
        kept = f"{ckpt} is intact; continue with --resume {ckpt}" if ckpt.exists() else "no run.pt was written yet"
        raise BcgdError(f"{exc}; every rank stopped; {kept}") from None
    if code != 0:
        raise typer.Exit(code)
    return None


def _run_rank(fn, world):  # noqa: ANN001, ANN202
    """Run a rank's training; a lost peer (a collective that failed or timed out) is one line, exit 3."""
    try:
        return fn()
    except RuntimeError as exc:
        if not world.distributed:
            raise
        import os

        from bcg_deploy.training.distributed import LAUNCHED_ENV, LOST_PEERS_EXIT

        if os.environ.get(LAUNCHED_ENV) != "1":  # under torchrun each rank reports; our launcher reports for all
            msg = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            err_console.print(f"[bold red]error:[/] rank {world.rank}: lost the other ranks ({msg})", highlight=False)
        raise typer.Exit(LOST_PEERS_EXIT) from None
    finally:
        from bcg_deploy.training.distributed import shutdown

        shutdown()
