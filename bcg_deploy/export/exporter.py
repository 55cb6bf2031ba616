"""``export_policy``: run.pt -> one self-contained, verified, self-describing policy.onnx."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx
import onnxruntime as ort
import torch

from bcg_deploy.errors import BcgdError
from bcg_deploy.export import deploy as dep
from bcg_deploy.export import holosoma as holo
from bcg_deploy.export import parity as par
from bcg_deploy.export import unitree_rl_lab as url
from bcg_deploy.export.graph import (
    Signature,
    build_policy,
    build_reference_policy,
    example_inputs,
    input_names,
    output_names,
    trace_module,
)
from bcg_deploy.export.metadata import build_metadata, timing
from bcg_deploy.fileio import atomic_write_bytes, check_output
from bcg_deploy.integrity import HASH_KEY, seal
from bcg_deploy.profiles import get_profile, profile_of_config
from bcg_deploy.robots import ROBOTS, RobotSpec, load_robot
from bcg_deploy.training.checkpoint import EXPORT_KEYS, check_robot_identity, load_checkpoint, robot_of_checkpoint

OPSET = 17
PARITY_TOL = 1e-5
_DTYPE_NAMES = {torch.float32: "float32", torch.float64: "float64"}


@dataclass
class ExportConfig:
    """What ``bcgd export`` does."""

    checkpoint: Path
    """The training checkpoint (run.pt)."""
    output: Path = Path("policy.onnx")
    """Destination .onnx (written atomically)."""
    inputs: Literal["raw", "obs"] | None = None
    """Paper profile only: raw robot state (default) or its flat 849-value observation (bcgd's own layout,
    which no deploy stack builds). A deployable profile always has the ``obs`` signature."""
    profile: str | None = None
    """The consumer: ``paper`` (bcgd's raw-state ONNX), ``beyondmimic``, ``beyondmimic_wose`` (BeyondMimic's
    motion_tracking_controller), ``unitree`` (the Mimic states of unitree_rl_mjlab and unitree_rl_lab, with
    params/deploy.yaml, the motion NPZ, the motion CSV and the FSM entry) or ``holosoma`` (its whole-body-tracking
    inference). Default: the profile the checkpoint's actor was trained on."""
    parity_samples: int = 1000
    """Minimum number of parity inputs (clip frames + noisy states + MuJoCo rollout)."""
    rollout_steps: int = 100
    """Control steps of the MuJoCo rollout whose states join the parity inputs (0 = none)."""
    parity_tol: float = PARITY_TOL
    """Maximum absolute onnxruntime-vs-torch error on any output (raw signature with the float32
    observation: also its error against the same module in float64; else the float64 observation)."""
    seed: int = 0
    overwrite: bool = False
    """Replace an existing ``output`` (and unitree side files); False: an existing one is a one-line error
    (``bcgd export --force`` sets it)."""


@dataclass
class ExportResult:
    path: Path
    signature: str
    profile: str
    parity: dict[str, Any]
    metadata: dict[str, str]
    size_bytes: int
    num_nodes: int
    side_files: dict[str, Path] = field(default_factory=dict)
    """Files written beside the ONNX for the consumer (unitree: deploy_yaml, motion_npz, motion_csv, fsm_config)."""
    sources: dict[str, int] = field(default_factory=dict)
    obs_dtype: str = "float32"
    """Precision of the observation inside the graph (raw signature: float32, or float64 when float32
    missed the parity tolerance; obs signature: float32)."""

    def to_dict(self) -> dict[str, Any]:
        """What ``bcgd export --json`` writes: paths, signature, profile, size, parity (plain values)."""
        return {
            "path": str(self.path),
            "signature": self.signature,
            "profile": self.profile,
            "size_bytes": self.size_bytes,
            "num_nodes": self.num_nodes,
            "obs_dtype": self.obs_dtype,
            "side_files": {k: str(v) for k, v in self.side_files.items()},
            "parity": self.parity,
        }


def load_for_export(checkpoint: Path) -> tuple[dict, RobotSpec]:
    """Load + validate the export keys of a checkpoint and the packaged robot it names."""
    ckpt = load_checkpoint(checkpoint, robot=None, required=EXPORT_KEYS)
    name = ckpt["robot"].get("name")
    if name not in ROBOTS:
        raise BcgdError(f"checkpoint {checkpoint} is for robot {name!r}; this bcgd has {', '.join(ROBOTS)}")
    robot = robot_of_checkpoint(ckpt, load_robot(name))
    check_robot_identity(ckpt, robot, checkpoint)
    return ckpt, robot


def _check_writable(path: Path, overwrite: bool) -> None:
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise BcgdError(f"cannot write {path}: it is a directory (expected a .onnx file path)")
    check_output(path, "the policy", overwrite)
    if not parent.is_dir():
        raise BcgdError(f"cannot write {path}: folder {parent} does not exist")
    probe = parent / f".{path.name}.probe-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise BcgdError(f"cannot write {path}: {exc.strerror or exc}") from None


def trace_onnx(module: torch.nn.Module, signature: Signature, obs_dim: int, num_joints: int) -> onnx.ModelProto:
    """The policy module of ``signature`` traced with its input and output names (``trace_module``)."""
    args = example_inputs(signature, 2, obs_dim, num_joints)
    return trace_module(module, args, list(input_names(signature)), list(output_names(signature)), opset=OPSET)


def session(model_bytes: bytes) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(model_bytes, sess_options=opts, providers=["CPUExecutionProvider"])


def parity_inputs(
    ckpt: dict, robot: RobotSpec, raw_policy: torch.nn.Module, n_min: int, rollout_steps: int, seed: int
) -> par.StateSamples:
    """Clip frames + noisy states + MuJoCo rollout states, at least ``n_min`` of them."""
    rng = np.random.default_rng(seed)
    clip = par.clip_states(ckpt["motion_arrays"])
    parts = [clip]
    if rollout_steps > 0:
        tm = timing(ckpt["config"] if isinstance(ckpt["config"], dict) else {}, float(ckpt["motion_arrays"]["fps"]))
        physics_dt = tm["physics_dt"] or 0.005
        substeps = max(1, round(tm["control_dt"] / physics_dt))
        parts.append(par.mujoco_rollout(robot, raw_policy, clip, rollout_steps, physics_dt, substeps))
    have = sum(len(p) for p in parts)
    parts.append(par.noisy_states(clip, max(n_min - have, len(clip)), rng))
    return par.concat(*parts)


def feed_chunks(signature: Signature, module: torch.nn.Module, states: par.StateSamples, seed: int) -> list[tuple]:
    """Input tuples (torch float32) for the signature, in chunks."""
    raw = par.raw_inputs(states.q, states.qd, states.t)
    if signature == "obs":
        om = module.obs_module
        with torch.no_grad():
            q = torch.cat((raw[0], raw[1], raw[4]), -1).double()
            qd = torch.cat(raw[2:4] + raw[5:6], -1).double()
            obs = om.add_noise(om(q, qd, raw[6]), torch.Generator().manual_seed(seed)).float()
        full = (obs, raw[6])
    else:
        full = raw
    n = full[0].shape[0]
    chunks = [tuple(x[i : i + 512] for x in full) for i in range(0, n, 512)]
    chunks += [tuple(x[i : i + 1] for x in full) for i in range(0, min(n, 16))]  # batch-1 path too
    return chunks


def check_parity(
    sess: ort.InferenceSession,
    module: torch.nn.Module,
    signature: Signature,
    chunks: list[tuple],
    reference: torch.nn.Module | None = None,
    names: tuple[tuple[str, ...], tuple[str, ...]] | None = None,
) -> dict[str, Any]:
    """onnxruntime vs torch (float32 eager, same module) on every chunk; also vs torch float64, and
    (recorded, not a pass/fail criterion) vs ``reference``, an independent torch module of the same
    function (for the raw signature: the training ObservationModule -> normaliser -> actor)."""
    names_in, names_out = names or (input_names(signature), output_names(signature))
    module64 = _float64_copy(module)
    o_out, t_out, d_out, r_out = [], [], [], []
    with torch.no_grad():
        for c in chunks:
            o_out.append(sess.run(list(names_out), {n: x.numpy() for n, x in zip(names_in, c, strict=True)}))
            t_out.append([y.numpy() for y in module(*c)])
            d_out.append([y.numpy() for y in module64(*(x.double() for x in c))])
            if reference is not None:
                r_out.append([y.numpy() for y in reference(*c)])
    res = par.compare(o_out, t_out, names_out)
    ref64 = par.compare(o_out, d_out, names_out)
    res["max_abs_err_vs_torch_float64"] = ref64["max_abs_err"]
    if reference is not None:
        res["max_abs_err_vs_reference_module"] = par.compare(o_out, r_out, names_out)["max_abs_err"]
    res["num_inputs"] = int(sum(c[0].shape[0] for c in chunks))
    res["reference"] = "torch float32 eager, same module (also: the float64 copy" + (
        ", and the reference module)" if reference is not None else ")"
    )
    return res


def _float64_copy(module: torch.nn.Module) -> torch.nn.Module:
    import copy

    return copy.deepcopy(module).double()


def export_policy(cfg: ExportConfig) -> ExportResult:
    """Build, verify (onnx.checker + onnxruntime parity) and write the ONNX; see ``bcg_deploy.export``."""
    if cfg.inputs not in (None, "raw", "obs"):
        raise BcgdError(f"--inputs {cfg.inputs!r}: expected raw or obs")
    out = Path(cfg.output)
    _check_writable(out, cfg.overwrite)
    ckpt, robot = load_for_export(Path(cfg.checkpoint))
    trained = profile_of_config(ckpt["config"])
    profile = get_profile(cfg.profile or trained)
    if profile.deployable:
        if cfg.inputs == "raw":
            raise BcgdError(f"--inputs raw: profile {profile.name} has the obs signature (the stack builds the obs)")
        return _export_deploy(cfg, ckpt, robot, profile, out)
    if trained != "paper":
        raise BcgdError(
            f"--profile paper: the checkpoint's actor was trained on the {trained} observation; "
            f"export it with --profile {trained}"
        )
    signature: Signature = cfg.inputs or "raw"
    # the raw signature's observation runs in float32 unless that misses the tolerance, against torch
    # or against the same module in float64 (then float64, ~15 us slower per call; see obs_graph)
    dtypes = [torch.float32, torch.float64] if signature == "raw" else [torch.float32]
    module = build_policy(ckpt, robot, signature, dtypes[0])
    raw_module = module if signature == "raw" else build_policy(ckpt, robot, "raw")
    states = parity_inputs(ckpt, robot, raw_module, cfg.parity_samples, cfg.rollout_steps, cfg.seed)
    reference = build_reference_policy(ckpt, robot) if signature == "raw" else None
    missed: list[str] = []
    for obs_dtype in dtypes:
        if obs_dtype is not dtypes[0]:
            module = build_policy(ckpt, robot, signature, obs_dtype)
        model = trace_onnx(module, signature, module.obs_dim, robot.num_joints)
        try:
            onnx.checker.check_model(model, full_check=True)
        except onnx.checker.ValidationError as exc:  # a bug of ours, not of the user's input
            raise BcgdError(f"exported graph fails onnx.checker: {str(exc).splitlines()[0][:200]}") from None
        chunks = feed_chunks(signature, module, states, cfg.seed)
        sess = session(model.SerializeToString())
        parity = check_parity(sess, module, signature, chunks, reference)
        parity |= {"tolerance": cfg.parity_tol, "sources": states.sources, "signature": signature}
        err = parity["max_abs_err"]
        if obs_dtype is not dtypes[-1]:  # float32 observation: also its distance to float64
            err = max(err, parity["max_abs_err_vs_torch_float64"])
        if err <= cfg.parity_tol:
            break
        missed.append(f"{_DTYPE_NAMES[obs_dtype]} observation {err:.3g}")
    else:
        worst = max(parity["per_output"].items(), key=lambda kv: kv[1]["max_abs_err"])
        tried = f" ({', '.join(missed)})" if len(missed) > 1 else ""
        raise BcgdError(
            f"parity check failed: onnxruntime differs from torch by {parity['max_abs_err']:.3g} "
            f"(output {worst[0]}) > {cfg.parity_tol:g} on {parity['num_inputs']} inputs{tried}; {out} not written"
        )
    run_path = str(Path(cfg.checkpoint).resolve())
    meta = build_metadata(ckpt, robot, signature, parity, OPSET, run_path)
    del model.metadata_props[:]
    doc = f"bcg-deploy policy ({signature} inputs) for {robot.name}, motion {ckpt['motion'].get('name')}"
    data = _write_policy(model, meta, doc, sess, input_names(signature), chunks[0], out, cfg.overwrite)
    return ExportResult(
        path=out,
        signature=signature,
        profile="paper",
        parity=parity,
        metadata=meta,
        size_bytes=len(data),
        num_nodes=len(model.graph.node),
        sources=states.sources,
        obs_dtype=_DTYPE_NAMES[obs_dtype],
    )


def _write_policy(model, meta: dict, doc: str, sess, inputs, feeds, out: Path, overwrite: bool) -> bytes:  # noqa: ANN001
    """Attach ``meta`` and ``doc`` to ``model``, check it, seal it with its content hash (added to ``meta``),
    run the sealed bytes once against ``sess`` on ``feeds`` and write them to ``out``; returns the bytes."""
    for k, v in meta.items():
        model.metadata_props.add(key=k, value=v)
    model.doc_string = doc
    onnx.checker.check_model(model, full_check=True)
    data = seal(model)
    meta[HASH_KEY] = model.metadata_props[-1].value
    _self_check(data, sess, inputs, feeds)
    atomic_write_bytes(out, data, "the policy", overwrite)
    return data


def _export_deploy(cfg: ExportConfig, ckpt: dict, robot: RobotSpec, profile, out: Path) -> ExportResult:
    """A deployable profile's export (``export/deploy.py``, ``export/holosoma.py``): static obs signature, the
    consumer's opset, side files (each checked before the export starts: none is replaced unless
    ``cfg.overwrite``)."""
    if profile.name == holo.PROFILE:
        consumer, build, describe = holo.CONSUMER, holo.build_policy, holo.metadata
    else:
        consumer, build, describe = dep.CONSUMERS[profile.name], dep.build_deploy_policy, dep.deploy_metadata
    side: dict[str, Path] = {}
    name = str(ckpt["motion"].get("name") or "motion")
    if consumer.side_files:
        side = dep.side_file_paths(out, name)
        side |= url.side_file_paths(side["deploy_yaml"].parent.parent, name)  # unitree_rl_lab's Mimic
        for key, path in side.items():
            check_output(path, key.replace("_", " "), cfg.overwrite)
    module, obs_module = build(ckpt, robot, profile)
    rng = np.random.default_rng(cfg.seed)
    clip = par.clip_states(ckpt["motion_arrays"])
    states = par.concat(clip, par.noisy_states(clip, max(cfg.parity_samples - len(clip), len(clip)), rng))
    chunks = dep.parity_feeds(obs_module, states.q, states.qd, states.t, consumer, cfg.seed)
    model = dep.trace_static(module, consumer, profile.obs_dim)
    try:
        onnx.checker.check_model(model, full_check=True)
    except onnx.checker.ValidationError as exc:
        raise BcgdError(f"exported graph fails onnx.checker: {str(exc).splitlines()[0][:200]}") from None
    sess = session(model.SerializeToString())
    parity = check_parity(sess, module, "obs", chunks, names=(consumer.inputs, consumer.outputs))
    parity |= {"tolerance": cfg.parity_tol, "sources": states.sources, "signature": "obs", "profile": profile.name}
    if parity["max_abs_err"] > cfg.parity_tol:
        worst = max(parity["per_output"].items(), key=lambda kv: kv[1]["max_abs_err"])
        raise BcgdError(
            f"parity check failed: onnxruntime differs from torch by {parity['max_abs_err']:.3g} "
            f"(output {worst[0]}) > {cfg.parity_tol:g} on {parity['num_inputs']} inputs; {out} not written"
        )
    meta = describe(ckpt, robot, profile, parity, consumer.opset, str(Path(cfg.checkpoint).resolve()))
    doc = f"bcg-deploy policy ({profile.name} profile, {consumer.stack}) for {robot.name}"
    data = _write_policy(model, meta, doc, sess, consumer.inputs, chunks[0], out, cfg.overwrite)
    if side:
        control_dt = timing(ckpt["config"], float(ckpt["motion_arrays"]["fps"]))["control_dt"]
        what = {path: key.replace("_", " ") for key, path in side.items()}
        blobs = {side["deploy_yaml"]: dep.unitree_deploy_yaml(robot, profile, control_dt).encode(),
                 side["motion_npz"]: dep.motion_npz(ckpt),
                 **url.side_files(side["deploy_yaml"].parent.parent, name, ckpt["motion_arrays"])}  # fmt: skip
        for path, blob in blobs.items():
            atomic_write_bytes(path, blob, what[path], cfg.overwrite)
    return ExportResult(
        path=out,
        signature="obs",
        profile=profile.name,
        parity=parity,
        metadata=meta,
        size_bytes=len(data),
        num_nodes=len(model.graph.node),
        side_files=side,
        sources=states.sources,
    )


def _self_check(data: bytes, sess: ort.InferenceSession, names_in: tuple[str, ...], chunk: tuple) -> None:
    """The final bytes (with metadata) load and compute exactly what was verified."""
    feeds = {n: x.numpy() for n, x in zip(names_in, chunk, strict=True)}
    a = session(data).run(None, feeds)
    b = sess.run(None, feeds)
    if any(not np.array_equal(x, y) for x, y in zip(a, b, strict=True)):
        raise BcgdError("the serialised ONNX does not reproduce the verified outputs (internal error)")
