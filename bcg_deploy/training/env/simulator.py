"""The env's simulator: built from a ``TrainConfig``, and its per-env physical parameters (domain
randomisation) handed to it where it accepts them.

- ``make_simulator(cfg, robot, device, num_envs)``: the differentiable simulator of a config.
- ``sim_param_arrays(sim, robot, params)``: the simulator's per-env model arrays for ``EnvParams``.
- ``PARAM_GROUPS``: the arrays set together.
- ``apply_params_to_sim(sim, robot, params)``: set them group by group, checked, reverted where rejected.
"""

from __future__ import annotations

from typing import Any

import torch

from bcg_deploy.diffsim import SimConfig, Simulator
from bcg_deploy.errors import BcgdError
from bcg_deploy.robots import RobotSpec
from bcg_deploy.training.config import TrainConfig
from bcg_deploy.training.env import domain_rand as dr


def make_simulator(cfg: TrainConfig, robot: RobotSpec, device: torch.device, num_envs: int | None = None) -> Any:
    """Build the differentiable simulator for ``cfg`` (E envs, default ``cfg.env.num_envs``; dtype, dt,
    substeps, kappa)."""
    sim = SimConfig(
        num_envs=cfg.env.num_envs if num_envs is None else int(num_envs),
        device=str(device),
        dtype=cfg.sim.dtype,
        physics_dt=cfg.sim.physics_dt,
        substeps=cfg.sim.substeps,
        gravity=cfg.sim.gravity,
        kappa=cfg.sim.kappa,
        contact_iterations=cfg.sim.contact_iterations,
        contact_step=cfg.sim.contact_step,
        bias_velocity=cfg.sim.bias_velocity,
        graphs=cfg.sim.graphs,
    )
    return Simulator(robot, sim)


def sim_param_arrays(sim: Any, robot: RobotSpec, params: dr.EnvParams) -> dict[str, torch.Tensor]:
    """The simulator's per-env model arrays (``Simulator.set_env_params`` names) for ``params``.

    kp, kd scale the RobotSpec gains; armature scales the hinge dofs' armature; link masses are scaled
    (with their rotational inertia) and the pelvis gets ``base_mass_add`` kg (inertia scaled in
    proportion); link CoMs move by ``link_com_offset`` (body frame). ``friction`` is the Coulomb
    coefficient of the foot contacts (used once the simulator has contact).
    """
    mjm = robot.load_model(scene=False)
    f64 = torch.float64
    kp = torch.as_tensor(robot.kp, dtype=f64) * params.kp_scale.cpu()
    kd = torch.as_tensor(robot.kd, dtype=f64) * params.kd_scale.cpu()
    arm = torch.as_tensor(mjm.dof_armature, dtype=f64).expand(params.kp_scale.shape[0], -1).clone()
    arm[:, 6:] = arm[:, 6:] * params.armature_scale.cpu()
    mass0 = torch.as_tensor(mjm.body_mass, dtype=f64)  # [NB+1], world first
    scale = torch.ones(params.kp_scale.shape[0], mass0.shape[0], dtype=f64)
    scale[:, 1:] = params.link_mass_scale.cpu()
    scale[:, 1] = (mass0[1] + params.base_mass_add.cpu()) / mass0[1]
    ipos = torch.as_tensor(mjm.body_ipos, dtype=f64).expand(scale.shape[0], -1, -1).clone()
    ipos[:, 1:] = ipos[:, 1:] + params.link_com_offset.cpu()
    return {
        "act_kp": kp,
        "act_kd": kd,
        "dof_armature": arm,
        "body_mass": mass0 * scale,
        "body_inertia": torch.as_tensor(mjm.body_inertia, dtype=f64) * scale[..., None],
        "body_ipos": ipos,
        "friction": params.friction.cpu(),
    }


PARAM_GROUPS = (
    ("act_kp", "act_kd", "act_effort"),
    ("dof_armature",),
    ("body_mass", "body_ipos", "body_inertia"),
    ("friction",),
)
"""Simulator arrays set together (each group's rows must agree; the kernels index a group by one row count)."""


def apply_params_to_sim(sim: Any, robot: RobotSpec, params: dr.EnvParams) -> dict[str, bool]:
    """Hand the per-env physical parameters to the simulator where it accepts them; report which.

    Each group is applied, then checked with one no-grad step of every env from the default pose; a
    group whose arrays the simulator rejects (``BcgdError``), or that makes any env non-finite, is
    reverted to the nominal (shared) values and reported as not applied, so a simulator limitation
    never silently poisons training. Any other error (a failed kernel launch, a compile error)
    propagates instead of silently turning domain randomisation off.
    """
    setter = getattr(sim, "set_env_params", None)
    arrays = sim_param_arrays(sim, robot, params)
    arrays["act_effort"] = torch.as_tensor(robot.effort_limit, dtype=torch.float64).expand_as(arrays["act_kp"])
    nominal = sim_param_arrays(sim, robot, dr.nominal_params(params))
    nominal["act_effort"] = arrays["act_effort"]
    applied: dict[str, bool] = {}
    for group in PARAM_GROUPS:
        ok = setter is not None
        if ok:
            try:
                setter(**{n: arrays[n] for n in group})
            except BcgdError:  # the simulator rejects this parameter (e.g. friction without contact): reported
                ok = False
            # Anything else (a kernel or NVRTC error, a bug) propagates: it must never turn DR off silently.
            ok = ok and _sim_self_check(sim, robot)
            if not ok:
                try:
                    setter(**{n: nominal[n][:1] for n in group})
                except BcgdError:  # rejected as above: the simulator keeps its nominal values
                    pass
        applied.update({n: ok for n in group if n != "act_effort"})
    applied["joint_friction"] = False  # the G1 model has no joint friction (frictionloss 0) to scale
    return applied


def _sim_self_check(sim: Any, robot: RobotSpec) -> bool:
    """One no-grad control step of every env from the default standing pose is finite."""
    E = sim.num_envs
    dt = sim.types.torch_dtype if hasattr(sim, "types") else torch.float32
    dev = getattr(sim, "torch_device", "cpu")
    q = torch.zeros(E, 7 + robot.num_joints, dtype=dt, device=dev)
    q[:, :3] = torch.as_tensor(robot.default_root_pos, dtype=dt)
    q[:, 3] = 1.0
    q[:, 7:] = torch.as_tensor(robot.default_joint_pos, dtype=dt)
    qd = torch.zeros(E, 6 + robot.num_joints, dtype=dt, device=dev)
    with torch.no_grad():
        s = sim.step(q, qd, q[:, 7:].clone())
    return bool(torch.isfinite(s.q).all() and torch.isfinite(s.qd).all())
