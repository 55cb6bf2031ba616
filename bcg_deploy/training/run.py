"""A training run from Python: what ``bcgd train`` does, without the command line.

    from bcg_deploy.training.run import plan_run, train

    cfg = plan_run("dance", iterations=2, envs=8, horizon=4, out="runs/notebook")  # checked TrainConfig
    result = train(cfg)                                  # SHAC (+ ADD) through the simulator, run.pt
    print(result.checkpoint, result.metrics["tracking_error_cm"])

    cfg = plan_run(resume=result.checkpoint, iterations=4)  # continue it to 4 iterations
    train(cfg, resume=result.checkpoint)

``plan_run`` turns the command's options (task or clip, sizes, ``overrides`` as ``"a.b=v"``, resume) into a
checked ``TrainConfig``: resume rules, default run folder, per-method defaults, the learning-rate
continuation of a longer resume (``extend_schedule``). ``claim_run_folder`` makes this process the one writer
of the run folder (``bcg_deploy.rundir``: an flock held to the end; the default ``runs/TASK`` moves on to the
first free ``runs/TASK-N``); ``bcgd train`` claims before it starts the ranks, which inherit the claim.
``train`` trains in this process (or as one rank: ``world``), claiming the folder itself for the run when
nobody has (a folder that holds a run is then refused: ``claim_run_folder(cfg, force=True)`` first replaces
it); ``bcgd train --nproc N`` starts the ranks with ``parallel.launch``. ``motion_text`` and
``precision_notes`` describe a planned run for a header.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bcg_deploy.errors import BcgdError
from bcg_deploy.motions.library import (
    motion_source_text,
    read_library,
    registered_file,
    resolve_task,
    task_source_text,
)
from bcg_deploy.motions.motion import Motion
from bcg_deploy.rundir import RunClaim, claim_for_training
from bcg_deploy.training import device as dev
from bcg_deploy.training.checkpoint import load_checkpoint
from bcg_deploy.training.config import (
    TASKS,
    TrainConfig,
    apply_overrides,
    bcg_defaults,
    cuda_defaults,
    ppo_defaults,
)
from bcg_deploy.training.parallel.distributed import World
from bcg_deploy.training.run_files import CHECKPOINT_NAME, RUNS_DIR, SNAPSHOT_DIR, resume_point

if TYPE_CHECKING:
    from bcg_deploy.training.runner import TrainResult


def library_file(name: str) -> str:
    """The path of the LAFAN1 file registered as ``name`` (``bcgd motions import``), or a one-line error."""
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


def plan_run(
    task: str | None = None,
    motion: str | Path | None = None,
    start: float | None = None,
    duration: float | None = None,
    envs: int | None = None,
    iterations: int | None = None,
    horizon: int | None = None,
    device: str | None = None,
    kappa: float | None = None,
    seed: int | None = None,
    out: str | Path | None = None,
    save_every: int | None = None,
    overrides: Sequence[str] = (),
    resume: str | Path | None = None,
    bcg: dict | None = None,
    algo: str = "shac",
    force: bool = False,
    lr_schedule: str = "continue",
    notes: list[str] | None = None,
    *,
    obs: str | None = None,
    keep_every: int | None = None,
    deterministic: bool = False,
) -> TrainConfig:
    """The config of a run, checked: what ``bcgd train`` trains with the same options (None = not given).

    Starts from the defaults (``algo`` "ppo": the paper's PPO scale, ``config.ppo_defaults``; there
    ``horizon`` is PPO's rollout length) or, with ``resume`` (a run.pt), from the stored config, whose task,
    clip window, envs, horizon, kappa and seed cannot change; then the arguments given, then ``overrides``
    (``"a.b=v"`` strings, ``--set``). ``task``: run | jump | fight | dance or a clip registered with
    ``bcgd motions import``; ``motion``: a LAFAN1-format CSV instead (window ``start``, ``duration`` s).
    ``out``: the run folder (default ``runs/TASK``: ``claim_run_folder(cfg, auto=True)`` moves on to the first
    free ``runs/TASK-N``; on resume the checkpoint's folder); an ``out`` holding a run is refused unless
    ``force``. ``bcg`` maps ``BCGCfg`` field
    names (enabled, num_branches, horizon, sigma_p, sigma_v, tau, max_dq, max_dqd) to values; they may change
    on resume. ``obs``: the actor's observation profile; ``keep_every``: snapshot period (iterations, 0:
    none); ``deterministic``: deterministic kernels. A resume to more iterations continues the learning-rate
    decay (``lr_schedule``, see ``extend_schedule``). Lines worth telling the user are appended to ``notes``.
    Raises ``BcgdError`` (one line) for anything that cannot run.
    """
    if motion is not None and task is not None:
        raise BcgdError("give either TASK or --motion FILE.csv, not both")
    overrides = list(overrides)
    if obs is not None:
        overrides.append(f"env.obs_profile={obs}")
    if keep_every is not None:
        if keep_every < 0:
            raise BcgdError(f"--keep-every {keep_every}: expected a number of iterations >= 0 (0: keep no snapshots)")
        overrides.append(f"runner.keep_every={keep_every}")
    resume = None if resume is None else Path(resume)
    if resume is not None:
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
        cfg.runner.out_dir = str(out) if out is not None else str(default_dir)  # or -2, -3...: claim_run_folder
    if out is not None:
        cfg.runner.out_dir = str(out)
    for value, setter in (
        (envs, lambda v: setattr(cfg.env, "num_envs", v)),
        (iterations, lambda v: setattr(cfg.runner, "iterations", v)),
        (horizon, lambda v: setattr(cfg.ppo if cfg.algo == "ppo" else cfg.shac, horizon_field(cfg), v)),
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
    if deterministic:
        cfg.runner.deterministic = True
    run_dir = Path(cfg.runner.out_dir)
    stale = sorted(str(p) for p in run_dir.glob("*.onnx")) if force and resume is None else []
    if stale and notes is not None:
        notes.append(f"{', '.join(stale)} came from the run being overwritten")
    return cfg


def claim_run_folder(
    cfg: TrainConfig, *, auto: bool = False, resume: bool = False, force: bool = False, node_rank: int = 0
) -> RunClaim | None:
    """Make this process the one writer of ``cfg.runner.out_dir`` (``bcg_deploy.rundir``); the claim (its
    ``notes``: a folder taken instead of one in use, an earlier run's files removed) is held until its
    ``release()`` or the end of the process, and a folder another process holds is a one-line error.

    ``auto``: the folder is ``plan_run``'s default: the first of it, ``-2``, ``-3``, ... that is free (empty
    and unlocked) is claimed and ``cfg.runner.out_dir`` set to it. ``resume``: the folder's run is continued
    (else a folder holding a run is refused unless ``force``, which removes its run's files first).
    ``node_rank``: this machine's index in a multi-machine run (machine 0's launcher claims). None in a
    process that does not write the folder: a rank whose launcher holds it, a rank other than 0, or this
    process when it already holds it.
    """
    claim = claim_for_training(cfg.runner.out_dir, auto, resume, force, node_rank)
    if claim is not None:
        cfg.runner.out_dir = str(claim.path)
    return claim


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


def horizon_field(cfg: TrainConfig) -> str:
    """The config field that holds the run's window length: SHAC's horizon or PPO's rollout steps."""
    return "num_steps_per_env" if cfg.algo == "ppo" else "horizon"


def precision_notes(cfg: TrainConfig) -> list[str]:
    """A bf16 critic regression on a device that converts bf16 in software is slower than float32: say so."""
    if not cfg.shac.critic_bf16 or cfg.algo == "ppo":
        return []
    if dev.native_bf16(dev.resolve_device(cfg.runner.device)):
        return []
    return [f"shac.critic_bf16 on {cfg.runner.device}, which has no bf16 matrix hardware (AVX512-BF16, AMX or a "
            "CUDA 8.0+ GPU): expect it slower than float32"]  # fmt: skip


def motion_text(cfg: TrainConfig, resume: Path | None = None) -> str:
    """The task and where its clip comes from (a LAFAN1 window or the built-in synthetic clip): the two train
    very differently, so the header says which."""
    if cfg.motion.csv is not None:
        return f"{cfg.motion.csv} [{cfg.motion.start_s:g} s, +{cfg.motion.duration_s:g} s]"
    if resume is not None:
        stored = load_checkpoint(resume).get("motion", {})  # validated by the resume point already
        return f"{stored.get('name', cfg.motion.task)} ({motion_source_text(stored)}, from the checkpoint)"

    try:
        return f"{cfg.motion.task} ({task_source_text(resolve_task(cfg.motion.task))})"
    except BcgdError:
        return cfg.motion.task  # the run itself reports the bad name in one line


def train(
    cfg: TrainConfig,
    resume: Path | None = None,
    on_iteration: Callable[[dict], None] | None = None,
    on_event: Callable[[dict], None] | None = None,
    motion: Motion | None = None,
    sim: Any = None,
    world: World | None = None,
) -> TrainResult:
    """Train (or resume from ``resume``, a run.pt) a policy with ``cfg`` (from ``plan_run``); returns where it
    ended (``TrainResult``: run folder, checkpoint, iteration, last metrics, events). SHAC (+ BCG) runs
    ``runner.Trainer``; ``cfg.algo == "ppo"`` runs ``ppo.train_ppo``. ``on_iteration(metrics)`` and
    ``on_event(event)`` are called on rank 0 after every iteration and event; ``motion``/``sim`` replace the
    config's clip and simulator (tests); ``world``: this process's place in a data-parallel run
    (``parallel.distributed.world_from_env``), default one process."""
    from bcg_deploy.training.runner import Trainer  # loads Warp and the simulator: not for planning a run

    if cfg.algo == "ppo":
        if world is not None and world.distributed:
            raise BcgdError("--algo ppo runs in one process (use --nproc 1)")
        if resume is not None:
            raise BcgdError("--resume is not available for --algo ppo runs yet (start a new run)")
        from bcg_deploy.training.ppo import train_ppo  # the optional extra rsl_rl, only for --algo ppo

        with _claimed(cfg, resume):
            return train_ppo(cfg, on_iteration=on_iteration, on_event=on_event, motion=motion, sim=sim)
    with _claimed(cfg, resume):
        trainer = Trainer(
            cfg, resume=resume, motion=motion, sim=sim, on_iteration=on_iteration, on_event=on_event, world=world
        )
        trainer.world.barrier()  # set-up (kernel compilation) takes the ranks different times
        return trainer.run()


@contextlib.contextmanager
def _claimed(cfg: TrainConfig, resume: Path | None) -> Iterator[None]:
    """The run folder claimed for one ``train`` call when nobody holds it yet (a caller from Python), and
    released after it; a folder the caller (``bcgd train``) or the ranks' launcher holds stays theirs."""
    claim = claim_run_folder(cfg, resume=resume is not None)
    try:
        yield
    finally:
        if claim is not None:
            claim.release()
