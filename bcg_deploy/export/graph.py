"""The torch modules that are traced into ``policy.onnx`` (pure torch, opset 17).

Inputs and outputs are float32. The raw signature is ``obs_graph.FastRawPolicy`` (observation in
float32, or float64 when the exporter falls back to it, actor in float32; see that module for how it is laid
out for a small graph). The obs signature is the modules below (float32).

- ``FoldedNormalizer``: ``clamp((x - mean) / std, -clip, clip)`` with the checkpoint's running
  statistics as constants (``RunningNormalizer.folded()``).
- ``PolicyHead``: folded normaliser -> deterministic actor ``tanh(mean)`` -> joint targets
  ``clamp(default + scale * action, joint_lo, joint_hi)``.
- ``RawStatePolicy``: raw robot state + ``time_step`` -> the training ``ObservationModule`` (forward
  kinematics included, the reference clip baked in) -> ``PolicyHead``; also the reference frame. The
  straightforward reference the exported ``FastRawPolicy`` is tested against (not exported).
- ``ObsPolicy``: the flat (un-normalised) observation + ``time_step`` -> ``PolicyHead`` and the
  reference frame (BeyondMimic-style signature).
- ``build_policy(ckpt, robot, inputs)``: the exported module of one signature from a loaded checkpoint
  (``"raw"``: ``FastRawPolicy``; ``"obs"``: ``ObsPolicy``); ``build_reference_policy`` the
  ``RawStatePolicy`` of the same checkpoint.
"""

from __future__ import annotations

import io
import warnings
from typing import Any, Literal

import numpy as np
import onnx
import torch
from torch import nn

from bcg_deploy.errors import BcgdError
from bcg_deploy.export.obs_graph import FastRawPolicy, gather_rows
from bcg_deploy.observations.paper import ObservationModule
from bcg_deploy.robots import RobotSpec
from bcg_deploy.training.networks import Actor
from bcg_deploy.training.normalizer import RunningNormalizer

RAW_INPUTS = ("base_pos", "base_quat", "base_lin_vel", "base_ang_vel", "joint_pos", "joint_vel", "time_step")
OBS_INPUTS = ("obs", "time_step")
REF_KEYS = ("joint_pos", "joint_vel", "body_pos_w", "body_quat_w", "body_lin_vel_w", "body_ang_vel_w")
# An ONNX output cannot share an input's name: in the raw signature the reference joint arrays are
# ``ref_joint_pos`` / ``ref_joint_vel``; the obs signature uses the BeyondMimic names unchanged.
RAW_OUTPUTS = ("actions", "joint_pos_target", "ref_joint_pos", "ref_joint_vel") + REF_KEYS[2:]
OBS_OUTPUTS = ("actions", "joint_pos_target") + REF_KEYS
Signature = Literal["raw", "obs"]


class FoldedNormalizer(nn.Module):
    """Observation normaliser with constant statistics (float32)."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, clip: float) -> None:
        super().__init__()
        self.register_buffer("mean", mean.detach().to(torch.float32).clone())
        self.register_buffer("std", std.detach().to(torch.float32).clone())
        self.clip = float(clip)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp((x - self.mean) / self.std, -self.clip, self.clip)


class PolicyHead(nn.Module):
    """Normalised observation -> deterministic action in (-1, 1) -> clipped joint position target."""

    def __init__(self, normalizer: FoldedNormalizer, actor: Actor, robot: RobotSpec) -> None:
        super().__init__()
        self.normalizer = normalizer
        self.actor = actor
        f32 = torch.float32
        self.register_buffer("offset", torch.as_tensor(robot.default_joint_pos, dtype=f32))
        self.register_buffer("scale", torch.as_tensor(np.diag(robot.action_scale), dtype=f32))  # diagonal
        self.register_buffer("lo", torch.as_tensor(robot.joint_range[:, 0], dtype=f32))
        self.register_buffer("hi", torch.as_tensor(robot.joint_range[:, 1], dtype=f32))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        action = self.actor.deterministic(self.normalizer(obs))
        target = torch.addmm(self.offset, action, self.scale)  # offset + scale * action, one Gemm
        return action, torch.minimum(torch.maximum(target, self.lo), self.hi)


def _ref_outputs(
    obs_module: ObservationModule, time_step: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, ...]:
    ref = obs_module.reference_frame(time_step)
    return tuple(ref[k].to(dtype) for k in REF_KEYS)


class RawStatePolicy(nn.Module):
    """Raw MuJoCo-convention state -> actions, targets, reference frame (reference implementation)."""

    def __init__(self, obs_module: ObservationModule, head: PolicyHead) -> None:
        super().__init__()
        self.obs_module = obs_module
        self.head = head

    def observation(self, base_pos, base_quat, base_lin_vel, base_ang_vel, joint_pos, joint_vel, time_step):
        """The observation, computed in the observation module's precision, returned as float32-or-input dtype."""
        dt = self.obs_module.ref_table.dtype
        q = torch.cat((base_pos, base_quat, joint_pos), dim=-1).to(dt)
        qd = torch.cat((base_lin_vel, base_ang_vel, joint_vel), dim=-1).to(dt)
        return self.obs_module(q, qd, time_step).to(base_pos.dtype)

    def forward(self, base_pos, base_quat, base_lin_vel, base_ang_vel, joint_pos, joint_vel, time_step):
        obs = self.observation(base_pos, base_quat, base_lin_vel, base_ang_vel, joint_pos, joint_vel, time_step)
        action, target = self.head(obs)
        return (action, target) + _ref_outputs(self.obs_module, time_step, base_pos.dtype)


class ObsPolicy(nn.Module):
    """``--inputs obs``: raw (un-normalised) observation + time_step -> same outputs."""

    def __init__(self, obs_module: ObservationModule, head: PolicyHead) -> None:
        super().__init__()
        self.obs_module = obs_module
        self.head = head
        self.obs_dim = obs_module.obs_dim
        self.num_frames = obs_module.num_frames
        for k in REF_KEYS:  # float32 copies: one Gather per output, no Cast
            self.register_buffer(f"table_{k}", getattr(obs_module, f"ref_{k}").to(torch.float32).clone())

    def forward(self, obs: torch.Tensor, time_step: torch.Tensor):
        action, target = self.head(obs)
        idx = torch.clamp(time_step.long(), 0, self.num_frames - 1)  # [B, 1]: one GatherND per output
        return (action, target) + tuple(gather_rows(getattr(self, f"table_{k}"), idx) for k in REF_KEYS)


def input_names(signature: Signature) -> tuple[str, ...]:
    return RAW_INPUTS if signature == "raw" else OBS_INPUTS


def output_names(signature: Signature) -> tuple[str, ...]:
    return RAW_OUTPUTS if signature == "raw" else OBS_OUTPUTS


def build_policy(
    ckpt: dict[str, Any], robot: RobotSpec, signature: Signature = "raw", obs_dtype: torch.dtype = torch.float32
) -> nn.Module:
    """The eval-mode module of ``signature`` that is exported, from a loaded (validated) checkpoint
    (float32 I/O; ``obs_dtype``: the raw signature's observation precision, float32 or float64)."""
    if signature == "raw":
        obs_module, actor, folded = _parts(ckpt, robot)
        return FastRawPolicy(obs_module, robot, folded, actor, obs_dtype).eval()
    obs_module, head = _module_parts(ckpt, robot)
    return ObsPolicy(obs_module, head).eval()


def build_reference_policy(ckpt: dict[str, Any], robot: RobotSpec) -> RawStatePolicy:
    """The straightforward raw-state module (training ObservationModule in float64 -> PolicyHead)."""
    obs_module, head = _module_parts(ckpt, robot)
    return RawStatePolicy(obs_module, head).eval()


def _module_parts(ckpt: dict[str, Any], robot: RobotSpec) -> tuple[ObservationModule, PolicyHead]:
    obs_module, actor, f = _parts(ckpt, robot)
    return obs_module, PolicyHead(FoldedNormalizer(f["mean"], f["std"], float(f["clip"])), actor, robot)


def _parts(ckpt: dict[str, Any], robot: RobotSpec) -> tuple[ObservationModule, Actor, dict[str, torch.Tensor]]:
    # The reference / obs-signature observation module (FK included) runs in float64: float32 rounding of
    # the observation, amplified by the normaliser's 1/std (up to 316), moves the actions by up to ~1e-5
    # (measured). FastRawPolicy only builds its constants from it (its own precision: see obs_graph).
    obs_module = ObservationModule(robot, ckpt["motion_arrays"], _future_steps(ckpt), dtype=torch.float64)
    if obs_module.spec() != ckpt["observation"]:
        raise BcgdError(
            "checkpoint observation layout differs from this bcgd's observation module "
            f"({[t['name'] for t in ckpt['observation']]} vs {[t['name'] for t in obs_module.spec()]})"
        )
    try:
        actor = Actor.from_state_dict(ckpt["actor"]).float()
        norm = RunningNormalizer.from_state_dict(ckpt["obs_normalizer"])
    except (KeyError, RuntimeError, IndexError) as exc:
        raise BcgdError(f"checkpoint actor/obs_normalizer do not load: {str(exc).splitlines()[0][:160]}") from None
    if actor.obs_dim != obs_module.obs_dim or norm.size != obs_module.obs_dim or actor.act_dim != robot.num_joints:
        raise BcgdError(
            f"checkpoint actor is {actor.obs_dim}->{actor.act_dim}, normaliser {norm.size}; "
            f"expected {obs_module.obs_dim}->{robot.num_joints}"
        )
    return obs_module, actor.eval(), norm.folded()


def _future_steps(ckpt: dict[str, Any]) -> tuple[int, ...]:
    for term in ckpt["observation"]:
        if term.get("future_steps"):
            return tuple(int(k) for k in term["future_steps"])
    raise BcgdError("checkpoint observation spec names no future_steps for its reference terms")


def example_inputs(signature: Signature, batch: int, obs_dim: int, num_joints: int) -> tuple[torch.Tensor, ...]:
    """Zero-ish float32 inputs of the right shapes (identity quaternion) for tracing."""
    z = torch.zeros
    if signature == "obs":
        return z(batch, obs_dim), z(batch, 1)
    quat = z(batch, 4)
    quat[:, 0] = 1.0
    return z(batch, 3), quat, z(batch, 3), z(batch, 3), z(batch, num_joints), z(batch, num_joints), z(batch, 1)


def to_numpy_inputs(signature: Signature, tensors: tuple[torch.Tensor, ...]) -> dict[str, np.ndarray]:
    return {
        n: t.detach().cpu().numpy().astype(np.float32) for n, t in zip(input_names(signature), tensors, strict=True)
    }


def trace_module(
    module: torch.nn.Module,
    args: tuple,
    names_in: list[str],
    names_out: list[str],
    opset: int = 17,
    dynamic_batch: bool = True,
) -> onnx.ModelProto:
    """Trace ``module`` on ``args`` to an in-memory ONNX model (weights inside; a dynamic batch axis on
    every input and output unless ``dynamic_batch`` is False: the static shapes C++ runners bind)."""
    buf = io.BytesIO()
    axes = {n: {0: "batch"} for n in names_in + names_out} if dynamic_batch else {}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            args,
            buf,
            dynamo=False,
            opset_version=opset,
            input_names=names_in,
            output_names=names_out,
            dynamic_axes=axes,
            do_constant_folding=True,
        )
    return onnx.load_from_string(buf.getvalue())
