"""The ``run.pt`` checkpoint: schema, atomic save, safe validated load.

API summary:

- ``build_checkpoint(*, robot, motion, observation, config, actor, obs_normalizer, critics=(),
  target_critics=(), discriminator=None, add_normalizer=None, optimizers=None, iteration=0, rng=None,
  metrics=None) -> dict``: the payload below from live objects (modules or state dicts; a ``Motion``;
  an ``ObservationModule`` or its ``spec()``; a config dataclass or dict). Everything is converted to
  plain values + tensors (loadable with ``weights_only=True``).
- ``save_checkpoint(path, payload)``: serialised in memory, then written atomically (``fileio``: a temporary
  file beside ``path``, renamed over it; only over a regular file). A write error (disk full, file too large)
  is a one-line ``BcgdError`` naming the path and the cause; the temporary file is removed and the previous
  ``path`` is untouched. Refuses
  (``NonFiniteCheckpointError``, a ``BcgdError``) a payload whose actor or observation-normaliser
  tensors are not all finite, so a diverged model never replaces a good file.
- ``load_checkpoint(path, robot=None, required=REQUIRED_KEYS) -> dict``: ``torch.load(weights_only=True,
  map_location="cpu")`` (a pickle that would run code is refused), then checks format tag, version,
  required keys, motion arrays and, when ``robot`` is given, its identity. Every failure is a one-line
  ``BcgdError`` (missing file, truncated/corrupt file, unsafe pickle, missing key, other robot).
  The exporter passes ``required=EXPORT_KEYS``.
- ``check_robot_identity(ckpt, robot, path)``: the robot check alone (name + model hash).
- ``capture_rng(warp_seed=None) -> dict`` / ``restore_rng(state)``: torch, numpy, python RNG states.
- ``motion_from_checkpoint(ckpt) -> Motion``: the clip back as a ``Motion`` (float64 numpy).

Schema (``format_version`` 1; tensors are CPU tensors, everything else plain Python):

    format           "bcg-deploy/run"
    format_version   1
    robot            {"name": str, "model_hash": sha256 of the robot MJCF, "action_scale": [29] rad and
                      "default_joint_pos": [29] rad (the ones the policy was trained with: the actions are
                      added to that pose; absent in older files, which used the packaged robot's)}
    motion           Motion.identity(): {"name", "kind", "file", "sha256", "start_s", ...} + "fps", "num_frames"
    motion_arrays    {root_pos [T,3], root_quat [T,4] wxyz, joint_pos [T,29], joint_vel [T,29],
                      root_lin_vel [T,3] world, root_ang_vel [T,3] world, body_pos_w [T,30,3],
                      body_quat_w [T,30,4] wxyz, body_lin_vel_w [T,30,3], body_ang_vel_w [T,30,3]}
                     float64 tensors, plus "fps" (float)
    observation      ObservationModule.spec(): [{name, size, offset, noise, units, frame, future_steps,
                      description}, ...]
    config           the training config as plain values (sim: physics_dt, substeps, control_dt, kappa;
                      bundling; network sizes; domain randomisation ranges; push schedule; ...)
    actor            Actor state_dict (sizes are read back from the weight shapes)
    obs_normalizer   RunningNormalizer state_dict (mean, var, count, eps, clip; float64)
    critics          [Critic state_dict, ...] (ensemble)
    target_critics   [Critic state_dict, ...]
    discriminator    state_dict or {}
    add_normalizer   state_dict or {}
    optimizers       {name: optimizer state_dict}
    iteration        int (completed training iterations)
    rng              capture_rng(): {"torch": ByteTensor, "cuda": [ByteTensor per CUDA device], "numpy": {...},
                     "python": [...], "warp_seed": int|None}
    metrics          {name: float | list} (last logged values)
"""

from __future__ import annotations

import dataclasses
import enum
import io
import math
import os
import pickle
import random
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bcg_deploy.errors import BcgdError
from bcg_deploy.fileio import atomic_write_bytes
from bcg_deploy.integrity import onnx_summary
from bcg_deploy.motions.motion import ARRAY_FIELDS, Motion
from bcg_deploy.robots import RobotSpec

FORMAT = "bcg-deploy/run"
FORMAT_VERSION = 1
MOTION_ARRAYS = ARRAY_FIELDS
EXPORT_KEYS = (
    "format",
    "format_version",
    "robot",
    "motion",
    "motion_arrays",
    "observation",
    "config",
    "actor",
    "obs_normalizer",
    "iteration",
)
REQUIRED_KEYS = EXPORT_KEYS + (
    "critics",
    "target_critics",
    "discriminator",
    "add_normalizer",
    "optimizers",
    "rng",
    "metrics",
)


class NonFiniteCheckpointError(BcgdError):
    """The actor or normaliser holds NaN/Inf: the checkpoint is not written."""


# ----------------------------------------------------------------------------- plain values


def plain(obj: Any) -> Any:
    """Convert configs / numpy / paths into plain Python + CPU tensors (weights_only-loadable)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().clone()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(obj))
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, enum.Enum):
        return plain(obj.value)
    if isinstance(obj, Path):
        return str(obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot store {type(obj).__name__} in a checkpoint (plain values and tensors only)")


def _state(x: Any) -> dict:
    if x is None:
        return {}
    if isinstance(x, (nn.Module, torch.optim.Optimizer)):
        x = x.state_dict()
    return plain(x)


# ----------------------------------------------------------------------------- rng


def capture_rng(warp_seed: int | None = None) -> dict:
    """Torch (CPU and every CUDA device's default generator), numpy (legacy global) and python RNG states
    as plain values; ``cuda`` is an empty list without CUDA."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()  # noqa: NPY002 (the global legacy state is what we save)
    py = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": [s.clone() for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else [],
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "python": [py[0], list(py[1]), py[2]],
        "warp_seed": warp_seed,
    }


def restore_rng(state: Mapping[str, Any]) -> None:
    """Inverse of ``capture_rng`` (the warp seed is for the caller to apply).

    The CUDA generators are restored when the checkpoint has one state per CUDA device of this machine
    (a run resumed on CUDA then draws exactly what it would have drawn); a checkpoint without them (from a
    CPU run or an older version) or from a machine with another device count leaves them as seeded."""
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)
    n = state["numpy"]
    np.random.set_state(  # noqa: NPY002
        (n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"])
    )
    v, s, g = state["python"]
    random.setstate((v, tuple(s), g))


# ----------------------------------------------------------------------------- build / save


def build_checkpoint(
    *,
    robot: RobotSpec,
    motion: Motion,
    observation: Any,
    config: Any,
    actor: nn.Module | Mapping,
    obs_normalizer: nn.Module | Mapping,
    critics: Iterable[nn.Module | Mapping] = (),
    target_critics: Iterable[nn.Module | Mapping] = (),
    discriminator: nn.Module | Mapping | None = None,
    add_normalizer: nn.Module | Mapping | None = None,
    optimizers: Mapping[str, torch.optim.Optimizer | Mapping] | None = None,
    iteration: int = 0,
    rng: Mapping | None = None,
    metrics: Mapping | None = None,
) -> dict:
    """The ``run.pt`` payload (see the module docstring) from live training objects."""
    spec = observation.spec() if hasattr(observation, "spec") else observation
    arrays = {k: torch.as_tensor(np.asarray(getattr(motion, k), dtype=np.float64)) for k in MOTION_ARRAYS}
    arrays["fps"] = float(motion.fps)
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "robot": {
            **robot.identity(),
            "action_scale": [float(x) for x in robot.action_scale],
            "default_joint_pos": [float(x) for x in robot.default_joint_pos],
        },
        "motion": plain({**motion.identity(), "fps": float(motion.fps), "num_frames": motion.num_frames}),
        "motion_arrays": arrays,
        "observation": plain(spec),
        "config": plain(config),
        "actor": _state(actor),
        "obs_normalizer": _state(obs_normalizer),
        "critics": [_state(c) for c in critics],
        "target_critics": [_state(c) for c in target_critics],
        "discriminator": _state(discriminator),
        "add_normalizer": _state(add_normalizer),
        "optimizers": {k: _state(v) for k, v in (optimizers or {}).items()},
        "iteration": int(iteration),
        "rng": plain(rng if rng is not None else capture_rng()),
        "metrics": plain(dict(metrics or {})),
    }


def _non_finite(sd: Mapping[str, Any]) -> list[str]:
    return [k for k, v in sd.items() if isinstance(v, torch.Tensor) and v.is_floating_point() and
            not bool(torch.isfinite(v).all())]  # fmt: skip


def save_checkpoint(path: str | os.PathLike, payload: Mapping[str, Any]) -> Path:
    """Write ``payload`` to ``path`` atomically; never replaces a file with a non-finite model."""
    path = Path(path)
    for key in ("actor", "obs_normalizer"):
        bad = _non_finite(payload.get(key, {}))
        if bad:
            raise NonFiniteCheckpointError(f"not saving {path}: {key} has non-finite values in {', '.join(bad[:3])}")
    buf = io.BytesIO()  # serialised whole first: a write error is then a plain OSError of one file write
    torch.save(dict(payload), buf)
    try:
        atomic_write_bytes(path, buf.getbuffer(), what="checkpoint", parents=False)  # a vanished run folder: stop
    except BcgdError as exc:
        kept = f"; the previous {path} is intact" if path.is_file() else ""
        raise BcgdError(f"{exc}{kept}") from None
    return path


# ----------------------------------------------------------------------------- load


def load_checkpoint(
    path: str | os.PathLike, robot: RobotSpec | None = None, required: Iterable[str] = REQUIRED_KEYS
) -> dict:
    """Load and validate a ``run.pt`` (see the module docstring); one-line ``BcgdError`` on failure."""
    path = Path(path)
    if not path.is_file():
        raise BcgdError(f"checkpoint {path} not found" if not path.exists() else f"checkpoint {path} is not a file")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        _refuse_onnx(path)
        if "weights only" in str(exc).lower() or "weights_only" in str(exc).lower():
            raise BcgdError(
                f"{path} is not a bcg-deploy checkpoint: it holds Python objects that no run.pt of bcgd train has"
            ) from None
        raise BcgdError(_not_torch(path)) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError, KeyError, IndexError):
        _refuse_onnx(path)
        raise BcgdError(_not_torch(path)) from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        got = ckpt.get("format") if isinstance(ckpt, dict) else type(ckpt).__name__
        raise BcgdError(f"{path} is not a bcg-deploy run checkpoint (format {got!r}, expected {FORMAT!r})")
    if ckpt.get("format_version") != FORMAT_VERSION:
        raise BcgdError(
            f"checkpoint {path} has format_version {ckpt.get('format_version')!r}; this bcgd reads {FORMAT_VERSION}"
        )
    for key in required:
        if key not in ckpt:
            raise BcgdError(f"checkpoint {path} lacks required key {key!r}")
    _check_nested(path, ckpt)
    if robot is not None:
        check_robot_identity(ckpt, robot, path)
    return ckpt


def _refuse_onnx(path: Path) -> None:
    """A one-line error naming the file an ONNX model (a policy given where its checkpoint goes)."""
    onnx_io = onnx_summary(path)
    if onnx_io is not None:
        raise BcgdError(
            f"{path} is an ONNX model ({onnx_io}), not a checkpoint: give the run.pt that bcgd train writes "
            f"(bcgd inspect {path} shows what the ONNX holds)"
        )


def _not_torch(path: Path) -> str:
    """Why a file torch cannot load is no checkpoint, without torch's internals."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError as err:
        return f"checkpoint {path} cannot be read: {err.strerror}"
    if head == b"PK\x03\x04":
        return f"checkpoint {path} is truncated or damaged (an incomplete torch archive); write it again"
    return f"{path} is not a checkpoint (not a torch file; expected the run.pt that bcgd train writes)"


def check_robot_identity(ckpt: Mapping[str, Any], robot: RobotSpec, path: str | os.PathLike = "checkpoint") -> None:
    """One-line ``BcgdError`` unless the checkpoint's robot name, model hash and (when recorded) action
    scale and default pose are ``robot``'s."""
    want = robot.identity()
    got = ckpt["robot"]
    if got.get("name") != want["name"] or got.get("model_hash") != want["model_hash"]:
        raise BcgdError(
            f"checkpoint {path} is for robot {got.get('name')!r} (model {str(got.get('model_hash'))[:12]}), "
            f"not {want['name']!r} (model {want['model_hash'][:12]})"
        )
    if "action_scale" in got:
        scale = np.asarray(got["action_scale"], dtype=np.float64)
        if scale.shape != robot.action_scale.shape or not np.allclose(scale, robot.action_scale, rtol=1e-9, atol=0):
            raise BcgdError(
                f"checkpoint {path} was trained with action scale {_scale_text(scale)} rad, not this run's "
                f"{_scale_text(robot.action_scale)} rad (env.action_scale)"
            )
    if "default_joint_pos" in got:
        pose = np.asarray(got["default_joint_pos"], dtype=np.float64)
        if pose.shape != robot.default_joint_pos.shape or not np.allclose(pose, robot.default_joint_pos, atol=1e-12):
            raise BcgdError(
                f"checkpoint {path} was trained with another default pose than this run's (the observation "
                "profile's fixed pose, or the robot's own)"
            )


def robot_of_checkpoint(ckpt: Mapping[str, Any], robot: RobotSpec) -> RobotSpec:
    """``robot`` (the packaged spec the checkpoint names) with the action scale and default pose the
    checkpoint records."""
    scale = ckpt["robot"].get("action_scale")
    pose = ckpt["robot"].get("default_joint_pos")
    if scale is not None:
        try:
            robot = robot.with_action_scale(np.asarray(scale, dtype=np.float64).reshape(robot.num_joints))
        except ValueError:  # wrong length, or not positive and finite
            raise BcgdError(
                f"checkpoint robot.action_scale: expected {robot.num_joints} positive finite values (rad), "
                f"got {np.size(scale)} values"
            ) from None
    if pose is not None:
        try:
            robot = robot.with_default_pose(pose)
        except ValueError:
            raise BcgdError(
                f"checkpoint robot.default_joint_pos: expected {robot.num_joints} finite angles (rad), "
                f"got {np.size(pose)} values"
            ) from None
    return robot


def _scale_text(scale: np.ndarray) -> str:
    flat = np.asarray(scale).reshape(-1)
    if flat.size == 0:
        return "[]"
    if np.allclose(flat, flat[0]):
        return f"{flat[0]:.4g} on every joint"
    return f"{flat.min():.4g}-{flat.max():.4g} per joint"


def _check_nested(path: Path, ckpt: dict) -> None:
    need = {
        "robot": ("name", "model_hash"),
        "motion_arrays": MOTION_ARRAYS + ("fps",),
        "actor": ("mu.weight", "log_std"),
        "obs_normalizer": ("mean", "var", "eps", "clip"),
    }
    for key, subkeys in need.items():
        if key not in ckpt:
            continue
        value = ckpt[key]
        if not isinstance(value, Mapping):
            raise BcgdError(f"checkpoint {path}: {key} must be a dict, got {type(value).__name__}")
        for sub in subkeys:
            if sub not in value:
                raise BcgdError(f"checkpoint {path} lacks required key {key}.{sub}")
    if "observation" in ckpt and not isinstance(ckpt["observation"], list):
        raise BcgdError(f"checkpoint {path}: observation must be a list of terms")


def motion_from_checkpoint(ckpt: Mapping[str, Any]) -> Motion:
    """The reference clip stored in a checkpoint as a ``Motion`` (float64 numpy arrays)."""
    arrays = ckpt["motion_arrays"]
    ident = dict(ckpt["motion"])
    name = str(ident.pop("name", "motion"))
    for k in ("fps", "num_frames"):
        ident.pop(k, None)
    fps = float(arrays["fps"])
    if not math.isfinite(fps) or fps <= 0:
        raise BcgdError(f"checkpoint motion fps {fps!r} is not a positive number")
    return Motion(
        name=name,
        source=ident,
        fps=fps,
        **{k: arrays[k].detach().cpu().numpy().astype(np.float64) for k in MOTION_ARRAYS},
    )
