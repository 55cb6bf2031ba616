"""ONNX policy latency: onnxruntime single-input p50/p99 and batch-1024 throughput beside torch eager.

    python bench/onnx_latency.py --checkpoint runs/dance/run.pt [--out bench/results/onnx_latency.json]

Exports the checkpoint (both signatures) into a temporary folder, then times on this machine, same
process, same inputs (reference-clip states):
- onnxruntime CPU, raw-state signature and obs signature, intra-op threads 1 and 2;
- torch eager on the same traced module (float64 observation + float32 MLP, as in the graph) and on
  the training path in float32 (ObservationModule -> RunningNormalizer -> Actor.deterministic).
Single input: batch 1, ``--iters`` timed calls after warm-up, p50 / p99 in microseconds. Throughput:
batch 1024, samples per second. Prints ``name.metric: value`` lines and writes JSON (with ratios
torch / onnxruntime measured in the same run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from bcg_deploy.export import ExportConfig, export_policy
from bcg_deploy.export.exporter import load_for_export
from bcg_deploy.export.graph import build_policy
from bcg_deploy.export.parity import clip_states, raw_inputs
from bcg_deploy.training.networks import Actor
from bcg_deploy.training.normalizer import RunningNormalizer
from bcg_deploy.training.observations import ObservationModule


def _time(fn, iters: int, warmup: int = 200) -> np.ndarray:
    for _ in range(warmup):
        fn()
    out = np.empty(iters)
    for i in range(iters):
        t0 = time.perf_counter()
        fn()
        out[i] = time.perf_counter() - t0
    return out


def _stats(ts: np.ndarray, batch: int) -> dict:
    return {
        "p50_us": float(np.percentile(ts, 50) * 1e6),
        "p99_us": float(np.percentile(ts, 99) * 1e6),
        "mean_us": float(ts.mean() * 1e6),
        "samples_per_s": float(batch / np.median(ts)),
    }


def _session(path: Path, threads: int) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path("bench/results/onnx_latency.json"))
    ap.add_argument("--iters", type=int, default=3000)
    ap.add_argument("--batch-iters", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(1)
    ckpt, robot = load_for_export(args.checkpoint)
    tmp = Path(tempfile.mkdtemp(prefix="bcgd_bench_"))
    paths = {}
    for sig in ("raw", "obs"):
        res = export_policy(ExportConfig(checkpoint=args.checkpoint, output=tmp / f"{sig}.onnx", inputs=sig))
        paths[sig] = (res.path, res.num_nodes, res.parity["max_abs_err"])
    states = clip_states(ckpt["motion_arrays"])
    n = len(states)
    idx = np.arange(1024) % n
    raw_b = raw_inputs(states.q[idx], states.qd[idx], states.t[idx])
    raw_1 = tuple(x[:1] for x in raw_b)
    raw_mod = build_policy(ckpt, robot, "raw")
    obs_mod = build_policy(ckpt, robot, "obs")
    with torch.no_grad():
        q64 = torch.cat((raw_b[0], raw_b[1], raw_b[4]), -1).double()
        qd64 = torch.cat((raw_b[2], raw_b[3], raw_b[5]), -1).double()
        obs_b = raw_mod.obs_module(q64, qd64, raw_b[6]).float()
    obs_in = {"b": (obs_b, raw_b[6]), "1": (obs_b[:1], raw_b[6][:1])}
    names_raw = ("base_pos", "base_quat", "base_lin_vel", "base_ang_vel", "joint_pos", "joint_vel", "time_step")
    feeds = {
        ("raw", "1"): dict(zip(names_raw, (x.numpy() for x in raw_1), strict=True)),
        ("raw", "b"): dict(zip(names_raw, (x.numpy() for x in raw_b), strict=True)),
        ("obs", "1"): {"obs": obs_in["1"][0].numpy(), "time_step": obs_in["1"][1].numpy()},
        ("obs", "b"): {"obs": obs_in["b"][0].numpy(), "time_step": obs_in["b"][1].numpy()},
    }
    results: dict[str, dict] = {}
    for sig in ("raw", "obs"):
        for threads in (1, 2):
            sess = _session(paths[sig][0], threads)
            one = _time(lambda s=sess, f=feeds[(sig, "1")]: s.run(["actions", "joint_pos_target"], f), args.iters)
            many = _time(lambda s=sess, f=feeds[(sig, "b")]: s.run(["actions", "joint_pos_target"], f),
                         args.batch_iters, 3)  # fmt: skip
            results[f"onnxruntime.{sig}.threads{threads}"] = {
                "single": _stats(one, 1), "batch1024": _stats(many, 1024), "num_nodes": paths[sig][1]
            }  # fmt: skip
    # torch eager: the traced modules, and the training path in float32
    om32 = ObservationModule(robot, ckpt["motion_arrays"], dtype=torch.float32)
    norm = RunningNormalizer.from_state_dict(ckpt["obs_normalizer"])
    actor = Actor.from_state_dict(ckpt["actor"]).float().eval()

    def training_path(x):
        q = torch.cat((x[0], x[1], x[4]), -1)
        qd = torch.cat((x[2], x[3], x[5]), -1)
        return actor.deterministic(norm(om32(q, qd, x[6])))

    with torch.no_grad():
        for name, fn, x1, xb in (
            ("torch_eager.raw_module", raw_mod, raw_1, raw_b),
            ("torch_eager.obs_module", obs_mod, obs_in["1"], obs_in["b"]),
            ("torch_eager.training_path_float32", training_path, raw_1, raw_b),
        ):
            one = _time(lambda f=fn, x=x1: f(*x) if f is not training_path else f(x), max(300, args.iters // 5), 50)
            many = _time(lambda f=fn, x=xb: f(*x) if f is not training_path else f(x), args.batch_iters, 3)
            results[name] = {"single": _stats(one, 1), "batch1024": _stats(many, 1024)}
    ratios = {
        "torch_raw_module_over_ort_raw_p50": results["torch_eager.raw_module"]["single"]["p50_us"]
        / results["onnxruntime.raw.threads1"]["single"]["p50_us"],
        "torch_training_path_over_ort_raw_p50": results["torch_eager.training_path_float32"]["single"]["p50_us"]
        / results["onnxruntime.raw.threads1"]["single"]["p50_us"],
        "ort_raw_batch_throughput_over_torch": results["onnxruntime.raw.threads1"]["batch1024"]["samples_per_s"]
        / results["torch_eager.raw_module"]["batch1024"]["samples_per_s"],
    }
    doc = {
        "checkpoint": str(args.checkpoint),
        "motion": ckpt["motion"].get("name"),
        "num_frames": n,
        "parity_max_abs_err": {s: paths[s][2] for s in paths},
        "target_p50_us_single": 50.0,
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "loadavg_1m": os.getloadavg()[0],
        },
        "versions": {"torch": torch.__version__, "onnxruntime": ort.__version__},
        "iters": {"single": args.iters, "batch": args.batch_iters},
        "results": results,
        "ratios": ratios,
    }
    for name, r in results.items():
        print(f"{name}.single.p50_us: {r['single']['p50_us']:.1f}")
        print(f"{name}.single.p99_us: {r['single']['p99_us']:.1f}")
        print(f"{name}.batch1024.samples_per_s: {r['batch1024']['samples_per_s']:.0f}")
    for k, v in ratios.items():
        print(f"ratio.{k}: {v:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.out.with_name(f".{args.out.name}.tmp")
    tmp_out.write_text(json.dumps(doc, indent=2))
    os.replace(tmp_out, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
