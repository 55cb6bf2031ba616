"""Parity inputs and the onnxruntime-vs-torch comparison run on every export.

Inputs (all float32, raw MuJoCo-convention state + time step):
- every frame of the baked reference clip (the states the policy is meant to see),
- noisy copies around them (position, orientation, joints, velocities, time step offsets that run
  past both ends of the clip so the clamping is exercised, some fractional time steps, and some
  arbitrary orientations),
- the states of a short MuJoCo rollout of the torch policy itself (scene model, position actuators,
  the training physics dt), started from the clip's first frame.
For the ``obs`` signature the observation module turns them into observations and the training noise
is added (seeded).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import mujoco
import numpy as np
import torch
from torch import nn

from bcg_deploy.robots import RobotSpec
from bcg_deploy.rotations import quat_numpy as Q


@dataclass
class StateSamples:
    """Raw states: q [N, 36], qd [N, 35] (MuJoCo layout), t [N] (float time step)."""

    q: np.ndarray
    qd: np.ndarray
    t: np.ndarray
    sources: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.q.shape[0])


def clip_states(arrays: dict[str, Any]) -> StateSamples:
    """The reference clip's frames as raw states (angular velocity turned into the body frame)."""
    a = {k: np.asarray(v.detach().cpu() if isinstance(v, torch.Tensor) else v, dtype=np.float64) for k, v in
         arrays.items() if k != "fps"}  # fmt: skip
    n = a["root_pos"].shape[0]
    rot = Q.to_matrix_mujoco(a["root_quat"], normalize=True)
    ang_body = np.einsum("nji,nj->ni", rot, a["root_ang_vel"])
    q = np.concatenate([a["root_pos"], a["root_quat"], a["joint_pos"]], axis=1)
    qd = np.concatenate([a["root_lin_vel"], ang_body, a["joint_vel"]], axis=1)
    return StateSamples(q, qd, np.arange(n, dtype=np.float64), {"clip_frames": n})


def noisy_states(base: StateSamples, count: int, rng: np.random.Generator) -> StateSamples:
    """``count`` states drawn around ``base`` (10% with an arbitrary orientation)."""
    i = rng.integers(0, len(base), count)
    q, qd = base.q[i].copy(), base.qd[i].copy()
    q[:, :3] += rng.normal(0, 0.05, (count, 3))
    quat = q[:, 3:7] + rng.normal(0, 0.05, (count, 4))
    wild = rng.random(count) < 0.1
    quat[wild] = rng.normal(size=(int(wild.sum()), 4))
    q[:, 3:7] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
    q[:, 7:] += rng.normal(0, 0.1, q[:, 7:].shape)
    qd += rng.normal(0, 0.3, qd.shape) * np.r_[np.ones(6), np.full(qd.shape[1] - 6, 3.0)]
    t = base.t[i] + rng.integers(-4, 5, count) + (rng.random(count) < 0.2) * rng.random(count)  # some fractional
    return StateSamples(q, qd, t, {"noisy": count})


def mujoco_rollout(
    robot: RobotSpec, policy: nn.Module, start: StateSamples, steps: int, physics_dt: float, substeps: int
) -> StateSamples:
    """Run the torch raw-state ``policy`` in MuJoCo (scene model, its position actuators) for
    ``steps`` control steps from ``start``'s first state; return the states it saw."""
    m = robot.load_model(scene=True)
    m.opt.timestep = physics_dt
    d = mujoco.MjData(m)
    d.qpos[:] = start.q[0]
    d.qvel[:] = start.qd[0]
    mujoco.mj_forward(m, d)
    qs, qds = [], []
    with torch.no_grad():
        for k in range(steps):
            qs.append(d.qpos.copy())
            qds.append(d.qvel.copy())
            x = raw_inputs(d.qpos[None], d.qvel[None], np.array([float(k)]))
            target = policy(*x)[1][0].numpy().astype(np.float64)
            d.ctrl[:] = target
            for _ in range(substeps):
                mujoco.mj_step(m, d)
            if not np.all(np.isfinite(d.qpos)):
                break
    n = len(qs)
    return StateSamples(np.array(qs), np.array(qds), np.arange(n, dtype=np.float64), {"mujoco_rollout": n})


def concat(*parts: StateSamples) -> StateSamples:
    sources: dict[str, int] = {}
    for p in parts:
        for k, v in p.sources.items():
            sources[k] = sources.get(k, 0) + v
    return StateSamples(
        np.concatenate([p.q for p in parts]),
        np.concatenate([p.qd for p in parts]),
        np.concatenate([p.t for p in parts]),
        sources,
    )


def raw_inputs(q: np.ndarray, qd: np.ndarray, t: np.ndarray, dtype=torch.float32) -> tuple[torch.Tensor, ...]:
    """The raw ONNX inputs (base_pos, base_quat, base_lin_vel, base_ang_vel, joint_pos, joint_vel,
    time_step [B, 1]) from MuJoCo-layout states."""
    q = torch.as_tensor(np.asarray(q), dtype=dtype)
    qd = torch.as_tensor(np.asarray(qd), dtype=dtype)
    ts = torch.as_tensor(np.asarray(t), dtype=dtype).reshape(-1, 1)
    return q[:, 0:3], q[:, 3:7], qd[:, 0:3], qd[:, 3:6], q[:, 7:], qd[:, 6:], ts


def compare(
    onnx_out: list[list[np.ndarray]], torch_out: list[list[np.ndarray]], names: tuple[str, ...]
) -> dict[str, Any]:
    """Max abs / norm-wise relative error per output over all chunks."""
    per: dict[str, dict[str, float]] = {}
    for j, name in enumerate(names):
        a = np.concatenate([c[j].reshape(len(c[j]), -1) for c in onnx_out]).astype(np.float64)
        b = np.concatenate([c[j].reshape(len(c[j]), -1) for c in torch_out]).astype(np.float64)
        if not np.all(np.isfinite(a)) or not np.all(np.isfinite(b)):
            per[name] = {"max_abs_err": float("inf"), "max_rel_err": float("inf")}
            continue
        err = float(np.abs(a - b).max()) if a.size else 0.0
        scale = float(np.abs(b).max()) if b.size else 0.0
        per[name] = {"max_abs_err": err, "max_rel_err": err / scale if scale > 0 else err}
    return {
        "max_abs_err": max(v["max_abs_err"] for v in per.values()),
        "max_rel_err": max(v["max_rel_err"] for v in per.values()),
        "per_output": per,
    }
