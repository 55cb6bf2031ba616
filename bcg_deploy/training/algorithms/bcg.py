"""Bundled Contact Gradients (METHOD.md section 4): a ``Transition`` (see ``training/env/imitation.py``) that
smooths the first-order policy gradient at stiff foot contacts by averaging perturbed branches.

Per env and control step k, ``BundledTransition.__call__(q, qd, q_target)``:

- Trigger: an env that is not in a bundle starts one when the previous control step's per-foot normal
  force (``TransitionOut.foot_force`` [E, 2], N: the foot's sphere impulses / dt summed, max over the
  substeps) exceeds ``tau`` for some foot. A fresh (reset) env has no previous force and does not trigger.
- Perturbation: B branches x^(i) = x_k + stopgrad(dx^(i)). dx^(i) changes only the joint angles and
  rates of the triggering leg (both legs if both feet trigger; the floating base is never perturbed):
  dq = J+ dp, dqd = J+ dv with dp ~ N(0, sigma_p^2 I3), dv ~ N(0, sigma_v^2 I3), J the 3 x 6 positional
  Jacobian (world frame) of the foot body origin (ankle_roll_link) w.r.t. that leg's hinges at q_k,
  J+ = J^T (J J^T + lambda I)^-1, then clamped per joint to +/- ``max_dq`` / ``max_dqd`` when those are
  set (default: no clamp). Offsets are drawn from the transition's own generator (so plain and
  bundled runs with one seed see the same policy, reset and exploration noise) and are constants.
- Evolution: the branches of a bundling env evolve H control steps, each from its own state, under the
  action the env passes in (a_k from the nominal state first, then the policy on the average).
- Aggregation: after every control step a bundling env's returned q/qd is the branch average:
  arithmetic mean of base position, joint angles and all velocities; the root quaternion is
  sign-aligned to x_k's, averaged and renormalised. The env computes observation, reward and the next
  action from it; after H steps the nominal rollout resumes from it. The returned foot force of a
  bundling env is the branch mean (it decides the next trigger).
- Gradient: the average is a differentiable mean of ``Simulator.step`` outputs whose inputs are
  x_k + constant (first step) or the branch's own previous state (later steps), so autograd gives
  Z_bar_{t+1} = (1/B) sum_i (F_x^i Z^i_t + F_a^i U_t) with Z^i_k = Z_k.
- A change the env makes to the state between two bundle steps (a push: a constant velocity kick) is
  applied to every branch (as a constant).

Batching: each control step is ONE simulator call whose rows are the non-bundling envs followed by
B rows per bundling env, padded with copies of the first row up to ``bucket_size`` rows; one simulator
per bucket size (the env simulator's ``SimConfig`` with another ``num_envs``) is built on first use.
The env's per-env physical parameters (domain randomisation groups the env applied) are replicated onto
the rows: a parameter group that is equal for all envs is set once, shared; a group that differs per
env is converted once into a table (``Simulator.param_table``) whose rows every step gathers on the device
for its row -> env map (``Simulator.set_param_rows``; the bucket simulators copy their parameters into each
step, ``SimConfig.row_params``, so nothing is re-recorded and no host read is needed; they replay launches
without CPU graphs, which record 3x faster and step about as fast). One host read per step remains: the
numbers of bundling, starting and continuing envs and triggering feet, which size the step's tensors.
With no bundle open, the env's own simulator steps the E envs exactly as ``SimTransition`` does.

Per-step counters go to ``TransitionOut.extras`` (summed over a window by ``SHAC.rollout``, logged by
the runner): ``bcg_starts`` bundles started, ``bcg_start_feet`` triggering feet, ``bcg_bundled_envs``
env-steps inside a bundle, ``bcg_branch_rows`` branch rows stepped, ``bcg_sim_rows`` simulator rows
stepped (nominal + branch + padding), ``bcg_param_uploads`` (parameter row gathers),
``bcg_time_s`` forward wall time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from dataclasses import dataclass
from typing import Any

import mujoco
import torch

from bcg_deploy.errors import BcgdError
from bcg_deploy.observations.kinematics import Kinematics
from bcg_deploy.robots import RobotSpec
from bcg_deploy.rotations.quat_torch import quat_normalize
from bcg_deploy.training.config import BCGCfg
from bcg_deploy.training.config_checks import check_bcg_cfg
from bcg_deploy.training.env import domain_rand as dr
from bcg_deploy.training.env.imitation import TransitionOut
from bcg_deploy.training.env.simulator import PARAM_GROUPS, sim_param_arrays

# ---------------------------------------------------------------------------------------------
# pure helpers


@dataclass(frozen=True)
class LegChain:
    """The hinges from the root to one foot body: ``body`` indexes ``RobotSpec.body_names``;
    ``qpos`` / ``dof`` are the hinges' indices in q [.., 36] / qd [.., 35], root to foot; ``bodies``
    the body (``RobotSpec.body_names`` index) each hinge moves, ``axes`` / ``anchors`` each hinge's
    axis (unit) and anchor point (m) in that body's frame (MuJoCo ``jnt_axis`` / ``jnt_pos``)."""

    foot: str
    body: int
    qpos: tuple[int, ...]
    dof: tuple[int, ...]
    bodies: tuple[int, ...]
    axes: tuple[tuple[float, float, float], ...]
    anchors: tuple[tuple[float, float, float], ...]


def leg_chains(robot: RobotSpec) -> tuple[LegChain, ...]:
    """One ``LegChain`` per ``robot.foot_bodies`` entry (G1: 6 hinges each), from the compiled MJCF."""
    m = robot.load_model(scene=False)
    chains = []
    for name in robot.foot_bodies:
        body = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, name)
        if body < 1:
            raise ValueError(f"{robot.name}: foot body {name!r} is not in the model")
        joints: list[int] = []
        b = body
        while b > 0:
            joints += [
                j
                for j in range(m.body_jntadr[b], m.body_jntadr[b] + m.body_jntnum[b])
                if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE
            ]
            b = m.body_parentid[b]
        joints.reverse()
        chains.append(
            LegChain(
                foot=name,
                body=body - 1,
                qpos=tuple(int(m.jnt_qposadr[j]) for j in joints),
                dof=tuple(int(m.jnt_dofadr[j]) for j in joints),
                bodies=tuple(int(m.jnt_bodyid[j]) - 1 for j in joints),
                axes=tuple(tuple(float(x) for x in m.jnt_axis[j]) for j in joints),
                anchors=tuple(tuple(float(x) for x in m.jnt_pos[j]) for j in joints),
            )
        )
    return tuple(chains)


def chain_tensors(chain: LegChain, dtype: torch.dtype, device: torch.device | str) -> tuple[torch.Tensor, ...]:
    """The chain's hinge bodies [k] (long), axes [k, 3, 1] and anchors [k, 3, 1] as tensors (made once by
    a caller that keeps them: each creation is a host-to-device copy)."""
    bodies = torch.as_tensor(chain.bodies, device=device)
    axis = torch.as_tensor(chain.axes, dtype=dtype, device=device)[..., None]
    anchor = torch.as_tensor(chain.anchors, dtype=dtype, device=device)[..., None]
    return bodies, axis, anchor


def foot_jacobian(
    kin: Kinematics, q: torch.Tensor, chain: LegChain, consts: tuple[torch.Tensor, ...] | None = None
) -> torch.Tensor:
    """Positional Jacobian [n, 3, k] (world frame, m/rad) of the foot body origin w.r.t. the chain's
    k hinge angles at configurations ``q`` [n, 36] (detached; computed in the kinematics' dtype).
    ``consts``: ``chain_tensors(chain, kin's dtype, q's device)``, if the caller keeps them.

    Column j = a_j x (p_foot - p_j), with a_j the hinge's world axis and p_j its world anchor (both
    fixed under the hinge's own rotation, so read off the moved body's world transform): one forward
    kinematics pass, no autograd."""
    dtype = kin._c0.dtype
    bodies, axis, anchor = chain_tensors(chain, dtype, q.device) if consts is None else consts
    with torch.no_grad():
        x = torch.nan_to_num(q.detach().to(dtype), nan=0.0, posinf=0.0, neginf=0.0)
        t = kin.transforms(x)  # [n, NB, 4, 4]
        tb = t.index_select(1, bodies)  # [n, k, 4, 4]
        rot, pos = tb[..., :3, :3], tb[..., :3, 3]
        a = (rot @ axis)[..., 0]
        p = pos + (rot @ anchor)[..., 0]
        cols = torch.linalg.cross(a, t[:, chain.body, None, :3, 3] - p, dim=-1)  # [n, k, 3]
    return cols.transpose(1, 2)


def damped_pinv(jac: torch.Tensor, damping: float) -> torch.Tensor:
    """Damped pseudoinverse J^T (J J^T + damping I)^-1 [n, k, m] of Jacobians ``jac`` [n, m, k]."""
    m = jac.shape[-2]
    eye = torch.eye(m, dtype=jac.dtype, device=jac.device)
    a = jac @ jac.transpose(-1, -2) + damping * eye
    return torch.linalg.solve(a, jac).transpose(-1, -2)  # (A^-1 J)^T = J^T A^-1 (A symmetric)


def _clamp(x: torch.Tensor, bound: float | None) -> torch.Tensor:
    """``x`` clamped element-wise to [-bound, bound]; unchanged when ``bound`` is None."""
    return x if bound is None else x.clamp(-bound, bound)


def average_branches(q: torch.Tensor, qd: torch.Tensor, ref_quat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Aggregate branch states q [n, B, 36], qd [n, B, 35] into [n, 36], [n, 35] (differentiable).

    Positions, joint angles and velocities: arithmetic mean. Root quaternion (w x y z): each branch's
    sign aligned to ``ref_quat`` [n, 4] (constant), then mean, then normalised.
    """
    quat = q[..., 3:7]
    flip = ((quat.detach() * ref_quat.detach()[:, None]).sum(-1, keepdim=True) < 0).to(q.dtype)
    quat = quat * (1.0 - 2.0 * flip)
    mean = q.mean(dim=1)
    q_avg = torch.cat((mean[:, :3], quat_normalize(quat.mean(dim=1)), mean[:, 7:]), dim=-1)
    return q_avg, qd.mean(dim=1)


def bucket_size(rows: int, minimum: int = 16) -> int:
    """Simulator size for ``rows`` rows: at least ``minimum``, else rounded up to a quarter-octave step
    (multiples of max(8, 2^(floor(log2 rows) - 2))), so padding wastes at most about 25 %."""
    if rows <= minimum:
        return minimum
    granule = max(8, 2 ** (int(math.floor(math.log2(rows))) - 2))
    return int(math.ceil(rows / granule) * granule)


# ---------------------------------------------------------------------------------------------
# parameter replication


@dataclass
class _ParamPlan:
    """Simulator parameter arrays of the env: ``shared`` (one row, set once) and ``per_row`` ([E, ...])."""

    shared: list[dict[str, torch.Tensor]]
    per_row: dict[str, torch.Tensor]


def _param_plan(env: Any) -> _ParamPlan:
    """What the env applied to its simulator (``env.sim_params_applied``), split into groups equal for
    all envs (shared) and groups that differ per env; groups the env could not apply stay nominal."""
    robot, sim = env.robot, env.sim
    applied = getattr(env, "sim_params_applied", {}) or {}
    arrays = sim_param_arrays(sim, robot, env.params)
    nominal = sim_param_arrays(sim, robot, dr.nominal_params(env.params))
    effort = torch.as_tensor(robot.effort_limit, dtype=torch.float64).expand_as(arrays["act_kp"])
    arrays["act_effort"] = nominal["act_effort"] = effort
    shared: list[dict[str, torch.Tensor]] = []
    per_row: dict[str, torch.Tensor] = {}
    for group in PARAM_GROUPS:
        if not all(applied.get(n, False) for n in group if n != "act_effort"):
            shared.append({n: nominal[n][:1] for n in group})
            continue
        if all(torch.equal(arrays[n], arrays[n][:1].expand_as(arrays[n])) for n in group):
            shared.append({n: arrays[n][:1] for n in group})
        else:
            per_row.update({n: arrays[n] for n in group})
    return _ParamPlan(shared, per_row)


class _Bucket:
    """A simulator of one bucket size (``used``: stepped since the last window start)."""

    def __init__(self, sim: Any) -> None:
        self.sim = sim
        self.used = True


@dataclass(frozen=True)
class _Counts:
    """One step's host-side counts: bundling envs, bundles started, continued, triggering feet per foot."""

    bundled: int
    started: int
    continued: int
    feet: tuple[int, ...]


# ---------------------------------------------------------------------------------------------
# the transition


class BundledTransition:
    """SHAC + BCG physics for ``ImitationEnv`` (the ``Transition`` protocol); see the module docstring.

    ``BundledTransition(cfg.bcg, env)``; ``seed`` seeds the perturbation generator (default: derived
    from ``torch.initial_seed()`` without drawing from the global RNG). ``last_offsets`` holds the
    (env ids, dq [n, B, 36], dqd [n, B, 35]) of the bundles started by the latest call (diagnostics).
    """

    def __init__(self, cfg: BCGCfg, env: Any, seed: int | None = None) -> None:
        self.cfg = check_bcg_cfg(cfg)
        self.env = env
        self.base_sim = env.sim
        self.robot = env.robot
        self.device = torch.device(env.device)
        self.dtype = env.dtype
        self.num_envs = E = env.num_envs
        self.nq, self.nv = 7 + self.robot.num_joints, 6 + self.robot.num_joints
        self.chains = leg_chains(self.robot)
        self._chain_index = [
            (torch.as_tensor(c.qpos, device=self.device), torch.as_tensor(c.dof, device=self.device))
            for c in self.chains
        ]  # each chain's hinge indices in q / qd, made once on the device
        self.kin = Kinematics(self.robot, torch.float64).to(self.device)
        self._chain_consts = [chain_tensors(c, torch.float64, self.device) for c in self.chains]
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(int(seed) if seed is not None else (torch.initial_seed() + 0xBC6) % (2**63))
        self._buckets: dict[int, _Bucket] = {}
        self._plan: _ParamPlan | None = None
        self._table: dict[str, torch.Tensor] | None = None  # the plan's per-row parameters, simulator layout
        self.left = torch.zeros(E, dtype=torch.long, device=self.device)
        self.force = torch.zeros(E, len(self.chains), dtype=self.dtype, device=self.device)
        self.br_q: torch.Tensor | None = None  # [E, B, 36] branch states (rows of open bundles valid)
        self.br_qd: torch.Tensor | None = None
        self.avg_q: torch.Tensor | None = None  # [E, 36] detached: what the last call returned
        self.avg_qd: torch.Tensor | None = None
        self.last_offsets: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    # ------------------------------------------------------------------ protocol

    def reset(self, mask: torch.Tensor) -> None:
        """Envs of ``mask`` were reset: close their bundles, forget their last foot force."""
        mask = mask.to(self.device)
        self.left = torch.where(mask, torch.zeros_like(self.left), self.left)
        self.force = torch.where(mask[:, None], torch.zeros_like(self.force), self.force)

    def detach(self) -> None:
        """A SHAC window starts: cut the carried branch graphs; free idle buffers of unused bucket sims."""
        if self.br_q is not None:
            self.br_q, self.br_qd = self.br_q.detach(), self.br_qd.detach()
        for b in self._buckets.values():
            if not b.used:
                b.sim.release_buffers()
            b.used = False

    def state_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "left": self.left.clone(),
            "force": self.force.detach().clone(),
            "generator": self.generator.get_state(),
            "generator_device": self.device.type,
        }
        for name, shape in self._carried_shapes().items():  # always present: ranks' states merge by key
            v = getattr(self, name)
            d[name] = v.detach().clone() if v is not None else torch.zeros(shape, dtype=self.dtype, device=self.device)
        return d

    def _carried_shapes(self) -> dict[str, tuple[int, ...]]:
        E, B = self.num_envs, self.cfg.num_branches
        return {"br_q": (E, B, self.nq), "br_qd": (E, B, self.nv), "avg_q": (E, self.nq), "avg_qd": (E, self.nv)}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        E = self.num_envs
        self._plan = self._table = None  # the env's parameters may have changed with its state
        for b in self._buckets.values():
            b.sim.release_buffers()
        self._buckets.clear()
        if not d:
            self.reset(torch.ones(E, dtype=torch.bool, device=self.device))
            self.br_q = self.br_qd = self.avg_q = self.avg_qd = None
            return
        if tuple(d["left"].shape) != (E,):
            raise ValueError(f"bundle state has {d['left'].shape[0]} envs, this run has {E}")
        self.left = d["left"].to(self.device)
        self.force = d["force"].to(self.device, self.dtype)
        if "generator" in d:  # absent when a run resumes at another world size: a fresh stream
            self._load_generator(d["generator"], d.get("generator_device", "cpu"))
        if any(d.get(name) is None for name in self._carried_shapes()):
            # a state without the branch states (older checkpoints merged from ranks that had none): the
            # open bundles cannot continue, so they close and their envs step nominally
            self.left = torch.zeros_like(self.left)
            self.br_q = self.br_qd = self.avg_q = self.avg_qd = None
            return
        for name in self._carried_shapes():
            setattr(self, name, d[name].to(self.device, self.dtype))

    def _load_generator(self, state: torch.Tensor, device_type: str) -> None:
        """The perturbation generator's state as saved on a ``device_type`` generator: restored exactly on
        the same device type; a CPU state resumed on CUDA (or back) cannot be replayed by the other
        generator, which is then seeded from the saved state (deterministic, a different stream)."""
        if device_type == self.device.type:
            self.generator.set_state(state)
            return
        digest = hashlib.sha256(state.cpu().numpy().tobytes()).digest()
        self.generator.manual_seed(int.from_bytes(digest[:8], "little") % (2**63))

    def __call__(self, q: torch.Tensor, qd: torch.Tensor, q_target: torch.Tensor) -> TransitionOut:
        t0 = time.perf_counter()
        cont = self.left > 0
        feet = (self.force > self.cfg.tau) & ~cont[:, None]
        start = feet.any(dim=-1)
        bund = cont | start
        # The step's one host read: how many envs bundle / start / continue, and the triggering feet.
        counts = torch.cat((torch.stack((bund.sum(), start.sum(), cont.sum())), feet.sum(dim=0))).tolist()
        n = _Counts(*counts[:3], tuple(counts[3:]))
        if n.bundled == 0:
            s = self.base_sim.step(q, qd, q_target)
            self._remember(s.foot_force, q.shape[0])
            self.avg_q = self.avg_qd = None
            return TransitionOut(s.q, s.qd, s.foot_force, self._extras(0, 0, 0, 0, self.num_envs, 0, t0))
        return self._bundled_step(q, qd, q_target, cont, start, feet, n, t0)

    # ------------------------------------------------------------------ internals

    def _remember(self, foot_force: torch.Tensor | None, n: int) -> None:
        if foot_force is None:
            self.force = torch.zeros(n, len(self.chains), dtype=self.dtype, device=self.device)
        else:
            self.force = foot_force.detach().to(self.dtype)

    def _bundled_step(self, q, qd, q_target, cont, start, feet, n: _Counts, t0: float) -> TransitionOut:  # noqa: ANN001
        B, H = self.cfg.num_branches, self.cfg.horizon
        nb, n_nom = n.bundled, self.num_envs - n.bundled
        bund = cont | start
        nom = torch.nonzero_static(~bund, size=n_nom).squeeze(-1)  # sizes known: no host read
        bid = torch.nonzero_static(bund, size=nb).squeeze(-1)
        q_b, qd_b = q.index_select(0, bid), qd.index_select(0, bid)
        is_start = start.index_select(0, bid)
        # branch start states [nb, B, ...]: x_k + constant offsets, or the carried branch states
        off_q = torch.zeros(nb, B, self.nq, dtype=q.dtype, device=q.device)
        off_qd = torch.zeros(nb, B, self.nv, dtype=qd.dtype, device=qd.device)
        if n.started:
            sid = torch.nonzero_static(is_start, size=n.started).squeeze(-1)
            dq, dqd = self._offsets(q_b.index_select(0, sid), feet.index_select(0, bid[sid]), n.feet)
            off_q = off_q.index_copy(0, sid, dq.to(q.dtype))
            off_qd = off_qd.index_copy(0, sid, dqd.to(qd.dtype))
            self.last_offsets = (bid[sid], dq, dqd)
        else:
            self.last_offsets = None
        br_q = q_b[:, None] + off_q
        br_qd = qd_b[:, None] + off_qd
        if n.continued:
            keep = (~is_start)[:, None, None]
            carried_q = self.br_q.index_select(0, bid) + (q_b - self.avg_q.index_select(0, bid)).detach()[:, None]
            carried_qd = self.br_qd.index_select(0, bid) + (qd_b - self.avg_qd.index_select(0, bid)).detach()[:, None]
            br_q = torch.where(keep, carried_q, br_q)
            br_qd = torch.where(keep, carried_qd, br_qd)
        # one simulator call: nominal rows, B rows per bundling env, padding
        rows_q = torch.cat((q.index_select(0, nom), br_q.reshape(nb * B, self.nq)))
        rows_qd = torch.cat((qd.index_select(0, nom), br_qd.reshape(nb * B, self.nv)))
        rows_t = torch.cat((q_target.index_select(0, nom), q_target.index_select(0, bid).repeat_interleave(B, dim=0)))
        row_env = torch.cat((nom, bid.repeat_interleave(B)))
        n_rows = n_nom + nb * B
        size = bucket_size(n_rows)
        if size > n_rows:
            pad = size - n_rows
            rows_q = torch.cat((rows_q, rows_q[:1].detach().expand(pad, -1)))
            rows_qd = torch.cat((rows_qd, rows_qd[:1].detach().expand(pad, -1)))
            rows_t = torch.cat((rows_t, rows_t[:1].detach().expand(pad, -1)))
            row_env = torch.cat((row_env, row_env[:1].expand(pad)))
        sim, uploads = self._bucket(size, row_env)
        s = sim.step(rows_q, rows_qd, rows_t)
        q_br = s.q[n_nom:n_rows].reshape(nb, B, self.nq)
        qd_br = s.qd[n_nom:n_rows].reshape(nb, B, self.nv)
        q_avg, qd_avg = average_branches(q_br, qd_br, q_b[:, 3:7])
        inv = torch.argsort(torch.cat((nom, bid)))
        q_out = torch.cat((s.q[:n_nom], q_avg)).index_select(0, inv)
        qd_out = torch.cat((s.qd[:n_nom], qd_avg)).index_select(0, inv)
        force = None
        if s.foot_force is not None:
            f_br = s.foot_force[n_nom:n_rows].reshape(nb, B, -1).mean(dim=1)
            force = torch.cat((s.foot_force[:n_nom], f_br)).index_select(0, inv)
        # bookkeeping: remaining steps, branch states (carrying the graph), what we returned
        left_b = torch.where(is_start, torch.full_like(bid, H - 1), self.left.index_select(0, bid) - 1)
        self.left = self.left.index_copy(0, bid, left_b)
        E = self.num_envs
        self.br_q = q.new_zeros(E, B, self.nq).index_copy(0, bid, q_br)
        self.br_qd = qd.new_zeros(E, B, self.nv).index_copy(0, bid, qd_br)
        self.avg_q, self.avg_qd = q_out.detach(), qd_out.detach()
        self._remember(force, E)
        extras = self._extras(n.started, sum(n.feet), nb, nb * B, size, uploads, t0)
        return TransitionOut(q_out, qd_out, force, extras)

    def _offsets(
        self, q: torch.Tensor, feet: torch.Tensor, per_foot: tuple[int, ...]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Constant joint offsets dq [n, B, 36], dqd [n, B, 35] (float64) for envs at ``q`` [n, 36]
        whose feet ``feet`` [n, F] triggered (``per_foot``: how many per foot): dq = J+ dp, dqd = J+ dv on
        each triggering leg's hinges, clamped per joint to +/- ``cfg.max_dq`` (rad) / ``cfg.max_dqd`` (rad/s)
        when set."""
        n, B = q.shape[0], self.cfg.num_branches
        gen, dev = self.generator, self.device
        dq = torch.zeros(n, B, self.nq, dtype=torch.float64, device=dev)
        dqd = torch.zeros(n, B, self.nv, dtype=torch.float64, device=dev)
        for f, chain in enumerate(self.chains):
            m = per_foot[f]
            if m == 0:
                continue
            sel = torch.nonzero_static(feet[:, f], size=m).squeeze(-1)
            qpos, dof = self._chain_index[f]
            jac = foot_jacobian(self.kin, q.index_select(0, sel), chain, self._chain_consts[f])
            pinv = damped_pinv(jac, self.cfg.damping)  # [m, k, 3]
            dp = self.cfg.sigma_p * torch.randn(m, B, 3, 1, generator=gen, dtype=torch.float64, device=dev)
            dv = self.cfg.sigma_v * torch.randn(m, B, 3, 1, generator=gen, dtype=torch.float64, device=dev)
            rows_q, rows_qd = dq.index_select(0, sel), dqd.index_select(0, sel)
            rows_q[..., qpos] = _clamp((pinv[:, None] @ dp)[..., 0], self.cfg.max_dq)
            rows_qd[..., dof] = _clamp((pinv[:, None] @ dv)[..., 0], self.cfg.max_dqd)
            dq = dq.index_copy(0, sel, rows_q)
            dqd = dqd.index_copy(0, sel, rows_qd)
        return dq, dqd

    def _bucket(self, size: int, row_env: torch.Tensor) -> tuple[Any, int]:
        """The simulator of ``size`` rows with the parameters of ``row_env`` [size]; returns (sim, gathers).

        Per-env parameters reach the rows by a device gather (``Simulator.set_param_rows``: each step
        keeps its own copy, so nothing is re-recorded and no earlier step's backward sees new values)."""
        if self._plan is None:
            self._plan = _param_plan(self.env)
        plan = self._plan
        b = self._buckets.get(size)
        if b is None:
            base = self.base_sim.cfg
            cfg = dataclasses.replace(
                base,
                num_envs=size,
                graphs=base.graphs and not plan.per_row,  # per-row sims record 3x faster without, step as fast
                row_params=bool(plan.per_row),
                max_idle_buffers=min(base.max_idle_buffers, 2 * self.env.cfg.shac.horizon),
            )
            b = _Bucket(type(self.base_sim)(self.robot, cfg))
            for group in plan.shared:
                try:
                    b.sim.set_env_params(**group)
                except BcgdError:  # a group the env's simulator could not take either (e.g. no contact)
                    pass
            self._buckets[size] = b
        b.used = True
        if not plan.per_row:
            return b.sim, 0
        if self._table is None:
            self._table = b.sim.param_table(**plan.per_row)
        b.sim.set_param_rows(self._table, row_env)
        return b.sim, 1

    def _extras(self, starts: int, feet: int, bundled: int, branch_rows: int, sim_rows: int, uploads: int,
                t0: float) -> dict[str, float]:  # fmt: skip
        return {
            "bcg_starts": starts,
            "bcg_start_feet": feet,
            "bcg_bundled_envs": bundled,
            "bcg_branch_rows": branch_rows,
            "bcg_sim_rows": sim_rows,
            "bcg_param_uploads": uploads,
            "bcg_time_s": time.perf_counter() - t0,
        }
