"""``inspect_policy``: what an exported ONNX holds, and a re-run of its parity check.

First the content hash (``bcg_deploy.integrity``): a file changed since its export is a one-line error, not
a report (a parity re-run cannot see a changed weight: without the checkpoint it checks onnxruntime against
itself).

Parity re-run, decided by what is available:
- with the checkpoint (``checkpoint=``): the checkpoint must be the one the metadata names (robot and
  model hash, motion identity and length, observation layout); the torch policy is rebuilt from it and
  compared with onnxruntime on fresh parity inputs (clip frames, noisy states, MuJoCo rollout) exactly
  as at export time (the raw signature's observation precision, float32 or the exporter's float64
  fallback, is read from the graph: float64 tensors present or not). Pass: max abs error <= the stored
  tolerance (1e-5).
- without it (no torch reference exists): the stored parity record is reported, and onnxruntime is
  checked for self-consistency on inputs built from the graph's own baked reference clip (plus noise):
  batch vs one-by-one evaluation, two identical runs, finite outputs. Pass: batch-vs-single error
  <= the tolerance, bit-identical repeats, all finite.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch

from bcg_deploy.errors import BcgdError
from bcg_deploy.export.exporter import PARITY_TOL, check_parity, feed_chunks, load_for_export, parity_inputs, session
from bcg_deploy.export.graph import OBS_INPUTS, RAW_INPUTS, Signature, build_policy, output_names
from bcg_deploy.export.parity import compare
from bcg_deploy.integrity import check_integrity, recorded_hash

_TYPES = {1: "float32", 7: "int64", 11: "float64"}


def _load(path: Path) -> tuple[onnx.ModelProto, bytes]:
    if not path.is_file():
        raise BcgdError(f"policy {path} not found" if not path.exists() else f"policy {path} is not a file")
    try:
        data = path.read_bytes()
        return onnx.load_from_string(data), data
    except OSError as exc:
        raise BcgdError(f"cannot read policy {path}: {exc.strerror or exc}") from None
    except Exception as exc:  # protobuf DecodeError and friends
        first = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise BcgdError(f"policy {path} is not an ONNX model ({first})") from None


def _io(values) -> list[dict[str, Any]]:
    out = []
    for v in values:
        t = v.type.tensor_type
        dims = [d.dim_param if d.dim_param else int(d.dim_value) for d in t.shape.dim]
        out.append({"name": v.name, "shape": dims, "dtype": _TYPES.get(t.elem_type, str(t.elem_type))})
    return out


def _signature(inputs: list[dict]) -> Signature | None:
    names = tuple(i["name"] for i in inputs)
    return "raw" if names == RAW_INPUTS else "obs" if names == OBS_INPUTS else None


def _json(meta: dict[str, str], key: str) -> Any:
    try:
        return json.loads(meta[key]) if key in meta else None
    except json.JSONDecodeError:
        return None


def inspect_policy(path: str | Path, checkpoint: str | Path | None = None, samples: int = 1000, seed: int = 1) -> dict:
    """Inputs, outputs, metadata and a parity re-run (see the module docstring)."""
    path = Path(path)
    model, data = _load(path)
    note = check_integrity(model, f"policy {path}")  # a policy changed after export: refused here
    inputs, outputs = _io(model.graph.input), _io(model.graph.output)
    meta = {p.key: p.value for p in model.metadata_props}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    sig = _signature(inputs)
    report: dict[str, Any] = {
        "path": str(path),
        "size_bytes": len(data),
        "opset": opset,
        "num_nodes": len(model.graph.node),
        "signature": sig,
        "inputs": inputs,
        "outputs": outputs,
        "metadata": meta,
        "integrity": note or f"content hash {recorded_hash(model)[:12]} matches (the file is as exported)",
        "stored_parity": _json(meta, "bcgd.parity"),
    }
    if sig is None:
        report["parity_rerun"] = {"mode": "none", "passed": False, "reason": "not a bcgd graph signature"}
        return report
    profile = _json(meta, "bcgd.profile")
    if profile not in (None, "paper"):  # a deploy stack's static batch-1 graph: the stored record stands
        stored = report["stored_parity"] or {}
        ok = float(stored.get("max_abs_err", float("inf"))) <= float(stored.get("tolerance", PARITY_TOL))
        reason = f"{profile} profile (static batch-1 deploy graph): no re-run; the stored export parity is shown"
        report["parity_rerun"] = {"mode": "none", "passed": ok, "reason": reason}
        return report
    try:
        sess = session(data)
    except Exception as exc:  # onnxruntime's own exception types
        raise BcgdError(f"onnxruntime cannot load {path}: {str(exc).splitlines()[0][:160]}") from None
    stored = report["stored_parity"] or {}
    tol = float(stored.get("tolerance", PARITY_TOL))
    if checkpoint is not None:
        dt = torch.float64 if _computes_float64(model) else torch.float32
        report["parity_rerun"] = _rerun_with_checkpoint(sess, meta, sig, Path(checkpoint), samples, seed, tol, dt)
    else:
        report["parity_rerun"] = _self_consistency(sess, meta, sig, samples, seed, tol)
    return report


def _computes_float64(model: onnx.ModelProto) -> bool:
    """Whether the graph holds float64 tensors (the exporter's float64-observation fallback)."""
    if any(init.data_type == onnx.TensorProto.DOUBLE for init in model.graph.initializer):
        return True
    for node in model.graph.node:
        for a in node.attribute:
            if (node.op_type == "Cast" and a.name == "to" and a.i == onnx.TensorProto.DOUBLE) or (
                a.type == onnx.AttributeProto.TENSOR and a.t.data_type == onnx.TensorProto.DOUBLE
            ):
                return True
    return False


def _rerun_with_checkpoint(
    sess, meta: dict, sig: Signature, ckpt_path: Path, samples: int, seed: int, tol: float, obs_dtype: torch.dtype
):
    ckpt, robot = load_for_export(ckpt_path)
    checks = {
        "bcgd.robot": (_json(meta, "bcgd.robot") or {}).get("model_hash") == ckpt["robot"]["model_hash"],
        "bcgd.motion": {k: v for k, v in (_json(meta, "bcgd.motion") or {}).items()} == dict(ckpt["motion"]),
        "bcgd.observation": _json(meta, "bcgd.observation") == ckpt["observation"],
    }
    bad = [k for k, ok in checks.items() if not ok]
    if bad:
        raise BcgdError(
            f"checkpoint {ckpt_path} is not the one this policy was exported from ({', '.join(bad)} differ)"
        )
    module = build_policy(ckpt, robot, sig, obs_dtype)
    raw_module = module if sig == "raw" else build_policy(ckpt, robot, "raw")
    states = parity_inputs(ckpt, robot, raw_module, samples, 100, seed)
    res = check_parity(sess, module, sig, feed_chunks(sig, module, states, seed))
    res |= {"mode": "checkpoint", "checkpoint": str(ckpt_path), "tolerance": tol, "sources": states.sources}
    res["passed"] = bool(res["max_abs_err"] <= tol)
    return res


def _self_consistency(sess, meta: dict, sig: Signature, samples: int, seed: int, tol: float) -> dict:
    rng = np.random.default_rng(seed)
    motion = _json(meta, "bcgd.motion") or {}
    n_frames = int(motion.get("num_frames", 100))
    names_out = output_names(sig)
    shapes = {i.name: i.shape for i in sess.get_inputs()}
    obs_dim = int(shapes["obs"][1]) if sig == "obs" else 0
    nj = int(shapes["joint_pos"][1]) if sig == "raw" else 29
    t = np.arange(n_frames, dtype=np.float32)[:, None]
    if sig == "raw":
        probe = {n: np.zeros((n_frames, int(shapes[n][1])), np.float32) for n in RAW_INPUTS}
        probe["base_quat"][:, 0] = 1.0
        probe["time_step"] = t
        ref = dict(zip(names_out, sess.run(list(names_out), probe), strict=True))
        base = _states_from_reference(ref, nj)
        reps = max(1, -(-samples // n_frames))
        feeds = {k: np.concatenate([v] * reps)[:samples] for k, v in base.items()}
        n = len(feeds["base_pos"])
        feeds["time_step"] = np.concatenate([t] * reps)[:samples] + rng.integers(-2, 3, (n, 1))
        for k in ("base_pos", "base_lin_vel", "base_ang_vel", "joint_pos", "joint_vel"):
            feeds[k] = feeds[k] + rng.normal(0, 0.05, feeds[k].shape).astype(np.float32)
        quat = feeds["base_quat"] + rng.normal(0, 0.05, feeds["base_quat"].shape).astype(np.float32)
        feeds["base_quat"] = (quat / np.linalg.norm(quat, axis=1, keepdims=True)).astype(np.float32)
    else:
        feeds = {
            "obs": rng.normal(0, 1, (samples, obs_dim)).astype(np.float32),
            "time_step": rng.integers(-2, n_frames + 3, (samples, 1)).astype(np.float32),
        }
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    batch = sess.run(list(names_out), feeds)
    again = sess.run(list(names_out), feeds)
    n_single = min(64, samples)
    single = [sess.run(list(names_out), {k: v[i : i + 1] for k, v in feeds.items()}) for i in range(n_single)]
    single_cat = [np.concatenate([s[j] for s in single]) for j in range(len(names_out))]
    cmp = compare([single_cat], [[b[:n_single] for b in batch]], names_out)
    repeat = max(float(np.abs(a - b).max()) for a, b in zip(batch, again, strict=True))
    finite = all(bool(np.all(np.isfinite(b))) for b in batch)
    return {
        "mode": "self_consistency",
        "num_inputs": len(feeds["time_step"]),
        "batch_vs_single_max_abs_err": cmp["max_abs_err"],
        "repeat_max_abs_err": repeat,
        "finite": finite,
        "tolerance": tol,
        "passed": bool(cmp["max_abs_err"] <= tol and repeat == 0.0 and finite),
        "note": "no checkpoint given: torch parity is the stored record; this re-run checks onnxruntime only",
    }


def _states_from_reference(ref: dict[str, np.ndarray], nj: int) -> dict[str, np.ndarray]:
    """Raw inputs equal to the baked reference frames (root angular velocity into the body frame)."""
    jp = ref.get("ref_joint_pos", ref.get("joint_pos"))
    jv = ref.get("ref_joint_vel", ref.get("joint_vel"))
    quat = ref["body_quat_w"][:, 0].astype(np.float64)
    w, v = quat[:, :1], -quat[:, 1:]  # conjugate rotates world -> body
    ang = ref["body_ang_vel_w"][:, 0].astype(np.float64)
    tt = 2.0 * np.cross(v, ang)
    ang_body = ang + w * tt + np.cross(v, tt)
    return {
        "base_pos": ref["body_pos_w"][:, 0],
        "base_quat": ref["body_quat_w"][:, 0],
        "base_lin_vel": ref["body_lin_vel_w"][:, 0],
        "base_ang_vel": ang_body.astype(np.float32),
        "joint_pos": jp[:, :nj],
        "joint_vel": jv[:, :nj],
    }
