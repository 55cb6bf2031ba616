"""SHAC training throughput at the paper's config (64 envs, horizon 32): before, one process now, N ranks now.

Measures, in one run and one after the other (each case in its own processes, so that none shares a core
with another case):
- ``before``: the code of a reference commit (default ddbc724, the trainer before the data-parallel and
  single-process speed work), from a git worktree put on ``PYTHONPATH`` (``--before-tree``);
- ``now_1proc``: this tree, one process;
- ``now_<N>ranks``: this tree, N data-parallel ranks on this machine, gradients summed through shared
  memory (``training/parallel/host_reduce.py``; ``bcgd train``'s default on a 2-core CPU);
- ``now_<N>ranks_gloo``: the same with gloo's all-reduce (``runner.host_reduce=false``; skip: ``--no-gloo``).
Each for plain SHAC and SHAC + BCG. An iteration is what ``Trainer.step`` runs: rollout, actor backward and
step, critic updates, normalisers, discriminator. Reported: seconds per iteration, env-steps/s, the
projected wall-clock of 3000 iterations, the time shares (simulator forward and backward inside the plain
transition, the rest of the rollout and backward, critic, normalisers, discriminator), the speed-up over
``before``, the BCG / plain ratio and the scaling efficiency (1-process time / (N x N-rank time)).
Each case also reports its ``floor``: the critic regression's matmul operations per rank and iteration (from
the config: 16 passes x 4 minibatches of the 3-critic ensemble) at this core's matmul rate, measured on the
critic's first-layer shape with every rank measuring at once, plus (plain SHAC) the simulator kernels' measured
time (not measured inside the bundled transition: ``null`` for SHAC + BCG, whose floor is then the critic's
alone). Unless the simulator's kernels or this core's matmuls get faster, no change of the same maths makes an
iteration cheaper than that; ``floor_<N>ranks_over_before`` sets it against the reference commit's iteration (the
issue's target is 1/3), and ``rest_s`` is what is left above it (every other op: the actor, observations, ADD,
the critic's elementwise ops, Adam, the sums).
A section of its own, ``host_syncs`` (skip with ``--no-syncs``; alone with ``--syncs-only``): per tree
(before, now) and variant, the host syncs of one iteration counted by ``training/parallel/syncs.py`` (loaded by path
from THIS tree into each tree's process, so the old code is counted by the same hook): the call sites that
would synchronise on CUDA, traced on the CPU, for the code path a CUDA run takes (``env.fixed_shapes``
on) and for the CPU path; and the process CPU seconds per iteration (one torch thread, Warp's kernels
single-threaded: robust to other jobs on a shared machine), measured untraced in the same process.
Writes ``bench/results/train_throughput.json`` (``_syncs.json`` with ``--syncs-only``) and prints
``name.metric: value`` lines.

    python bench/train_throughput.py [--iterations 4] [--warmup 1] [--ranks 2] [--rounds 3] [--before-tree DIR]
                                     [--set shac.critic_bf16=false ...]   # overrides of this tree's cases

Every case runs ``--rounds`` times, the order of the cases reversed every other round, and reports the median
round (all rounds' seconds per iteration are in the JSON): on a shared machine one pass of each case was seen
to differ by 25 % between two cases of identical code.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
HERE = Path(__file__).resolve()
TREE = HERE.parents[1]


# ---------------------------------------------------------------------------------------------
# one measurement (runs inside the measured tree's interpreter; works with the old and new Trainer)


def _measure(envs: int, horizon: int, iterations: int, warmup: int, bundle: bool, out: str, sets: list[str]) -> None:
    import torch

    torch.set_num_threads(1)
    from bcg_deploy.training.config import TrainConfig, apply_overrides
    from bcg_deploy.training.env.imitation import SimTransition
    from bcg_deploy.training.runner import Trainer

    cfg = apply_overrides(
        TrainConfig(),
        [f"env.num_envs={envs}", f"shac.horizon={horizon}", "runner.tensorboard=false",
         f"runner.out_dir={tempfile.mkdtemp(prefix='bcgd_bench_')}", f"bcg.enabled={bundle}", *sets],
    )  # fmt: skip
    kw = {}
    world = None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from bcg_deploy.training.parallel.distributed import world_from_env

        world = kw["world"] = world_from_env(envs, "cpu")
    t0 = time.perf_counter()
    tr = Trainer(cfg, **kw)
    setup_s = time.perf_counter() - t0
    clock = {"fwd": 0.0, "bwd": 0.0}
    if not bundle:
        tr.env.transition = _timed(SimTransition, tr.env.sim, clock)
    shac, add, env = tr.shac, tr.add, tr.env
    names = ("rollout", "actor_backward_and_step", "critic", "normalizers", "discriminator")
    parts = dict.fromkeys(names, 0.0)
    total = 0.0
    for i in range(warmup + iterations):
        if i == warmup:
            clock.update(fwd=0.0, bwd=0.0)
            parts = dict.fromkeys(names, 0.0)
            total = 0.0
        if world is not None:
            world.barrier()
        shac.set_learning_rate(i, cfg.runner.iterations)
        t = [time.perf_counter()]
        roll = shac.rollout(env)
        t.append(time.perf_counter())
        shac.update_actor(roll.actor_loss)
        roll.actor_loss = roll.actor_loss.detach()
        t.append(time.perf_counter())
        shac.update_critic(roll)
        t.append(time.perf_counter())
        shac.update_normalizers(roll)
        t.append(time.perf_counter())
        add.update(roll.deltas[roll.valid])
        t.append(time.perf_counter())
        for k, a, b in zip(names, t[:-1], t[1:], strict=True):
            parts[k] += b - a
        total += t[-1] - t[0]
    n = iterations
    share = {k: v / total for k, v in parts.items()}
    if not bundle:
        share["sim_forward"] = clock["fwd"] / total
        share["sim_backward"] = clock["bwd"] / total
        share["rollout_other"] = share["rollout"] - share["sim_forward"]
        share["actor_backward_other"] = share["actor_backward_and_step"] - share["sim_backward"]
    r = {
        "seconds_per_iteration": total / n,
        "setup_s": setup_s,
        "iterations_measured": n,
        "share": share,
        "world_size": 1 if world is None else world.size,
        "critic_bf16": bool(getattr(cfg.shac, "critic_bf16", False)),
    }
    r["floor"] = _floor(cfg, roll.obs_norm.shape[-1], envs * horizon, world, share, total / n)
    if world is None or world.is_main:
        Path(out).write_text(json.dumps(r))
    if world is not None:
        from bcg_deploy.training.parallel.distributed import shutdown

        shutdown()


def _critic_flops(obs_dim: int, hidden: tuple[int, ...], num: int, rows: int) -> float:
    """Floating-point operations of one critic-ensemble optimiser step on ``rows`` samples: the matmuls of the
    forward pass, of the weight gradients (the same count) and of the input gradients of every layer but the
    first (the samples need none); a multiply-add counts 2."""
    widths = [obs_dim, *hidden, 1]
    layers = [num * a * b for a, b in zip(widths[:-1], widths[1:], strict=True)]
    return 2.0 * rows * (2 * sum(layers) + sum(layers[1:]))


def _gemm_rate(rows: int, obs_dim: int, cols: int, dtype, world) -> float:  # noqa: ANN001
    """This core's matmul rate (FLOP/s) on the critic's first layer ([rows, O] x [O, cols], forward and weight
    gradient), every rank measuring at once (as in training, all cores busy): the fastest of 15 bursts (the
    machine's noise only slows a burst down, and a floor takes the best rate the core reached)."""
    import torch

    x, w, g = torch.randn(rows, obs_dim), torch.randn(cols, obs_dim), torch.randn(rows, cols)
    x, w, g = x.to(dtype), w.to(dtype), g.to(dtype)
    if world is not None:
        world.barrier()
    bursts = []
    for _ in range(16):
        t0 = time.perf_counter()
        for _ in range(4):
            x @ w.T
            g.T @ x
        bursts.append(time.perf_counter() - t0)
    flops = 4 * 2.0 * 2 * rows * obs_dim * cols
    return flops / min(bursts[1:])


def _floor(cfg, obs_dim: int, samples: int, world, share: dict, seconds: float) -> dict:  # noqa: ANN001
    """A lower bound of the iteration (s) for the same maths on this machine, unless the simulator's kernels or
    the core's matmuls get faster: the critic regression's matmuls at this core's measured matmul rate, plus the
    simulator kernels' measured time (plain SHAC; None where the bundled transition hides it)."""
    import torch

    s = cfg.shac
    ws = 1 if world is None else world.size
    rows = max(1, samples // s.critic_minibatches // ws)  # this rank's part of one minibatch
    hidden, num = tuple(s.critic_hidden), int(getattr(s, "num_critics", 1))
    dtype = torch.bfloat16 if getattr(s, "critic_bf16", False) else torch.float32
    steps = s.critic_iterations * s.critic_minibatches
    flops = steps * _critic_flops(obs_dim, hidden, num, rows)
    rate = _gemm_rate(rows, obs_dim, num * hidden[0], dtype, world)
    out = {"critic_gflop": flops / 1e9, "gemm_gflops": rate / 1e9, "critic_matmul_s": flops / rate}
    sim = share["sim_forward"] + share["sim_backward"] if "sim_forward" in share else None
    out["sim_kernels_s"] = None if sim is None else sim * seconds
    out["seconds"] = out["critic_matmul_s"] + (out["sim_kernels_s"] or 0.0)
    out["rest_s"] = seconds - out["seconds"]
    return out


def _timed(base, sim, clock):  # noqa: ANN001, ANN202
    """``base`` (the plain transition) with its simulator forward and backward timed."""
    import torch

    class _Mark(torch.autograd.Function):
        @staticmethod
        def forward(ctx, start, *xs):  # noqa: ANN001
            ctx.start = start
            return tuple(x.view_as(x) for x in xs)

        @staticmethod
        def backward(ctx, *gs):  # noqa: ANN001
            if ctx.start:
                clock["_b"] = time.perf_counter()
            elif "_b" in clock:
                clock["bwd"] += time.perf_counter() - clock.pop("_b")
            return (None, *gs)

    class Timed(base):
        def __call__(self, q, qd, q_target):  # noqa: ANN001
            if torch.is_grad_enabled() and (q.requires_grad or qd.requires_grad or q_target.requires_grad):
                q, qd, q_target = _Mark.apply(False, q, qd, q_target)
            t0 = time.perf_counter()
            out = super().__call__(q, qd, q_target)
            clock["fwd"] += time.perf_counter() - t0
            if out.q.requires_grad:
                out.q, out.qd = _Mark.apply(True, out.q, out.qd)
            return out

    return Timed(sim)


def _measure_syncs(
    envs: int, horizon: int, iterations: int, warmup: int, bundle: bool, out: str, sets: list[str]
) -> None:
    """Host syncs of one iteration (``SyncCounter`` trace) and CPU seconds per iteration of one tree."""
    import importlib.util

    import torch

    torch.set_num_threads(1)
    where = [TREE / "bcg_deploy" / "training" / sub / "syncs.py" for sub in ("parallel", ".")]  # now, before the split
    spec = importlib.util.spec_from_file_location("bcgd_syncs", next(p for p in where if p.exists()))
    syncs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(syncs)
    from bcg_deploy.training.config import TrainConfig, apply_overrides
    from bcg_deploy.training.runner import Trainer

    cfg = apply_overrides(
        TrainConfig(),
        [f"env.num_envs={envs}", f"shac.horizon={horizon}", "runner.tensorboard=false",
         f"runner.out_dir={tempfile.mkdtemp(prefix='bcgd_syncs_')}", f"bcg.enabled={bundle}", *sets],
    )  # fmt: skip
    tr = Trainer(cfg)
    for _ in range(warmup):
        tr.step()
    cpu = []
    for _ in range(iterations):
        c0 = time.process_time()
        tr.step()
        cpu.append(time.process_time() - c0)
    r = {"cpu_seconds_per_iteration": sum(cpu) / len(cpu), "cpu_seconds": cpu}
    for path, fixed in (("cpu_path", getattr(tr.env, "fixed_shapes", False)), ("cuda_path", True)):
        tr.env.fixed_shapes = fixed  # the CUDA code path (a tree without the attribute ignores it)
        with syncs.SyncCounter("trace") as sc:
            tr.step()
        r[path] = sc.summary(top=12)
    r["syncs_per_iteration"] = r["cuda_path"]["count"]
    Path(out).write_text(json.dumps(r))


def _syncs_section(trees: dict, args, variants: dict) -> dict:  # noqa: ANN001
    """``host_syncs``: for each variant and tree (before, now; one process each), the traced syncs and CPU s."""
    section: dict = {}
    for vname, bundle in variants.items():
        for cname, tree in trees.items():
            out, cmd, env = _child("--_syncs", tree, args, bundle)
            err = out.with_suffix(".err")
            with open(err, "w") as fh:
                code = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=fh).returncode
            if code:
                raise SystemExit(f"sync count in {tree} failed: {err.read_text().strip().splitlines()[-3:]}")
            r = json.loads(out.read_text())
            r["commit"] = _git_rev(tree)
            section.setdefault(vname, {})[cname] = r
            print(f"train_throughput.host_syncs.{vname}.{cname}.syncs_per_iteration: {r['syncs_per_iteration']}")
            print(f"train_throughput.host_syncs.{vname}.{cname}.cpu_path_syncs: {r['cpu_path']['count']}")
            cpu = r["cpu_seconds_per_iteration"]
            print(f"train_throughput.host_syncs.{vname}.{cname}.cpu_seconds_per_iteration: {cpu:.3f}", flush=True)
        v = section[vname]
        if "before" in v:
            v["cpu_seconds_now_over_before"] = (
                v["now"]["cpu_seconds_per_iteration"] / v["before"]["cpu_seconds_per_iteration"]
            )
    if "bcg" in section and "plain" in section:
        section["cpu_bcg_over_plain"] = {
            c: section["bcg"][c]["cpu_seconds_per_iteration"] / section["plain"][c]["cpu_seconds_per_iteration"]
            for c in trees
        }
    return section


# ---------------------------------------------------------------------------------------------
# orchestration


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _child(flag: str, tree: Path, args, bundle: bool) -> tuple[Path, list[str], dict]:  # noqa: ANN001
    """(result path, command, environment) of one measurement process of ``tree`` (``flag``: its kind); the
    ``--set`` overrides go to this tree's cases only, never to the reference commit's (``before``)."""
    out = Path(tempfile.mkdtemp(prefix="bcgd_tt_")) / "r.json"
    cmd = [sys.executable, str(HERE), flag, str(out), "--envs", str(args.envs), "--horizon",
           str(args.horizon), "--iterations", str(args.iterations), "--warmup", str(args.warmup)]  # fmt: skip
    if bundle:
        cmd.append("--_bundle")
    if tree == TREE:
        cmd += [f"--_set={s}" for s in args.set]
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env["PYTHONPATH"] = str(tree)
    return out, cmd, env


def _case(tree: Path, ranks: int, args, bundle: bool, host_reduce: bool = True) -> dict:  # noqa: ANN001
    """One measurement; ``ranks`` > 1 runs that many ranks on this machine, their gradients summed through
    shared memory (LOCAL_WORLD_SIZE set, as ``bcgd train --nproc`` does) or, ``host_reduce`` false, by gloo."""
    out, cmd, env = _child("--_measure", tree, args, bundle)
    procs = []
    if ranks == 1:
        procs.append(
            subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=open(out.with_suffix(".0.err"), "w"))
        )
    else:
        port = str(_port())
        for r in range(ranks):
            e = {**env, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(ranks), "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": port}  # fmt: skip
            if host_reduce:
                e["LOCAL_WORLD_SIZE"] = str(ranks)
            err = open(out.with_suffix(f".{r}.err"), "w")  # noqa: SIM115 - closed with the process
            procs.append(subprocess.Popen(cmd, env=e, stdout=subprocess.DEVNULL, stderr=err))
    codes = [p.wait() for p in procs]
    if any(codes):
        tails = [p.read_text().strip().splitlines()[-3:] for p in sorted(out.parent.glob("*.err"))]
        raise SystemExit(f"measurement in {tree} with {ranks} rank(s) failed: exit codes {codes}: {tails}")
    return json.loads(out.read_text())


def _git_rev(tree: Path) -> str:
    try:
        return subprocess.check_output(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--envs", type=int, default=64)
    ap.add_argument("--horizon", type=int, default=32)
    ap.add_argument("--ranks", type=int, default=2, help="data-parallel ranks of the N-rank case")
    ap.add_argument("--rounds", type=int, default=3, help="measure every case this many times (median reported)")
    ap.add_argument("--before-tree", type=Path, default=None, help="a worktree of the reference commit")
    ap.add_argument("--no-bundle", action="store_true", help="plain SHAC only")
    ap.add_argument("--no-gloo", action="store_true", help="skip the N-rank case with gloo's all-reduce")
    ap.add_argument("--no-syncs", action="store_true", help="skip the host_syncs section")
    ap.add_argument("--syncs-only", action="store_true", help="only the host_syncs section")
    ap.add_argument("--set", nargs="*", default=[], help="config overrides of this tree's cases (not before's)")
    ap.add_argument("--_set", action="append", default=[], help=argparse.SUPPRESS)
    ap.add_argument("--_measure", type=str, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_syncs", type=str, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_bundle", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._measure:
        _measure(args.envs, args.horizon, args.iterations, args.warmup, args._bundle, args._measure, args._set)
        return
    if args._syncs:
        _measure_syncs(args.envs, args.horizon, args.iterations, args.warmup, args._bundle, args._syncs, args._set)
        return
    trees = {"now_1proc": (TREE, 1, True), f"now_{args.ranks}ranks": (TREE, args.ranks, True)}
    if not args.no_gloo:
        trees[f"now_{args.ranks}ranks_gloo"] = (TREE, args.ranks, False)
    if args.before_tree is not None:
        trees = {"before": (args.before_tree, 1, True), **trees}
    variants = {"plain": False} if args.no_bundle else {"plain": False, "bcg": True}
    results: dict = {
        "config": {
            "envs": args.envs,
            "horizon": args.horizon,
            "iterations": args.iterations,
            "rounds": args.rounds,
            "set": args.set,
        }
    }
    if not args.no_syncs:
        sync_trees = {"now": TREE} if args.before_tree is None else {"before": args.before_tree, "now": TREE}
        results["host_syncs"] = _syncs_section(sync_trees, args, variants)
    if args.syncs_only:
        variants = {}
    runs: dict = {}
    for rnd in range(args.rounds):  # every case once per round, the order reversed every other round (drift)
        order = [(v, c) for v in variants for c in trees]
        for vname, cname in order if rnd % 2 == 0 else order[::-1]:
            tree, ranks, host_reduce = trees[cname]
            r = _case(tree, ranks, args, variants[vname], host_reduce)
            runs.setdefault((vname, cname), []).append(r)
            s = r["seconds_per_iteration"]
            print(f"round {rnd + 1}/{args.rounds}: {vname}.{cname}.seconds_per_iteration: {s:.3f}", flush=True)
    for (vname, cname), rs in runs.items():
        secs = [x["seconds_per_iteration"] for x in rs]
        r = sorted(rs, key=lambda x: x["seconds_per_iteration"])[(len(rs) - 1) // 2]  # the median round
        r["seconds_per_iteration_rounds"] = secs
        r["commit"] = _git_rev(trees[cname][0])
        s = r["seconds_per_iteration"]
        r["env_steps_per_s"] = args.envs * args.horizon / s
        r["projected_3000_iterations_min"] = 3000 * s / 60.0
        results.setdefault(vname, {})[cname] = r
        print(f"train_throughput.{vname}.{cname}.seconds_per_iteration: {s:.3f} (rounds {secs})", flush=True)
    for vname in variants:
        v = results[vname]
        one, many = v["now_1proc"]["seconds_per_iteration"], v[f"now_{args.ranks}ranks"]["seconds_per_iteration"]
        v["scaling_efficiency"] = one / (args.ranks * many)
        if "before" in v:
            b = v["before"]["seconds_per_iteration"]
            v[f"floor_{args.ranks}ranks_over_before"] = v[f"now_{args.ranks}ranks"]["floor"]["seconds"] / b
            v["speedup_1proc_vs_before"] = b / one
            v[f"speedup_{args.ranks}ranks_vs_before"] = b / many
            v[f"{args.ranks}ranks_over_before"] = many / b
    if "bcg" in results:
        results["bcg_over_plain"] = {
            c: results["bcg"][c]["seconds_per_iteration"] / results["plain"][c]["seconds_per_iteration"] for c in trees
        }
    results.update(machine=platform.processor() or platform.machine(), cores=os.cpu_count())
    from bcg_deploy.fileio import atomic_write_json

    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / ("train_throughput_syncs.json" if args.syncs_only else "train_throughput.json")
    atomic_write_json(out, results)
    for vname in variants:
        for k, val in results[vname].items():
            if isinstance(val, float):
                print(f"train_throughput.{vname}.{k}: {val:.3f}")
        for cname in trees:
            r = results[vname][cname]
            proj = r["projected_3000_iterations_min"]
            print(f"train_throughput.{vname}.{cname}.projected_3000_iterations_min: {proj:.1f}")
            for k, val in r.get("floor", {}).items():
                shown = "not measured" if val is None else f"{val:.3f}"
                print(f"train_throughput.{vname}.{cname}.floor.{k}: {shown}")
    for c, val in results.get("bcg_over_plain", {}).items():
        print(f"train_throughput.bcg_over_plain.{c}: {val:.3f}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
