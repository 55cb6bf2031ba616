"""The runs of one evaluation in parallel processes, with progress.

Runs are independent (each draws only from its own seeded streams, ``runner.run_streams``), so a run
computed in a worker process equals the same run computed here, bit for bit: the report of a parallel
evaluation is byte-identical to a serial one. Workers are started with ``spawn`` (no state is inherited
from this process: onnxruntime and MuJoCo start clean) and each builds its own setup once with
``setup.prepare``. Each worker reports its progress (run, control steps done) through a queue.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_mod
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path

from bcg_deploy.sim2sim.runner import simulate_run
from bcg_deploy.sim2sim.setup import prepare

PROGRESS_EVERY = 25
"""Control steps between two progress reports of a run."""

Progress = Callable[[int, int, str], None]
"""progress(control steps done, total control steps, what is going on)."""

_WORKER: dict = {}


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


AUTO_PARALLEL_S = 100.0
"""``jobs=0`` starts worker processes only when the runs could simulate at least this many seconds (runs x
clip length). A worker costs about 1 s to start (imports, ONNX and model set-up) and MuJoCo replays a policy
at 15-50x real time on one core, so shorter evaluations finish sooner in this process alone. Measured on
the shared 2-core machine: 4 runs x 15 s, 2.5 s in parallel against 1.7 s in this process; 10 runs x 15 s
with --noise, 4.5 s against 8.8 s (the report byte-identical)."""


def resolve_jobs(jobs: int, runs: int, sim_s: float = float("inf")) -> int:
    """Cores for ``runs`` runs (this process and jobs - 1 workers), at most one per run: ``jobs``, or for
    0 one per available core when the runs could simulate ``AUTO_PARALLEL_S`` or more (``sim_s``), else 1."""
    if jobs == 0 and sim_s < AUTO_PARALLEL_S:
        return 1
    return max(1, min(jobs if jobs > 0 else available_cores(), runs))


class StepCounter:
    """Control steps done per run -> one ``progress`` call, throttled to every ``PROGRESS_EVERY`` steps."""

    def __init__(self, progress: Progress | None, runs: int, steps_per_run: int) -> None:
        self.progress, self.runs, self.steps_per_run = progress, runs, steps_per_run
        self.done: dict[int, int] = {}
        self.finished = 0
        self.label = ""

    def step(self, run: int, steps: int) -> None:
        self.done[run] = max(self.done.get(run, 0), steps)
        self._emit()

    def finish(self, run: int) -> None:
        self.done[run] = self.steps_per_run  # a run that fell early counts as complete
        self.finished += 1
        self._emit()

    def _emit(self) -> None:
        if self.progress is not None:
            text = f"{self.finished}/{self.runs} runs done" + (f", {self.label}" if self.label else "")
            self.progress(sum(self.done.values()), self.runs * self.steps_per_run, text)


def _init_worker(onnx_path: str | None, cfg, q) -> None:  # noqa: ANN001 - Sim2SimConfig, mp.Queue
    _WORKER.update(setup=prepare(onnx_path, cfg), cfg=cfg, queue=q)


def _work(run: int):  # noqa: ANN202 - RunResult
    q = _WORKER["queue"]

    def report(k: int, m, d) -> None:  # noqa: ANN001 - MuJoCo model and data
        if (k + 1) % PROGRESS_EVERY == 0:
            q.put((run, k + 1))

    return simulate_run(_WORKER["setup"], _WORKER["cfg"], run, on_control_step=report)


def run_all(
    setup,  # noqa: ANN001 - setup.Sim2SimSetup of this process
    onnx_path: str | Path | None,
    cfg,  # noqa: ANN001 - setup.Sim2SimConfig
    local_hook: Callable | None = None,
    progress: Progress | None = None,
    local_label: str = "",
) -> list:
    """Every run of ``cfg.runs``, ordered by index, on ``resolve_jobs(cfg.jobs)`` cores: this process is one
    of them, the others are worker processes. This process runs run 0 first when ``local_hook(run, k, m, d)``
    is given (video, viewer), then takes runs that no worker has started yet (the last ones first), so
    that the workers' start-up time is not lost."""
    counter = StepCounter(progress, cfg.runs, setup.reference.num_frames - 1)
    jobs = resolve_jobs(cfg.jobs, cfg.runs, cfg.runs * (setup.reference.num_frames - 1) / setup.reference.fps)
    first = [0] if local_hook is not None else []
    remote = [r for r in range(cfg.runs) if r not in first] if jobs > 1 else []
    results: dict[int, object] = {}
    ctx = mp.get_context("spawn")
    q = ctx.Queue() if remote else None
    pool = None
    futures: dict[Future, int] = {}

    def here(r: int) -> None:
        counter.label = local_label if r == 0 and local_hook is not None else ""
        hook = local_hook if r == 0 else None
        results[r] = simulate_run(setup, cfg, r, on_control_step=_local_callback(r, hook, counter, q))
        counter.label = ""
        counter.finish(r)

    try:
        if remote:
            args = (None if onnx_path is None else str(onnx_path), cfg, q)
            pool = ProcessPoolExecutor(max_workers=jobs - 1, mp_context=ctx, initializer=_init_worker, initargs=args)
            futures = {pool.submit(_work, r): r for r in remote}
        local = [r for r in range(cfg.runs) if r not in first] if not remote else []
        for r in first + local:  # run 0 first with a hook; every run here when no worker takes any
            here(r)
        for f in sorted(futures, key=futures.get, reverse=True):  # steal what no worker has started
            if f.cancel():
                here(futures.pop(f))
        while futures:
            done, _ = wait(list(futures), timeout=0.2, return_when=FIRST_COMPLETED)
            _drain(q, counter)
            for f in done:
                r = futures.pop(f)
                results[r] = f.result()
                counter.finish(r)
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if q is not None:
            q.close()
    return [results[r] for r in range(cfg.runs)]


def _local_callback(run: int, hook: Callable | None, counter: StepCounter, q) -> Callable:  # noqa: ANN001
    def cb(k: int, m, d) -> None:  # noqa: ANN001 - MuJoCo model and data
        if hook is not None:
            hook(run, k, m, d)
        if (k + 1) % PROGRESS_EVERY == 0:
            counter.step(run, k + 1)
            _drain(q, counter)

    return cb


def _drain(q, counter: StepCounter) -> None:  # noqa: ANN001 - mp.Queue or None
    while q is not None:
        try:
            run, steps = q.get_nowait()
        except queue_mod.Empty:
            return
        if run not in counter.done or counter.done[run] < counter.steps_per_run:
            counter.step(run, steps)
