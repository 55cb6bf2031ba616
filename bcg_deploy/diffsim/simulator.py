"""The differentiable simulator and its torch bridge (settings and state: ``diffsim.config``).

    sim = Simulator(load_robot("g1"), SimConfig(num_envs=64))
    state = sim.step(q, qd, q_target)        # one control step = ``substeps`` physics substeps
    loss(state.q, state.qd).backward()       # gradients reach q, qd and q_target

``step`` is a ``torch.autograd.Function``: its forward replays the recorded Warp launches of one control
step into a ``StepData`` that belongs to that call only; its backward replays the recorded adjoint
launches (the Warp tape of the step) in reverse. The ``StepData`` is held by the autograd graph and
returns to the simulator's pool when the graph is freed, so memory is bounded by the graph's length.
"""

from __future__ import annotations

import dataclasses
import weakref

import numpy as np
import torch
import warp as wp

from bcg_deploy.diffsim import contact as dcontact
from bcg_deploy.diffsim import integrator
from bcg_deploy.diffsim.config import ROW_PARAMS, SimConfig, SimState, dtype_name, resolve_device
from bcg_deploy.diffsim.io import inertia_matrices, make_step_data, put_model
from bcg_deploy.diffsim.solve import tree_key
from bcg_deploy.diffsim.tape import Recorder
from bcg_deploy.diffsim.types import Model, StepData, types_for
from bcg_deploy.errors import BcgdError
from bcg_deploy.robots.spec import RobotSpec


class _Lease:
    """Holds a StepData for one autograd node; gives it back to the pool when garbage-collected."""

    def __init__(self, sim: Simulator, data: StepData, generation: int):
        self.data = data
        self._release = weakref.finalize(self, sim._give_back, data, generation)


class Simulator:
    """Batched, differentiable Moreau-midpoint simulator of a RobotSpec's MJCF with smoothed foot contact."""

    def __init__(self, robot: RobotSpec, cfg: SimConfig | None = None):
        cfg = cfg or SimConfig()
        if cfg.num_envs < 1 or cfg.substeps < 1 or not cfg.physics_dt > 0:
            raise BcgdError(
                f"SimConfig: num_envs and substeps must be >= 1 and physics_dt > 0, got "
                f"{cfg.num_envs}, {cfg.substeps}, {cfg.physics_dt}"
            )
        if cfg.pd_damping not in ("explicit", "implicit"):
            raise BcgdError(f"SimConfig.pd_damping: expected 'explicit' or 'implicit', got {cfg.pd_damping!r}")
        if cfg.contact and not (cfg.kappa > 0 and cfg.contact_iterations >= 0 and cfg.friction >= 0):
            raise BcgdError(
                f"SimConfig: kappa must be > 0, contact_iterations >= 0, friction >= 0; got {cfg.kappa}, "
                f"{cfg.contact_iterations}, {cfg.friction}"
            )
        if cfg.integrator not in ("moreau", "rk4"):
            raise BcgdError(f"SimConfig.integrator: expected 'moreau' or 'rk4', got {cfg.integrator!r}")
        if cfg.integrator == "rk4" and (cfg.contact or cfg.pd_damping != "explicit" or cfg.bias_velocity != "start"):
            raise BcgdError(
                "SimConfig.integrator='rk4' needs contact=False, pd_damping='explicit' and bias_velocity='start' "
                f"(got contact={cfg.contact}, pd_damping={cfg.pd_damping!r}, bias_velocity={cfg.bias_velocity!r})"
            )
        if cfg.bias_velocity not in ("start", "midpoint"):
            raise BcgdError(f"SimConfig.bias_velocity: expected 'start' or 'midpoint', got {cfg.bias_velocity!r}")
        if cfg.contact_step not in dcontact.STEPS:
            steps = sorted(dcontact.STEPS)
            raise BcgdError(f"SimConfig.contact_step: expected one of {steps}, got {cfg.contact_step!r}")
        wp.init()
        self.robot = robot
        self.cfg = cfg
        self.types = types_for(dtype_name(cfg.dtype))
        self.device = str(wp.get_device(resolve_device(cfg.device)))
        self.torch_device = torch.device(self.device)
        self.mjm = robot.load_model(scene=False)
        self.model: Model = put_model(self.mjm, robot, self.types, self.device, cfg.gravity)
        m = self.model
        self.kernels = integrator.build(self.types, m.max_children, tree_key(m.host), m.has_jnt_pos)
        self.nq, self.nv, self.nu = self.model.nq, self.model.nv, self.model.nu
        S = self.types.scalar
        self._zero_frc = wp.zeros((1, self.nv), dtype=S, device=self.device)
        self._zero_gains = tuple(wp.zeros((1, self.nu), dtype=S, device=self.device) for _ in range(3))
        self.contact = None
        self._contact_layout: tuple = ()
        if cfg.contact:
            self.contact = dcontact.put_contact_model(
                self.mjm,
                robot,
                self.types,
                self.device,
                cfg.num_envs,
                cfg.kappa,
                cfg.contact_iterations,
                cfg.friction,
                cfg.contact_step,
            )
            nc = self.contact.num_contacts
            self._contact_kernels = dcontact.build(self.types, nc, tree_key(m.host))
            self._contact_layout = tuple(
                dcontact.contact_layout(self.types, cfg.num_envs, cfg.substeps, nc, self.nv, cfg.contact_iterations)
            )
            self._foot_index = torch.as_tensor(self.contact.con_foot, device=self.torch_device)
        self._warm: set[str] = set()  # command lists run once, so that their modules are loaded
        self._pool: list[StepData] = []
        self._grad_owner: StepData | None = None  # owns the adjoint buffer shared by all leased steps
        self._live = 0
        self._generation = 0
        self._nograd_data: StepData | None = None
        self._eval_data: dict[int, StepData] = {}
        self._views: dict[str, torch.Tensor] | None = None
        h = self.model.host
        rows = np.repeat(np.arange(self.nv), h["dof_Mnum"])
        self._M_rows = torch.as_tensor(rows, device=self.torch_device)
        self._M_cols = torch.as_tensor(h["M_colind"].astype(np.int64), device=self.torch_device)

    # ----------------------------------------------------------------------------------------------
    # Public API
    # ----------------------------------------------------------------------------------------------
    @property
    def num_envs(self) -> int:
        return self.cfg.num_envs

    @property
    def control_dt(self) -> float:
        return self.cfg.physics_dt * self.cfg.substeps

    @property
    def live_steps(self) -> int:
        """Control steps whose buffers are held by live autograd graphs (released with the graph)."""
        return self._live

    def release_buffers(self) -> None:
        """Free the idle per-step buffers kept for reuse (a released step's buffers stay pooled, up to
        ``SimConfig.max_idle_buffers``, since reallocating and re-recording them costs milliseconds)."""
        self._pool.clear()
        if self._live == 0:
            self._grad_owner = None

    def step(self, q: torch.Tensor, qd: torch.Tensor, q_target: torch.Tensor) -> SimState:
        """One control step (``substeps`` x ``physics_dt``) with PD targets held; differentiable in all inputs.

        q [E, NQ], qd [E, NV] in MuJoCo layout; q_target [E, NU] in RobotSpec joint order (rad).
        The base quaternion may be unnormalised (it is normalised inside; outputs are unit).
        """
        q, qd, q_target = self._inputs(q, qd, q_target, self.cfg.num_envs)
        needs_grad = torch.is_grad_enabled() and (q.requires_grad or qd.requires_grad or q_target.requires_grad)
        if not needs_grad:
            d = self._nograd()
            self._forward(d, q, qd, q_target)
            return SimState(d.views["q"][-1].clone(), d.views["qd"][-1].clone(), **self._contact_outputs(d))
        info: dict = {}
        q_out, qd_out = _StepFunction.apply(self, q, qd, q_target, info)
        return SimState(q_out, qd_out, **info)

    def mass_matrix(self, q: torch.Tensor) -> torch.Tensor:
        """Joint-space mass matrix M(q) [B, NV, NV] including armature (not differentiable)."""
        q = self._batch(q, self.nq, "q")
        return self._evaluate(q, torch.zeros(q.shape[0], self.nv, dtype=q.dtype, device=q.device), None)["M"]

    def bias_forces(self, q: torch.Tensor, qd: torch.Tensor) -> torch.Tensor:
        """MuJoCo's qfrc_bias(q, qd) [B, NV]: gravity + Coriolis/centrifugal forces (not differentiable)."""
        return self._evaluate(self._batch(q, self.nq, "q"), self._batch(qd, self.nv, "qd"), None)["bias"]

    def forward_dynamics(self, q: torch.Tensor, qd: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
        """qacc = M^-1 (tau - qfrc_bias) [B, NV] without PD or contact (not differentiable).

        ``tau`` is a generalised force [B, NV], or hinge torques [B, NU] in RobotSpec order.
        """
        q, qd = self._batch(q, self.nq, "q"), self._batch(qd, self.nv, "qd")
        tau = torch.as_tensor(tau, dtype=self.types.torch_dtype, device=self.torch_device)
        if tau.shape[-1] == self.nu and tau.shape[-1] != self.nv:
            full = torch.zeros(tau.shape[0], self.nv, dtype=tau.dtype, device=tau.device)
            full[:, torch.as_tensor(self.model.host["act_dofadr"], device=tau.device)] = tau
            tau = full
        return self._evaluate(q, qd, self._batch(tau, self.nv, "tau"))["qacc"]

    def set_env_params(self, **params: torch.Tensor | np.ndarray) -> None:
        """Override model parameters per env (domain randomisation); shape [E, ...] or [...] (shared).

        Supported: act_kp, act_kd, act_effort [.., NU]; dof_armature [.., NV]; body_mass [.., NB];
        body_ipos [.., NB, 3] (CoM in the body frame, m); body_inertia [.., NB, 3] (principal moments about
        the CoM along MuJoCo's body_iquat axes, kg m^2); friction [E] or scalar (contact Coulomb coefficient).
        Buffers recorded with the old values are dropped.
        """
        t = self.types
        for attr, a, dtype in self._converted(params, self.cfg.num_envs).values():
            arr = wp.array(a.astype(t.np_dtype), dtype=dtype, device=self.device)
            if attr == "mu":
                self.contact.mu = arr
            else:
                setattr(self.model, attr, arr)
        self._drop_recorded()

    def param_table(self, **params: torch.Tensor | np.ndarray) -> dict[str, torch.Tensor]:
        """``set_env_params``'s parameters for N source envs (any N), checked and converted once into the
        simulator's layout and dtype on its device: the table ``set_param_rows`` gathers rows from."""
        t = self.types
        return {
            attr: torch.as_tensor(a.astype(t.np_dtype), device=self.torch_device)
            for attr, a, _ in self._converted(params, None).values()
        }

    def set_param_rows(self, table: dict[str, torch.Tensor], rows: torch.Tensor) -> None:
        """Env e of this simulator takes the parameters of source env ``rows[e]`` of ``table``
        (``param_table``); ``rows`` [E] long on the device. Needs ``SimConfig.row_params``: each step
        copies the parameters into its own buffers, so this is a device gather, with no host read and no
        re-recording, and steps already taken keep their parameters for their backward pass. The first
        call (or one after ``set_env_params`` made a parameter shared) re-records once."""
        if not self.cfg.row_params:
            raise BcgdError("set_param_rows needs SimConfig.row_params=True")
        E = self.cfg.num_envs
        reshaped = False
        for attr in table:
            cur = self._param_array(attr)
            if cur.shape[0] != E:
                new = wp.zeros((E, *cur.shape[1:]), dtype=cur.dtype, device=self.device)
                if attr == "mu":
                    self.contact.mu = new
                else:
                    setattr(self.model, attr, new)
                reshaped = True
        if reshaped:
            self._drop_recorded()
        views = self._param_views()
        with torch.no_grad():
            for attr, src in table.items():
                views[attr].copy_(src.index_select(0, rows))

    # ----------------------------------------------------------------------------------------------
    # Internals
    # ----------------------------------------------------------------------------------------------
    def _converted(self, params: dict, num_envs: int | None) -> dict[str, tuple[str, np.ndarray, type]]:
        """Checked float64 arrays [rows, ...] per parameter: {name: (model attribute, array, Warp dtype)};
        rows must be 1 or ``num_envs`` (any count when None)."""
        t, m = self.types, self.model
        shapes = {
            "act_kp": (m.nu,), "act_kd": (m.nu,), "act_effort": (m.nu,), "dof_armature": (m.nv,),
            "body_mass": (m.nbody,), "body_ipos": (m.nbody, 3), "body_inertia": (m.nbody, 3),
        }  # fmt: skip
        out = {}
        for name, value in params.items():
            if name == "friction":
                out[name] = ("mu", self._friction_array(value, num_envs), t.scalar)
                continue
            if name not in shapes:
                raise BcgdError(f"set_env_params: unknown parameter {name!r}; expected one of {list(shapes)}")
            a = np.asarray(value.detach().cpu() if isinstance(value, torch.Tensor) else value, dtype=np.float64)
            shape = shapes[name]
            if a.shape[a.ndim - len(shape) :] != shape or a.ndim > len(shape) + 1:
                raise BcgdError(f"set_env_params: {name} must have shape [E, *{shape}] or {shape}, got {a.shape}")
            a = a.reshape(-1, *shape)
            if not np.all(np.isfinite(a)):
                raise BcgdError(f"set_env_params: {name} must be finite, got {int((~np.isfinite(a)).sum())} NaN/inf")
            if num_envs is not None and a.shape[0] not in (1, num_envs):
                raise BcgdError(f"set_env_params: {name} needs 1 or {num_envs} rows, got {a.shape[0]}")
            if name == "body_inertia":
                out[name] = ("body_inertia_mat", inertia_matrices(m.host["body_iquat"][None], a), t.mat33)
            else:
                out[name] = (name, a, t.vec3 if len(shape) == 2 else t.scalar)
        return out

    def _friction_array(self, value, num_envs: int | None) -> np.ndarray:  # noqa: ANN001
        if self.contact is None:
            raise BcgdError("set_env_params: friction needs SimConfig.contact=True")
        a = np.asarray(value.detach().cpu() if isinstance(value, torch.Tensor) else value, dtype=np.float64).reshape(-1)
        rows_ok = num_envs is None or a.shape[0] in (1, num_envs)
        if not rows_ok or not np.all(np.isfinite(a)) or np.any(a < 0):
            raise BcgdError(f"set_env_params: friction needs 1 or {num_envs} finite values >= 0, got {a}")
        return a

    def _drop_recorded(self) -> None:
        """Model arrays were replaced: buffers recorded with the old ones are dropped."""
        self._generation += 1
        self._pool.clear()
        self._grad_owner = None
        self._nograd_data = None
        self._eval_data.clear()
        self._views = None

    def _param_array(self, attr: str):  # noqa: ANN202 - a wp.array
        return self.contact.mu if attr == "mu" else getattr(self.model, attr)

    def _param_views(self) -> dict[str, torch.Tensor]:
        """Torch views of the current per-env parameter arrays (``ROW_PARAMS``, mu), made once per set."""
        if self._views is None:
            names = ROW_PARAMS + (("mu",) if self.contact is not None else ())
            self._views = {n: wp.to_torch(self._param_array(n)) for n in names}
        return self._views

    def _batch(self, x, n: int, name: str) -> torch.Tensor:
        x = torch.as_tensor(x).to(device=self.torch_device, dtype=self.types.torch_dtype)
        if x.dim() != 2 or x.shape[1] != n:
            raise BcgdError(f"{name}: expected shape [B, {n}], got {tuple(x.shape)}")
        return x

    def _inputs(self, q, qd, q_target, num_envs: int):
        out = []
        for x, n, name in ((q, self.nq, "q"), (qd, self.nv, "qd"), (q_target, self.nu, "q_target")):
            x = self._batch(x, n, name)
            if x.shape[0] != num_envs:
                raise BcgdError(f"{name}: expected {num_envs} envs (SimConfig.num_envs), got {x.shape[0]}")
            out.append(x)
        return out

    def _new_data(self, num_envs: int, substeps: int, grad: bool) -> StepData:
        midpoint = self.cfg.bias_velocity == "midpoint"
        extra = self._contact_layout
        rk4 = self.cfg.integrator == "rk4"
        if rk4:  # four virtual substeps (the Runge-Kutta stages) per physics substep
            substeps *= 4
            extra = tuple(integrator.rk4_layout(self.types, num_envs, substeps, self.nv))
        if grad and self._grad_owner is None:
            self._grad_owner = make_step_data(self.model, num_envs, substeps, midpoint, extra_layout=extra)
        shared = self._grad_owner if grad else None
        d = make_step_data(
            self.model, num_envs, substeps, midpoint, shared_grads=shared, extra_layout=extra, grads=grad
        )
        model, contact_model = self._step_params(d)
        contact = (self._contact_kernels, contact_model) if self.contact is not None else None
        integrator.record_step(
            model, self.kernels, d, self.cfg.physics_dt, self._zero_frc, self._zero_frc, grad,
            implicit_damping=self.cfg.pd_damping == "implicit", bias_midpoint=midpoint, contact=contact, rk4=rk4,
        )  # fmt: skip
        self._capture(d)
        return d

    def _step_params(self, d: StepData) -> tuple[Model, object]:
        """The model (and contact model) ``d``'s launches are recorded with: with ``row_params`` they read
        the step's own copies of the per-env parameters (``d.param_copies``: (copy, name), filled by
        ``_forward`` from the current arrays); otherwise the shared model arrays."""
        d.param_copies = []
        if not self.cfg.row_params:
            return self.model, self.contact
        copies = {n: wp.empty_like(getattr(self.model, n)) for n in ROW_PARAMS}
        d.param_copies = [(wp.to_torch(c), n) for n, c in copies.items()]
        contact = self.contact
        if contact is not None:
            mu = wp.empty_like(contact.mu)
            contact = dataclasses.replace(contact, mu=mu)
            d.param_copies.append((wp.to_torch(mu), "mu"))
        return dataclasses.replace(self.model, **copies), contact

    def _capture(self, d: StepData) -> None:
        """Replace the command lists by captured graphs (``SimConfig.graphs``).

        CPU: Warp's APIC graphs in chunks (each replayed once as a check, harmless on CPU). CUDA: each
        list becomes ONE CUDA graph captured on torch's current stream (the stream ``_forward`` and
        ``_backward`` replay it on, after torch's copies into the step's buffers); recording a launch
        already loaded its module, and nothing is replayed at capture time (the buffers hold no state yet)."""
        if not self.cfg.graphs:
            return
        cuda = self.torch_device.type == "cuda"
        for name in ("fwd_cmds", "adj_cmds"):
            cmds = getattr(d, name)
            if not cmds:
                continue
            if cuda:
                setattr(d, name, [_capture_graph(cmds, self.device, self._stream())])
                continue
            if name not in self._warm:
                # A module compiled while capturing leaves the graph empty: load them all first.
                for cmd in cmds:
                    cmd.launch()
                self._warm.add(name)
            chunks = [cmds[i : i + _GRAPH_CHUNK] for i in range(0, len(cmds), _GRAPH_CHUNK)]
            setattr(d, name, [c for chunk in chunks for c in _captured_or_plain(chunk, self.device)])

    def _nograd(self) -> StepData:
        if self._nograd_data is None:
            self._nograd_data = self._new_data(self.cfg.num_envs, self.cfg.substeps, grad=False)
        return self._nograd_data

    def _acquire(self) -> _Lease:
        d = self._pool.pop() if self._pool else self._new_data(self.cfg.num_envs, self.cfg.substeps, grad=True)
        self._live += 1
        return _Lease(self, d, self._generation)

    def _give_back(self, d: StepData, generation: int) -> None:
        self._live -= 1
        if generation == self._generation and len(self._pool) < self.cfg.max_idle_buffers:
            self._pool.append(d)

    def _stream(self):
        if self.torch_device.type == "cuda":
            return wp.stream_from_torch(torch.cuda.current_stream(self.torch_device))
        return None

    def _forward(self, d: StepData, q, qd, q_target) -> None:
        with torch.no_grad():
            d.views["q"][0].copy_(q)
            d.views["qd"][0].copy_(qd)
            d.views["q_target"].copy_(q_target)
            if getattr(d, "param_copies", None):
                views = self._param_views()
                for dst, name in d.param_copies:
                    dst.copy_(views[name])
        stream = self._stream()
        for cmd in d.fwd_cmds:
            cmd.launch(stream)

    def _backward(self, d: StepData, grad_q, grad_qd):
        # The recorded adjoint sequence zeroes each substep's adjoints itself (integrator.record_step).
        gv = d.grad_views
        gv["q_target"].zero_()
        for name, g in (("q", grad_q), ("qd", grad_qd)):
            if g is None:
                gv[name][-1].zero_()
            else:
                gv[name][-1].copy_(g)
        stream = self._stream()
        for cmd in d.adj_cmds:
            cmd.launch(stream)
        return gv["q"][0].clone(), gv["qd"][0].clone(), gv["q_target"].clone()

    def _contact_outputs(self, d: StepData) -> dict:
        """Penetration and normal impulse per sphere (last substep) and per-foot normal force (N, max over
        the substeps of impulse / dt summed over the foot's spheres); detached copies."""
        if self.contact is None:
            return {}
        with torch.no_grad():
            normal = d.views["con_impulse"][..., 2]  # [S, E, NC]
            per_foot = torch.zeros(*normal.shape[:2], len(self.contact.feet), dtype=normal.dtype, device=normal.device)
            per_foot.index_add_(2, self._foot_index, normal)
            return {
                "contact_depth": d.views["con_depth"][-1].clone(),
                "contact_impulse": normal[-1].clone(),
                "foot_force": (per_foot / self.cfg.physics_dt).amax(dim=0),
            }

    def _eval(self, batch: int) -> StepData:
        d = self._eval_data.get(batch)
        if d is None:
            m = self.model
            d = make_step_data(m, batch, 1, grads=False)
            d.qfrc_applied = wp.zeros((batch, self.nv), dtype=self.types.scalar, device=self.device)
            rec = Recorder(self.device, batch, grad=False)
            integrator.record_substep(
                m, self.kernels, d, 0, 1.0, rec, d.qfrc_applied, self._zero_frc, gains=self._zero_gains, h=0.0
            )
            d.fwd_cmds = rec.fwd
            self._capture(d)
            self._eval_data[batch] = d
        return d

    def _evaluate(self, q: torch.Tensor, qd: torch.Tensor, tau: torch.Tensor | None) -> dict:
        b = q.shape[0]
        d = self._eval(b)
        applied = wp.to_torch(d.qfrc_applied)
        with torch.no_grad():
            applied.copy_(tau if tau is not None else torch.zeros_like(qd))
            d.views["q_target"].zero_()
        self._forward(d, q, qd, d.views["q_target"])
        qM = d.views["qM"][0]
        M = torch.zeros(b, self.nv, self.nv, dtype=qM.dtype, device=qM.device)
        M[:, self._M_rows, self._M_cols] = qM
        M[:, self._M_cols, self._M_rows] = qM
        return {"M": M, "bias": d.views["qfrc_bias"][0].clone(), "qacc": d.views["dqd"][0].clone()}


# Warp 1.19's CPU graphs replay at most 10 launches: a longer capture records nothing (Warp says "no
# operations recorded", for the contact step's launches). Capture in chunks below that.
_GRAPH_CHUNK = 7


def _captured_or_plain(cmds: list, device: str) -> list:
    """``cmds`` as one captured graph, replayed once as a check; the commands themselves if the capture
    recorded nothing (Warp 1.19's CPU capture records no launch of ``smooth_kernel`` on some models, e.g. a
    free body without hinges, as the free-foot model of bench/contact_validation.py)."""
    graph = _capture_graph(cmds, device)
    try:
        graph.launch()
    except RuntimeError:
        return list(cmds)
    return [graph]


def _capture_graph(cmds: list, device: str, stream=None) -> _GraphLaunch:  # noqa: ANN001 - a wp.Stream
    """``cmds`` captured as one graph; on CUDA on ``stream`` (torch's), which its replays use too."""
    wp.capture_begin(device=device, stream=stream, force_module_load=False)
    try:
        for cmd in cmds:
            cmd.launch(stream)
    finally:
        graph = wp.capture_end(device=device, stream=stream)
    return _GraphLaunch(graph)


class _GraphLaunch:
    """A captured graph with the ``launch(stream)`` interface of a recorded command."""

    def __init__(self, graph):
        self.graph = graph

    def launch(self, stream=None) -> None:
        wp.capture_launch(self.graph, stream=stream)


class _StepFunction(torch.autograd.Function):
    """One control step; backward replays the step's recorded adjoint launches (its Warp tape)."""

    @staticmethod
    def forward(ctx, sim: Simulator, q, qd, q_target, info: dict):
        lease = sim._acquire()
        sim._forward(lease.data, q, qd, q_target)
        ctx.sim, ctx.lease = sim, lease
        info.update(sim._contact_outputs(lease.data))
        return lease.data.views["q"][-1].clone(), lease.data.views["qd"][-1].clone()

    @staticmethod
    def backward(ctx, grad_q, grad_qd):
        gq, gqd, gt = ctx.sim._backward(ctx.lease.data, grad_q, grad_qd)
        return None, gq, gqd, gt, None
