"""Two ``bcgd train`` runs started in the same folder at the same moment, N times: is any folder mixed?

Each round starts two tiny trainings with different settings (seed 1 / horizon 4 and seed 2 / horizon 3)
into the same place: the default folder (``runs/dance`` in an empty working folder) or one ``--out DIR``.
Both processes import everything first, then wait for a start file and call the CLI the moment it
appears, so that they reach the run folder within microseconds of each other (a plain start lets the
faster import win by seconds). Then every run folder is checked to hold ONE run:

- ``run.pt`` (its config) and ``config.yaml`` have the same seed and horizon, those of one of the two runs;
- ``metrics.jsonl`` has exactly iterations 1..N, its last reward equal to the one stored in ``run.pt``;
- ``tb/`` holds one TensorBoard event file whose reward steps are 1..N;
- the process that printed ``-> FOLDER`` is the run with those settings;
- no lock or temporary file is left; with ``--out`` the other process was refused with one ``error:`` line.

    python tools/concurrent_train.py --rounds 20 --mode both --work /tmp/concurrent

Prints one line per round and a summary; exit code 1 when any round fails a check.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNS = ({"seed": 1, "horizon": 4}, {"seed": 2, "horizon": 3})

_CHILD = r"""
import sys, time
from pathlib import Path
import bcg_deploy.cli as cli
cli._import_mujoco()
cli._register()
import bcg_deploy.training.runner  # everything a run imports, before the start
go = Path(sys.argv[1])
Path(sys.argv[2]).touch()
while not go.exists():
    time.sleep(0.0002)
sys.argv = ["bcgd", *sys.argv[3:]]
cli.main()
"""


def start_pair(cwd: Path, out: str | None, iterations: int, envs: int, extra: list[str]) -> list[dict]:
    """Start the two runs of ``RUNS`` in ``cwd`` (into ``out``, or the default folder) together; wait for
    both. Returns per run: its settings, exit code, stdout, stderr, and the folder it announced."""
    cwd.mkdir(parents=True, exist_ok=True)
    go = cwd / ".go"
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "BCGD_RUN_DIR_HELD")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("COLUMNS", "200")
    procs = []
    for i, run in enumerate(RUNS):
        args = ["train", "dance", "--iterations", str(iterations), "--envs", str(envs), "--nproc", "1",
                "--horizon", str(run["horizon"]), "--seed", str(run["seed"]), *extra]  # fmt: skip
        if out is not None:
            args += ["--out", out]
        cmd = [sys.executable, "-c", _CHILD, str(go), str(cwd / f".ready{i}"), *args]
        procs.append(subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    deadline = time.monotonic() + 600
    while not all((cwd / f".ready{i}").exists() for i in range(len(RUNS))):
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    go.touch()
    results = []
    for run, p in zip(RUNS, procs, strict=True):
        stdout, stderr = p.communicate(timeout=900)
        folder = None
        for line in stdout.splitlines():
            if line.startswith("bcgd train") and " -> " in line:
                folder = line.rsplit(" -> ", 1)[1].split()[0]
        results.append({**run, "code": p.returncode, "stdout": stdout, "stderr": stderr, "folder": folder})
    for name in (".go", ".ready0", ".ready1"):
        (cwd / name).unlink(missing_ok=True)
    return results


def check_folder(folder: Path, iterations: int) -> tuple[dict | None, list[str]]:
    """The settings of the one run ``folder`` holds, and what is wrong with it (empty: nothing)."""
    import torch
    import yaml

    problems = []
    ck = torch.load(folder / "run.pt", map_location="cpu", weights_only=True)
    cfg_pt = ck["config"]
    cfg_yaml = yaml.safe_load((folder / "config.yaml").read_text())
    got = {"seed": cfg_pt["runner"]["seed"], "horizon": cfg_pt["shac"]["horizon"]}
    if {"seed": cfg_yaml["runner"]["seed"], "horizon": cfg_yaml["shac"]["horizon"]} != got:
        problems.append(f"config.yaml {cfg_yaml['runner']['seed']}/{cfg_yaml['shac']['horizon']} != run.pt {got}")
    if got not in RUNS:
        problems.append(f"run.pt settings {got} are neither run's")
    lines = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines() if x.strip()]
    if [m["iteration"] for m in lines] != list(range(1, iterations + 1)):
        problems.append(f"metrics.jsonl iterations {[m['iteration'] for m in lines]}")
    elif int(ck["iteration"]) != iterations or lines[-1]["reward"] != ck["metrics"].get("reward"):
        problems.append(f"metrics.jsonl last reward {lines[-1]['reward']} != run.pt's {ck['metrics'].get('reward')}")
    events = sorted((folder / "tb").glob("events.out.tfevents.*")) if (folder / "tb").is_dir() else []
    if len(events) != 1:
        problems.append(f"tb/ holds {len(events)} event files")
    else:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        acc = EventAccumulator(str(events[0]))
        acc.Reload()
        steps = [e.step for e in acc.Scalars("reward")] if "reward" in acc.Tags()["scalars"] else []
        if steps != list(range(1, iterations + 1)):
            problems.append(f"tb/ reward steps {steps}")
    stray = [p.name for p in folder.iterdir() if p.name.startswith(".")]
    if stray:
        problems.append(f"left behind: {stray}")
    return got, problems


def check_round(cwd: Path, results: list[dict], mode: str, iterations: int) -> list[str]:
    """Every check of one round (see the module docstring); the problems found."""
    problems = []
    if mode == "out":
        codes = sorted(r["code"] for r in results)
        if codes != [0, 2]:
            problems.append(f"exit codes {codes} (expected one run and one refusal)")
        for r in results:
            if r["code"] == 2:
                errors = [x for x in r["stderr"].splitlines() if x.strip()]
                if len(errors) != 1 or "is being written by another bcgd train" not in errors[0]:
                    problems.append(f"refusal: {r['stderr'][-300:]!r}")
    elif any(r["code"] != 0 for r in results):
        problems.append(f"exit codes {[r['code'] for r in results]}: {[r['stderr'][-300:] for r in results]}")
    runs_root = cwd / "runs"
    folders = sorted(p for p in runs_root.iterdir() if p.is_dir()) if runs_root.is_dir() else []
    expected = 1 if mode == "out" else 2
    if len(folders) != expected:
        problems.append(f"{len(folders)} run folders {[p.name for p in folders]}, expected {expected}")
    for folder in folders:
        got, bad = check_folder(folder, iterations)
        problems += [f"{folder.name}: {b}" for b in bad]
        writer = [r for r in results if r["code"] == 0 and r["folder"] and (cwd / r["folder"]).resolve() == folder]
        if len(writer) != 1 or {"seed": writer[0]["seed"], "horizon": writer[0]["horizon"]} != got:
            problems.append(
                f"{folder.name}: written by {got}, announced by {[(w['seed'], w['folder']) for w in writer]}"
            )
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--mode", choices=("default", "out", "both"), default="both")
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--envs", type=int, default=8)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bcgd-concurrent"))
    args = ap.parse_args()
    modes = ("default", "out") if args.mode == "both" else (args.mode,)
    shutil.rmtree(args.work, ignore_errors=True)
    failed = 0
    t0 = time.perf_counter()
    for mode in modes:
        for i in range(args.rounds):
            cwd = args.work / f"{mode}{i:02d}"
            results = start_pair(cwd, "runs/shared" if mode == "out" else None, args.iterations, args.envs, [])
            problems = check_round(cwd, results, mode, args.iterations)
            failed += bool(problems)
            where = ", ".join(f"seed {r['seed']} -> {r['folder'] or 'refused'} (exit {r['code']})" for r in results)
            verdict = "MIXED/FAILED " + "; ".join(problems) if problems else "ok"
            print(f"{mode:7s} round {i + 1:2d}: {verdict}  [{where}]", flush=True)
    total = args.rounds * len(modes)
    print(f"{total - failed}/{total} rounds ok, {failed} with a mixed folder or a wrong outcome "
          f"({time.perf_counter() - t0:.0f} s)")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
