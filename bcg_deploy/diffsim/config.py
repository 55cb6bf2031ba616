"""The simulator's settings (``SimConfig``), the state a step returns (``SimState``) and the device both
torch and Warp run on (``resolve_device``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from bcg_deploy.errors import BcgdError


@dataclass
class SimConfig:
    """Simulator settings.

    Attributes:
        num_envs: E, environments stepped in parallel.
        device: "cpu" or "cuda" / "cuda:N"; resolved once (``resolve_device``) for both torch and Warp.
        dtype: "float32" (training) or "float64" (checks); torch dtypes are accepted too.
        physics_dt: substep length (s).
        substeps: physics substeps per control step (the action is held over them).
        gravity: include the MJCF's gravity (False: zero gravity).
        pd_damping: "explicit" (METHOD.md: tau = kp (q_target - q) - kd qd at the substep's start velocity)
            or "implicit" (default; the kd term acts on the new velocity: dt kd is added to M's diagonal for the
            unsaturated joints, as MuJoCo's implicitfast does, which keeps the stiff PD stable at the control
            dt). Contact solves use the same M.
        integrator: "moreau" (default; METHOD.md section 2's Moreau midpoint step, with contact) or "rk4"
            (classic 4th-order Runge-Kutta per substep, as MuJoCo's RK4: contact-free only, explicit PD at every
            stage; for checks and flight phases: energy and momentum drift ~1e-6 where Moreau's are percent).
        bias_velocity: "start" (METHOD.md: bias and PD damping at (q_mid, qd), a first-order scheme) or
            "midpoint" (they are re-evaluated at the predicted midpoint velocity
            qd + (dt/2) M^-1 qfrc_smooth(q_mid, qd): second order, one more RNE pass and solve per substep).
        contact: simulate the foot contact spheres against the ground plane z = 0 (METHOD.md section 2).
        kappa: contact stiffness of the smoothing s(d) = 1 / (1 + exp(-kappa d)) (1/m).
        contact_iterations: projected Gauss-Seidel sweeps of the contact solve.
        contact_step: the Gauss-Seidel step p_i <- proj(p_i - step_i): "scalar" (default; METHOD.md's scalar
            step r_i (sum_j G_ij p_j + c_i) with r_i = 1.8 / ||G_ii||_F instead of 1 / (1 + sum_j det G_ij):
            converges in 10 sweeps and stays Lipschitz in the state) or "component" (diag(G_ii)^-1 times
            the residual: converges in value, but its one-step Jacobian can jump; kept for comparison).
        friction: Coulomb friction coefficient (all envs; per env with ``set_env_params(friction=...)``).
        max_idle_buffers: per-step buffer sets kept for reuse after their autograd graph is freed.
        graphs: replay each step's launches as captured graphs: on CPU Warp's APIC graphs (cuts the
            per-launch Python cost, which dominates for small E), on CUDA one CUDA graph per command list,
            captured and replayed on torch's current stream.
        row_params: every step copies the per-env parameter arrays (``ROW_PARAMS``, friction) into its own
            buffers before its launches, so ``set_param_rows`` changes parameters between steps by a device
            gather, without re-recording and without touching the parameters of steps whose backward is
            pending (BCG's bucket simulators, whose row -> env map changes every step).
    """

    num_envs: int = 1
    device: str = "cpu"
    dtype: str = "float32"
    physics_dt: float = 0.005
    substeps: int = 4
    gravity: bool = True
    pd_damping: str = "implicit"
    integrator: str = "moreau"
    bias_velocity: str = "start"
    contact: bool = True
    kappa: float = 300.0
    contact_iterations: int = 10
    contact_step: str = "scalar"
    friction: float = 1.0
    max_idle_buffers: int = 64
    graphs: bool = True
    row_params: bool = False


ROW_PARAMS = ("act_kp", "act_kd", "act_effort", "dof_armature", "body_mass", "body_ipos", "body_inertia_mat")
"""The per-env model arrays ``SimConfig.row_params`` copies into each step (plus the contact's ``mu``)."""


@dataclass
class SimState:
    """State after a control step, MuJoCo layout.

    q: [E, 36] base position (world, m), base quaternion (w x y z), 29 hinge angles (rad).
    qd: [E, 35] base linear velocity (world frame, m/s), base angular velocity (base frame, rad/s),
        29 hinge rates (rad/s).
    With contact (not differentiable; None without contact):
    contact_depth: [E, NC] penetration of each foot sphere at the last substep's midpoint (m, > 0 inside).
    contact_impulse: [E, NC] normal impulse of each sphere in the last substep (N s).
    foot_force: [E, 2] per foot (RobotSpec.foot_bodies order) normal force, impulse / dt summed over the
        foot's spheres, max over the substeps (N): the BCG trigger.
    """

    q: torch.Tensor
    qd: torch.Tensor
    contact_depth: torch.Tensor | None = None
    contact_impulse: torch.Tensor | None = None
    foot_force: torch.Tensor | None = None


def resolve_device(name: str | torch.device) -> str:
    """One concrete device name for torch and Warp: "cpu" or "cuda:N" (a bare "cuda" is torch's current
    CUDA device, which Warp's own default could differ from). BcgdError for anything else."""
    try:
        dev = torch.device(name)
    except (RuntimeError, TypeError):
        raise BcgdError(f"device {name!r} is not a device (expected cpu or cuda[:N])") from None
    if dev.type == "cpu":
        return "cpu"
    if dev.type != "cuda":
        raise BcgdError(f"device {name!r}: expected cpu or cuda[:N]")
    if not torch.cuda.is_available():
        raise BcgdError(f"device {name!r} requested but CUDA is not available (use --device cpu)")
    index = torch.cuda.current_device() if dev.index is None else dev.index
    if not 0 <= index < torch.cuda.device_count():
        raise BcgdError(f"device {name!r}: this machine has {torch.cuda.device_count()} CUDA devices")
    return f"cuda:{index}"


def dtype_name(dtype) -> str:
    """The precision name, float32 or float64, of a name or a torch / numpy dtype; BcgdError otherwise."""
    if dtype in ("float32", torch.float32, np.float32):
        return "float32"
    if dtype in ("float64", torch.float64, np.float64):
        return "float64"
    raise BcgdError(f"SimConfig.dtype: expected 'float32' or 'float64', got {dtype!r}")
