"""ONNX policy latency: onnxruntime single-input p50/p99 and batch-1024 throughput beside torch eager.

    python bench/onnx_latency.py --checkpoint runs/dance/run.pt [--out bench/results/onnx_latency.json]

Exports the checkpoint (both signatures, the real exporter with its parity check) into a temporary
folder, then times on this machine, same process, same inputs (reference-clip states):
- onnxruntime CPU (graph optimisation ALL, sequential), raw-state and obs signatures, intra-op
  threads 1 and 2, two ways of calling it:
  ``iobinding``: inputs and the ``joint_pos_target`` output bound once (``run_with_iobinding``, how
  sim2sim calls the policy; the time is the session call), and ``run``: ``session.run(["actions",
  "joint_pos_target"], feeds)`` with a dict of numpy arrays (includes onnxruntime's Python-side
  input/output conversion);
- torch eager (1 thread) on the exported modules and on the training path in float32
  (ObservationModule -> RunningNormalizer -> Actor.deterministic).
Single input: batch 1, ``--iters`` timed calls after warm-up, taken round-robin over the cases in
``--rounds`` blocks (so a load change on the shared machine hits every case; the 1-thread and 2-thread
onnxruntime sessions in two separate groups), p50 / p99 in
microseconds. Throughput: batch 1024, samples per second. Also: ONNX node counts (file, and after
onnxruntime's graph optimisation), the export's parity figures, the load average before and after.
Anatomy of the raw signature (same run, 1 thread, I/O binding): the same trained actor and joint-target
head alone, fed the first layer's input and per-step bias (``anatomy.actor_head``); the observation
alone, raw state -> normalised first-layer input and bias (``anatomy.observation``); an Identity graph
(``anatomy.empty_call``: the cost of one call); and 60 chained ``Add`` nodes on a [1, 302] tensor
(``anatomy.per_node_us``: what one small node costs, slope between 1 and 61 nodes); and the observation
timed right after an (untimed) actor call (``anatomy.observation_after_actor``: the actor's 1.29 MB of
weights evict the observation's constants and onnxruntime's state from L2, as in the whole graph).
Prints ``name.metric: value`` lines and writes JSON (with ratios measured in the same run).
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch

from bcg_deploy.export import ExportConfig, export_policy
from bcg_deploy.export.exporter import load_for_export, trace_module
from bcg_deploy.export.graph import RAW_INPUTS, build_policy, build_reference_policy
from bcg_deploy.export.obs_graph import FastRawPolicy
from bcg_deploy.export.parity import clip_states, raw_inputs
from bcg_deploy.fileio import atomic_write_json
from bcg_deploy.observations.paper import ObservationModule
from bcg_deploy.training.networks import Actor
from bcg_deploy.training.normalizer import RunningNormalizer


def _stats(ts: np.ndarray, batch: int) -> dict:
    return {
        "p50_us": float(np.percentile(ts, 50) * 1e6),
        "p99_us": float(np.percentile(ts, 99) * 1e6),
        "mean_us": float(ts.mean() * 1e6),
        "samples_per_s": float(batch / np.median(ts)),
        "calls": int(ts.size),
    }


def _session(model: Path | bytes, threads: int, optimized: Path | None = None) -> ort.InferenceSession:
    """A CPU session (a file or serialized model), ``threads`` intra-op threads, sequential, ORT_ENABLE_ALL."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    if optimized is not None:
        opts.optimized_model_filepath = str(optimized)
    src = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(src, sess_options=opts, providers=["CPUExecutionProvider"])


def _bound(sess: ort.InferenceSession, feeds: dict[str, np.ndarray], all_outputs: bool = False):
    """The session call with inputs and outputs bound once: ``joint_pos_target`` into a numpy buffer (as
    sim2sim does), or with ``all_outputs`` every output to onnxruntime-allocated CPU memory."""
    binding = sess.io_binding()
    for k, v in feeds.items():
        binding.bind_cpu_input(k, v)
    if all_outputs:
        for o in sess.get_outputs():
            binding.bind_output(o.name, "cpu")
    else:
        out = np.zeros((next(iter(feeds.values())).shape[0], 29), np.float32)
        binding.bind_ortvalue_output("joint_pos_target", ort.OrtValue.ortvalue_from_numpy(out))
    return lambda: sess.run_with_iobinding(binding)


class _ObservationPart(torch.nn.Module):
    """The raw graph up to the actor: raw state -> (normalised first-layer input, per-step bias)."""

    def __init__(self, policy: FastRawPolicy) -> None:
        super().__init__()
        self.p = policy

    def forward(self, *x):
        z, bias, _ = self.p.actor_input(dict(zip(RAW_INPUTS[:6], x[:6], strict=True)), x[6])
        return z, bias


class _ActorPart(torch.nn.Module):
    """The raw graph's actor and joint-target head: (first-layer input, bias) -> actions, targets."""

    def __init__(self, policy: FastRawPolicy) -> None:
        super().__init__()
        self.p = policy

    def forward(self, z, bias):
        return self.p.act(z, bias)


def _add_chain(n: int, width: int = 302) -> onnx.ModelProto:
    """``n`` chained Add nodes (+ a constant) on a [B, width] float32 tensor."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, x = [], "x"
    for i in range(n):
        nodes.append(helper.make_node("Add", [x, "c"], [f"y{i}"]))
        x = f"y{i}"
    nodes.append(helper.make_node("Identity", [x], ["out"]))
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "chain", [vi("x", TensorProto.FLOAT, ["B", width])],
                          [vi("out", TensorProto.FLOAT, ["B", width])],
                          [numpy_helper.from_array(np.full(width, 1e-3, np.float32), "c")])  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _anatomy_cases(raw_mod: FastRawPolicy, raw_1: tuple) -> tuple[dict, dict]:
    """(timed callables, node counts) of the raw graph's parts; see the module docstring."""
    names_raw = list(RAW_INPUTS)
    obs_part, actor_part = _ObservationPart(raw_mod).eval(), _ActorPart(raw_mod).eval()
    with torch.no_grad():
        z, bias = obs_part(*raw_1)
    models = {
        "observation": (trace_module(obs_part, raw_1, names_raw, ["z", "bias"]),
                        dict(zip(names_raw, (x.numpy() for x in raw_1), strict=True))),
        "actor_head": (trace_module(actor_part, (z, bias), ["z", "bias"], ["actions", "joint_pos_target"]),
                       {"z": z.numpy(), "bias": bias.numpy()}),
        "empty_call": (_add_chain(0, 29), {"x": np.zeros((1, 29), np.float32)}),
        "add_chain_1": (_add_chain(1), {"x": np.zeros((1, 302), np.float32)}),
        "add_chain_61": (_add_chain(61), {"x": np.zeros((1, 302), np.float32)}),
    }  # fmt: skip
    fns = {f"onnxruntime.anatomy.{k}": _bound(_session(m.SerializeToString(), 1), f, all_outputs=True)
           for k, (m, f) in models.items()}  # fmt: skip
    nodes = {k: sum(n.op_type != "Constant" for n in m.graph.node) for k, (m, _) in models.items()}
    return fns, nodes


def _timed_after(first, timed, iters: int, warmup: int = 100) -> np.ndarray:
    """Times of ``timed()`` each called right after an untimed ``first()`` (what ``first`` leaves in cache)."""
    out = []
    for i in range(warmup + iters):
        first()
        t0 = time.perf_counter()
        timed()
        if i >= warmup:
            out.append(time.perf_counter() - t0)
    return np.asarray(out)


def _round_robin(fns: dict, iters: int, rounds: int, warmup: int = 100) -> dict[str, np.ndarray]:
    """Time every case ``iters`` times in total, in ``rounds`` interleaved blocks."""
    per = max(1, iters // rounds)
    out: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            for _ in range(10):
                fn()
            for _ in range(per):
                t0 = time.perf_counter()
                fn()
                out[name].append(time.perf_counter() - t0)
    return {k: np.asarray(v) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path("bench/results/onnx_latency.json"))
    ap.add_argument("--iters", type=int, default=4000, help="timed single-input calls per case")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--batch-iters", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    ckpt, robot = load_for_export(args.checkpoint)
    tmp = Path(tempfile.mkdtemp(prefix="bcgd_bench_"))
    exported = {}
    for sig in ("raw", "obs"):
        res = export_policy(ExportConfig(checkpoint=args.checkpoint, output=tmp / f"{sig}.onnx", inputs=sig))
        opt = tmp / f"{sig}.optimized.onnx"
        _session(res.path, 1, opt)
        exported[sig] = {
            "path": res.path,
            "obs_dtype": res.obs_dtype,
            "num_nodes": res.num_nodes,
            "num_nodes_runtime": sum(n.op_type != "Constant" for n in onnx.load(str(opt)).graph.node),
            "parity": {
                k: res.parity[k] for k in ("max_abs_err", "max_rel_err", "max_abs_err_vs_torch_float64", "num_inputs")
            },  # fmt: skip
        }
    states = clip_states(ckpt["motion_arrays"])
    n = len(states)
    idx = np.arange(1024) % n
    raw_b = raw_inputs(states.q[idx], states.qd[idx], states.t[idx])
    raw_1 = tuple(x[17:18].clone() for x in raw_b)
    raw_mod = build_policy(ckpt, robot, "raw")
    ref_mod = build_reference_policy(ckpt, robot)
    obs_mod = build_policy(ckpt, robot, "obs")
    om64 = ObservationModule(robot, ckpt["motion_arrays"], dtype=torch.float64)
    with torch.no_grad():
        q64 = torch.cat((raw_b[0], raw_b[1], raw_b[4]), -1).double()
        qd64 = torch.cat((raw_b[2], raw_b[3], raw_b[5]), -1).double()
        obs_b = om64(q64, qd64, raw_b[6]).float()
    obs_in = {"b": (obs_b, raw_b[6]), "1": (obs_b[17:18].clone(), raw_b[6][17:18].clone())}
    names_raw = RAW_INPUTS
    feeds = {
        ("raw", "1"): dict(zip(names_raw, (x.numpy() for x in raw_1), strict=True)),
        ("raw", "b"): dict(zip(names_raw, (x.numpy() for x in raw_b), strict=True)),
        ("obs", "1"): {"obs": obs_in["1"][0].numpy(), "time_step": obs_in["1"][1].numpy()},
        ("obs", "b"): {"obs": obs_in["b"][0].numpy(), "time_step": obs_in["b"][1].numpy()},
    }
    outs = ["actions", "joint_pos_target"]
    single, batch, sessions = {}, {}, {}
    for sig in ("raw", "obs"):
        for threads in (1, 2):
            sess = sessions[(sig, threads)] = _session(exported[sig]["path"], threads)
            f1 = feeds[(sig, "1")]
            single[f"onnxruntime.{sig}.threads{threads}.iobinding"] = _bound(sess, f1)
            single[f"onnxruntime.{sig}.threads{threads}.run"] = lambda s=sess, f=f1: s.run(outs, f)
    om32 = ObservationModule(robot, ckpt["motion_arrays"], dtype=torch.float32)
    norm = RunningNormalizer.from_state_dict(ckpt["obs_normalizer"])
    actor = Actor.from_state_dict(ckpt["actor"]).float().eval()

    def training_path(*x):
        q = torch.cat((x[0], x[1], x[4]), -1)
        qd = torch.cat((x[2], x[3], x[5]), -1)
        return actor.deterministic(norm(om32(q, qd, x[6])))

    eager = {
        "torch_eager.raw_exported_module": (raw_mod, raw_1, raw_b),
        "torch_eager.raw_reference_module": (ref_mod, raw_1, raw_b),
        "torch_eager.obs_module": (obs_mod, obs_in["1"], obs_in["b"]),
        "torch_eager.training_path_float32": (training_path, raw_1, raw_b),
    }
    with torch.no_grad():
        # the 1-thread sessions are timed in one group, each 2-thread session in a group of its own: a
        # 2-thread session's pool thread keeps spinning after its runs and takes the second core from
        # whatever runs next (measured: 1-thread raw p99 130 us alone, ~4100 us interleaved with 2-thread
        # runs; 2-thread raw p50 52 us alone, 64 us interleaved with the other 2-thread session)
        anatomy, anatomy_nodes = _anatomy_cases(raw_mod, raw_1)
        raw_key = "onnxruntime.raw.threads1.iobinding"
        ts = _round_robin(anatomy | {raw_key: single[raw_key]}, args.iters // 2, args.rounds)
        ts = {k: v for k, v in ts.items() if k.startswith("onnxruntime.anatomy.")}
        obs_fn, actor_fn = anatomy["onnxruntime.anatomy.observation"], anatomy["onnxruntime.anatomy.actor_head"]
        ts["onnxruntime.anatomy.observation_after_actor"] = _timed_after(actor_fn, obs_fn, args.iters // 2)
        for tag in (".threads1.", ".raw.threads2.", ".obs.threads2."):
            ts |= _round_robin({k: f for k, f in single.items() if tag in k}, args.iters, args.rounds)
        ts |= _round_robin({k: (lambda f=f, x=x: f(*x)) for k, (f, x, _) in eager.items()},
                           max(300, args.iters // 8), args.rounds, 20)  # fmt: skip
        for sig in ("raw", "obs"):
            for threads in (1, 2):
                s, fb = sessions[(sig, threads)], feeds[(sig, "b")]
                batch[f"onnxruntime.{sig}.threads{threads}"] = _round_robin(
                    {"b": lambda s=s, f=fb: s.run(outs, f)}, args.batch_iters, 3, 3)["b"]  # fmt: skip
        for k, (f, _, xb) in eager.items():
            batch[k] = _round_robin({"b": lambda f=f, x=xb: f(*x)}, args.batch_iters, 3, 3)["b"]
    results: dict[str, dict] = {k: {"single": _stats(v, 1)} for k, v in ts.items()}
    for k, v in batch.items():
        results.setdefault(k, {})["batch1024"] = _stats(v, 1024)
    for k in list(results):
        if k.startswith("onnxruntime.") and not k.startswith("onnxruntime.anatomy."):
            sig = k.split(".")[1]
            results[k]["num_nodes"] = exported[sig]["num_nodes"]
            results[k]["num_nodes_runtime"] = exported[sig]["num_nodes_runtime"]
    r = results
    p50 = {k.split(".")[-1]: r[k]["single"]["p50_us"] for k in r if k.startswith("onnxruntime.anatomy.")}
    anatomy_doc = {
        "p50_us": p50,
        "nodes_in_file": {k: anatomy_nodes[k] for k in ("observation", "actor_head")},
        "per_node_us": (p50["add_chain_61"] - p50["add_chain_1"]) / 60.0,
        "raw_minus_parts_us": r["onnxruntime.raw.threads1.iobinding"]["single"]["p50_us"]
        - (p50["observation"] + p50["actor_head"] - p50["empty_call"]),
        "observation_cold_penalty_us": p50["observation_after_actor"] - p50["observation"],
    }
    ratios = {
        "torch_exported_raw_over_ort_raw_iobinding_p50": r["torch_eager.raw_exported_module"]["single"]["p50_us"]
        / r["onnxruntime.raw.threads1.iobinding"]["single"]["p50_us"],
        "torch_training_path_over_ort_raw_iobinding_p50": r["torch_eager.training_path_float32"]["single"]["p50_us"]
        / r["onnxruntime.raw.threads1.iobinding"]["single"]["p50_us"],
        "ort_raw_batch_throughput_over_torch_exported": r["onnxruntime.raw.threads1"]["batch1024"]["samples_per_s"]
        / r["torch_eager.raw_exported_module"]["batch1024"]["samples_per_s"],
        "ort_obs_batch_throughput_over_torch": r["onnxruntime.obs.threads1"]["batch1024"]["samples_per_s"]
        / r["torch_eager.obs_module"]["batch1024"]["samples_per_s"],
    }
    doc = {
        "checkpoint": str(args.checkpoint),
        "motion": ckpt["motion"].get("name"),
        "num_frames": n,
        "exported": {s: {k: v for k, v in e.items() if k != "path"} for s, e in exported.items()},
        "target_p50_us_single": 50.0,
        "measures": {
            "iobinding": "session.run_with_iobinding, inputs and joint_pos_target bound once (sim2sim's call)",
            "run": "session.run(['actions', 'joint_pos_target'], dict of numpy arrays)",
            "batch1024": "session.run / module call on 1024 clip states",
        },
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
        },
        "versions": {"torch": torch.__version__, "onnxruntime": ort.__version__, "onnx": onnx.__version__},
        "iters": {"single": args.iters, "rounds": args.rounds, "batch": args.batch_iters},
        "results": results,
        "anatomy": anatomy_doc,
        "ratios": ratios,
    }
    for sig, e in exported.items():
        p = e["parity"]
        print(f"export.{sig}.parity_max_abs_err: {p['max_abs_err']:.3g}")
        print(f"export.{sig}.parity_max_rel_err: {p['max_rel_err']:.3g}")
        print(f"export.{sig}.num_nodes: {e['num_nodes']} (runtime {e['num_nodes_runtime']})")
        print(f"export.{sig}.obs_dtype: {e['obs_dtype']}")
    for name, res in results.items():
        if "single" in res:
            print(f"{name}.single.p50_us: {res['single']['p50_us']:.1f}")
            print(f"{name}.single.p99_us: {res['single']['p99_us']:.1f}")
        if "batch1024" in res:
            print(f"{name}.batch1024.samples_per_s: {res['batch1024']['samples_per_s']:.0f}")
    print(f"anatomy.per_node_us: {anatomy_doc['per_node_us']:.3f}")
    print(f"anatomy.raw_minus_parts_us: {anatomy_doc['raw_minus_parts_us']:.1f}")
    print(f"anatomy.observation_cold_penalty_us: {anatomy_doc['observation_cold_penalty_us']:.1f}")
    for k, v in ratios.items():
        print(f"ratio.{k}: {v:.2f}")
    print(f"loadavg before {load_before[0]:.2f} after {os.getloadavg()[0]:.2f}")
    atomic_write_json(args.out, doc)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
