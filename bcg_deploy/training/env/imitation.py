"""The G1 motion-imitation environment (METHOD.md sections 3, 5, 6), differentiable end to end.

One ``ImitationEnv`` holds E envs: the raw state (q [E, 36], qd [E, 35], MuJoCo layout), the
reference clip, the per-env phase (frame index), randomised parameters, and the ``transition`` that
advances one control step. ``step(action)`` maps the policy's tanh action [E, 29] to PD targets
(``q_target = default + offset + action_scale * a``), advances the state through ``transition``
(differentiable), computes the ADD reward + action-rate and self-penetration penalties, detects falls
(root below 0.3 m), time-outs (clip end) and non-finite / exploding envs, and resets finished envs at a random phase
(reference state initialisation). Gradients flow from the reward and observations back through the
transition into earlier actions; reset rows are constants.

BCG hook (METHOD.md section 4): ``env.transition`` is any ``Transition``:
``__call__(q, qd, q_target) -> TransitionOut`` advances ALL E envs by one control step (differentiable
in q, qd, q_target; ``q_target`` is held over the substeps), ``reset(mask)`` is called with the envs
that were just reset (drop their open bundles), ``detach()`` at every SHAC window start, and
``state_dict()``/``load_state_dict()`` go into run.pt for an exact resume. The default
``SimTransition`` calls ``Simulator.step`` once. A bundled transition keeps per-env branch state
across its H control steps, decides per env whether to branch (from the previous step's
``TransitionOut.foot_force``), and returns the branch average as ``q``/``qd``: the env then computes
observation, reward and the next action from that average, as METHOD.md asks. It can build its
branch simulator with ``simulator.make_simulator`` and replicate the env's physical parameters with
``simulator.sim_param_arrays(sim, env.robot, env.params)``; ``TransitionOut.extras`` (e.g. bundle counts) are
passed through to ``StepOut.info["transition"]``. Install with ``env.transition = MyTransition(...)``
(the runner does this when ``cfg.bcg.enabled``; see ``Trainer``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from bcg_deploy.diffsim.config import resolve_device
from bcg_deploy.errors import BcgdError
from bcg_deploy.motions.motion import Motion
from bcg_deploy.observations.profile import PrivilegedObservation, make_observation
from bcg_deploy.robots import RobotSpec
from bcg_deploy.rotations.quat_torch import axis_angle_quat, quat_mul, quat_normalize, quat_to_mat
from bcg_deploy.training.config import TrainConfig, self_collision_weight
from bcg_deploy.training.env import domain_rand as dr
from bcg_deploy.training.env.add import ADD, action_rate_penalty, add_features, feature_dim
from bcg_deploy.training.env.self_collision import SelfCollision
from bcg_deploy.training.env.simulator import apply_params_to_sim, make_simulator
from bcg_deploy.training.env.start_sampling import StartSampler
from bcg_deploy.training.rng import Draw, EnvRandom

# ---------------------------------------------------------------------------------------------
# transition (the BCG hook)


@dataclass
class TransitionOut:
    """State after one control step; ``foot_force`` [E, 2] N (per foot, max over substeps) if known."""

    q: torch.Tensor
    qd: torch.Tensor
    foot_force: torch.Tensor | None = None
    extras: dict = field(default_factory=dict)


class Transition(Protocol):
    """One control step of the training physics: differentiable in q, qd, q_target."""

    def __call__(self, q: torch.Tensor, qd: torch.Tensor, q_target: torch.Tensor) -> TransitionOut: ...

    def reset(self, mask: torch.Tensor) -> None:
        """Envs with ``mask`` [E] True were just reset (drop any per-env memory, e.g. open bundles)."""

    def detach(self) -> None:
        """A new SHAC window starts: cut any carried graph."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, d: dict[str, Any]) -> None: ...


class SimTransition:
    """Plain SHAC physics: one ``Simulator.step`` (its ``substeps`` physics steps) per control step."""

    def __init__(self, sim: Any) -> None:
        self.sim = sim

    def __call__(self, q: torch.Tensor, qd: torch.Tensor, q_target: torch.Tensor) -> TransitionOut:
        s = self.sim.step(q, qd, q_target)
        depth = getattr(s, "contact_depth", None)  # [E, NC] m, for evaluation (not a counter: not logged)
        extras = {} if depth is None else {"contact_depth": depth}
        return TransitionOut(s.q, s.qd, getattr(s, "foot_force", None), extras)

    def reset(self, mask: torch.Tensor) -> None:
        pass

    def detach(self) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        pass


class _SanitizeGrad(torch.autograd.Function):
    """Identity forward; backward replaces NaN/Inf by 0 (a diverged env's adjoint stays in that env)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        return torch.nan_to_num(g, nan=0.0, posinf=0.0, neginf=0.0)


def sanitize_grad(x: torch.Tensor) -> torch.Tensor:
    return _SanitizeGrad.apply(x) if x.requires_grad else x


# ---------------------------------------------------------------------------------------------
# environment


@dataclass
class StepOut:
    """What ``ImitationEnv.step`` returns; tensors have E rows."""

    obs: torch.Tensor  # [E, O] noise-free observation after resets
    reward: torch.Tensor  # [E] differentiable reward of this step (0 for non-finite envs)
    done: torch.Tensor  # [E] bool: episode ended this step (terminated or time-out)
    terminated: torch.Tensor  # [E] bool: fall or non-finite state (bootstrap value 0)
    timeout: torch.Tensor  # [E] bool: clip end (bootstrap with the value of obs_before_reset)
    obs_before_reset: torch.Tensor  # [E, O] observation of the state reached (terminal obs)
    delta: torch.Tensor  # [E, D] detached ADD residual (discriminator negatives)
    valid: torch.Tensor  # [E] bool: state finite (delta usable)
    info: dict[str, torch.Tensor]
    critic_obs: torch.Tensor | None = None  # [E, C] the critics' observation after resets (None: ``obs``)
    critic_obs_before_reset: torch.Tensor | None = None  # [E, C] of the state reached (None: ``obs_before_reset``)


def _motion_tensor(motion: Motion, name: str, dtype: torch.dtype, device) -> torch.Tensor:
    return torch.as_tensor(np.asarray(getattr(motion, name), dtype=np.float64)).to(device=device, dtype=dtype)


class ImitationEnv:
    """E parallel imitation envs on one reference clip; see the module docstring."""

    def __init__(
        self,
        cfg: TrainConfig,
        robot: RobotSpec,
        motion: Motion,
        add: ADD | None = None,
        sim: Any = None,
        device: str | torch.device = "cpu",
        num_envs: int | None = None,
        rng: EnvRandom | None = None,
    ) -> None:
        """``num_envs``: the envs this process simulates (default ``cfg.env.num_envs``; a data-parallel
        rank gets its share); ``rng``: their random streams (default one stream from ``cfg.runner.seed``)."""
        self.cfg = cfg
        self.robot = robot
        self.motion = motion
        self.device = torch.device(resolve_device(device))
        self.fixed_shapes = self.device.type != "cpu"
        """Step without host reads (see ``step``): on by default on CUDA, where each read waits for the GPU."""
        self.dtype = torch.float64 if cfg.sim.dtype == "float64" else torch.float32
        self.num_envs = E = cfg.env.num_envs if num_envs is None else int(num_envs)
        self.rng = rng if rng is not None else EnvRandom(cfg.runner.seed, [E], device=self.device)
        if self.rng.num_envs != E:
            raise ValueError(f"env random streams cover {self.rng.num_envs} envs, this env has {E}")
        self.num_frames = motion.num_frames
        if self.num_frames < 3:
            raise ValueError(f"motion {motion.name!r} has {self.num_frames} frames; need at least 3")
        self.control_dt = cfg.sim.physics_dt * cfg.sim.substeps
        if abs(motion.fps * self.control_dt - 1.0) > 1e-6:
            raise ValueError(f"motion fps {motion.fps} does not match the control rate {1.0 / self.control_dt} Hz")
        self.obs_profile = cfg.env.obs_profile
        self.obs_module = make_observation(robot, motion, self.obs_profile, self.dtype).to(self.device)
        self._reads_action = self.obs_profile != "paper"
        self.kin = self.obs_module.kinematics
        self.obs_dim = self.obs_module.obs_dim
        self.critic_module: PrivilegedObservation | None = None
        """The critics' own observation (asymmetric actor-critic), or None: they see the actor's, noise-free."""
        if cfg.algo == "shac" and self._reads_action and cfg.env.critic_obs == "privileged":
            self.critic_module = PrivilegedObservation(robot, motion, self.dtype).to(self.device)
        self.critic_obs_dim = self.obs_dim if self.critic_module is None else self.critic_module.obs_dim
        self.num_actions = robot.num_joints
        self.num_bodies = len(robot.body_names)
        t = lambda x: torch.as_tensor(np.asarray(x, dtype=np.float64)).to(self.device, self.dtype)  # noqa: E731
        self.default_joint_pos = t(robot.default_joint_pos)
        self.action_scale = t(robot.action_scale)
        self.joint_lo, self.joint_hi = t(robot.joint_range[:, 0]), t(robot.joint_range[:, 1])
        self._eye3 = torch.eye(3, dtype=self.dtype, device=self.device)
        self._load_reference(motion)
        self.self_collision_weight = self_collision_weight(cfg.env)
        self.self_collision: SelfCollision | None = None
        if self.self_collision_weight != 0.0:
            self.self_collision = SelfCollision(robot.load_model(scene=False), self.dtype).to(self.device)
        self.feature_dim = feature_dim(self.num_bodies, len(robot.key_bodies), robot.num_joints)
        self.add = add
        if sim is None:
            sim = make_simulator(cfg, robot, self.device, num_envs=E)
        self.sim = sim
        self.transition: Transition = SimTransition(sim)
        self.start_sampler: StartSampler | None = None
        """Adaptive start phases (``env.adaptive_start``): fed with the failures here, updated by the runner."""
        if cfg.env.adaptive_start and cfg.env.random_start:
            e = cfg.env
            self.start_sampler = StartSampler(
                self.num_frames, self.control_dt, e.adaptive_bin_s, e.adaptive_kernel_bins, e.adaptive_decay,
                e.adaptive_uniform, e.adaptive_alpha, self.device,
            )  # fmt: skip
        # Per-env bookkeeping (long tensors are phase/counters; q/qd carry the graph in a window).
        self.q = torch.zeros(E, 7 + robot.num_joints, dtype=self.dtype, device=self.device)
        self.qd = torch.zeros(E, 6 + robot.num_joints, dtype=self.dtype, device=self.device)
        self.frame = torch.zeros(E, dtype=torch.long, device=self.device)
        self.episode_len = torch.zeros(E, dtype=torch.long, device=self.device)
        self.episode_return = torch.zeros(E, dtype=torch.float64, device=self.device)
        self.last_action = torch.zeros(E, self.num_actions, dtype=self.dtype, device=self.device)
        self.push_timer = torch.zeros(E, dtype=torch.long, device=self.device)
        if cfg.domain_rand.torso_body not in robot.body_names:
            raise BcgdError(f"domain_rand.torso_body {cfg.domain_rand.torso_body!r}: expected a body of {robot.name}")
        self.torso_index = robot.body_names.index(cfg.domain_rand.torso_body)
        self.params = dr.sample_params(
            cfg.domain_rand, E, self.num_bodies, robot.num_joints, self.device, self.rng.rows(), self.torso_index
        )
        self.sim_params_applied = apply_params_to_sim(self.sim, self.robot, self.params)
        self._nan_countdown = -1

    # ------------------------------------------------------------------ setup

    def _load_reference(self, motion: Motion) -> None:
        dev, dt = self.device, self.dtype
        self.ref_root_pos = _motion_tensor(motion, "root_pos", dt, dev)
        self.ref_root_quat = quat_normalize(_motion_tensor(motion, "root_quat", dt, dev))
        self.ref_joint_pos = _motion_tensor(motion, "joint_pos", dt, dev)
        self.ref_joint_vel = _motion_tensor(motion, "joint_vel", dt, dev)
        self.ref_root_lin_vel = _motion_tensor(motion, "root_lin_vel", dt, dev)
        self.ref_root_ang_vel = _motion_tensor(motion, "root_ang_vel", dt, dev)
        self.ref_body_pos = _motion_tensor(motion, "body_pos_w", dt, dev)
        body_quat = quat_normalize(_motion_tensor(motion, "body_quat_w", dt, dev))
        body_mat = quat_to_mat(body_quat)
        key = self.kin.key_points(self.ref_body_pos, body_mat)
        self.ref_features = add_features(
            self.ref_body_pos, body_mat, key, self.ref_root_lin_vel, self.ref_root_ang_vel, self.ref_joint_vel
        )

    # ------------------------------------------------------------------ state helpers

    def reference_state(self, frames: torch.Tensor, noise: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Detached (q, qd) of the clip at ``frames`` [n], plus reset noise (``domain_rand.sample_reset_noise``)."""
        pos = self.ref_root_pos[frames].clone()
        quat = self.ref_root_quat[frames]
        joints = self.ref_joint_pos[frames].clone()
        if noise is not None:
            pos = pos + noise["pos"].to(self.dtype)
            rpy = noise["rpy"].to(self.dtype)
            ex = self._eye3
            dq = quat_mul(
                axis_angle_quat(ex[2], rpy[:, 2]),
                quat_mul(axis_angle_quat(ex[1], rpy[:, 1]), axis_angle_quat(ex[0], rpy[:, 0])),
            )
            quat = quat_normalize(quat_mul(dq, quat))
            joints = torch.clamp(joints + noise["joints"].to(self.dtype), self.joint_lo, self.joint_hi)
        rot = quat_to_mat(quat)
        ang_body = (rot.transpose(-1, -2) @ self.ref_root_ang_vel[frames, :, None])[..., 0]
        q = torch.cat([pos, quat, joints], dim=-1)
        qd = torch.cat([self.ref_root_lin_vel[frames], ang_body, self.ref_joint_vel[frames]], dim=-1)
        return q, qd

    def _sample_start_frames(self, draw: Draw) -> torch.Tensor:
        if not self.cfg.env.random_start:
            return torch.zeros(draw.n, dtype=torch.long, device=self.device)
        if self.start_sampler is not None:
            frames = self.start_sampler.sample(draw)
        else:
            frames = draw.randint(0, self.num_frames - 2)
        share = self.cfg.env.first_frame_share
        if share > 0:  # drawn after the phases, so share 0 leaves every stream as it was
            frames = torch.where(draw.rand() < share, torch.zeros_like(frames), frames)
        return frames

    def reset(self, start_frames: torch.Tensor | None = None) -> torch.Tensor:
        """Reset every env at a random phase, or at ``start_frames`` [E] (frame indices, for diagnostics:
        the random draws are taken all the same, so the streams stay aligned); returns the noise-free
        observation [E, O]. Later resets (of ended episodes) draw their phases as usual."""
        if start_frames is not None:
            start_frames = torch.as_tensor(start_frames, dtype=torch.long, device=self.device)
            if start_frames.shape != (self.num_envs,):
                raise ValueError(f"start_frames has shape {tuple(start_frames.shape)}; expected ({self.num_envs},)")
            if bool(((start_frames < 0) | (start_frames > self.num_frames - 2)).any()):
                last = self.num_frames - 2
                raise ValueError(f"start_frames must lie in [0, {last}] (a clip of {self.num_frames} frames)")
        mask = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self.q, self.qd = self._reset_rows(mask, self.q.detach(), self.qd.detach(), start_frames)
        self.transition.reset(mask)
        return self.observe()

    def _reset_draws(
        self, draw: Draw, frames: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict, dr.EnvParams, torch.Tensor]:
        """The random draws of ``draw.n`` resets (the envs' own streams), in this order: start frames
        (replaced by ``frames`` if given), reset noise, per-episode parameters, push timers."""
        n = draw.n
        sampled = self._sample_start_frames(draw)
        frames = sampled if frames is None else frames
        noise = dr.sample_reset_noise(self.cfg.domain_rand, n, self.num_actions, self.device, draw=draw)
        new = dr.sample_params(self.cfg.domain_rand, n, self.num_bodies, self.num_actions, self.device, draw=draw)
        timers = dr.sample_push_interval(self.cfg.domain_rand, n, self.control_dt, self.device, draw=draw)
        return frames, noise, new, timers

    def _reset_rows(
        self, mask: torch.Tensor, q: torch.Tensor, qd: torch.Tensor, frames: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return (q, qd) with the rows of ``mask`` replaced by fresh reset states; updates bookkeeping.

        Draws for the reset rows only (one host read of their number), or with ``fixed_shapes`` for all
        E rows, of which the reset rows take theirs (no host read). ``frames``: the start frames of the
        reset rows (all E rows when given; ``reset`` passes them), else random phases."""
        if self.fixed_shapes:
            return self._reset_masked(mask, q, qd, frames)
        idx = mask.nonzero().squeeze(-1)
        n = idx.numel()
        if n == 0:
            return q, qd
        frames, noise, new, timers = self._reset_draws(self.rng.rows(idx), frames)
        q_r, qd_r = self.reference_state(frames, noise)
        self.frame = self.frame.index_copy(0, idx, frames)
        self.episode_len = self.episode_len.index_fill(0, idx, 0)
        self.episode_return = self.episode_return.index_fill(0, idx, 0.0)
        self.last_action = self.last_action.index_fill(0, idx, 0.0)
        dr.assign_rows(self.params, new, idx, dr.RESET_FIELDS)
        self.push_timer = self.push_timer.index_copy(0, idx, timers)
        return q.index_copy(0, idx, q_r), qd.index_copy(0, idx, qd_r)

    def _reset_masked(
        self, mask: torch.Tensor, q: torch.Tensor, qd: torch.Tensor, frames: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``_reset_rows`` with fixed shapes: E draws, the rows of ``mask`` take theirs."""
        frames, noise, new, timers = self._reset_draws(self.rng.rows(), frames)
        q_r, qd_r = self.reference_state(frames, noise)
        self.frame = torch.where(mask, frames, self.frame)
        self.episode_len = self.episode_len.masked_fill(mask, 0)
        self.episode_return = self.episode_return.masked_fill(mask, 0.0)
        self.last_action = self.last_action.masked_fill(mask[:, None], 0.0)
        dr.assign_masked(self.params, new, mask, dr.RESET_FIELDS)
        self.push_timer = torch.where(mask, timers, self.push_timer)
        return torch.where(mask[:, None], q_r, q), torch.where(mask[:, None], qd_r, qd)

    def observe(self) -> torch.Tensor:
        """Noise-free observation [E, O] of the current state (critic input; actor adds ``noisy``)."""
        return self._observation(self.q, self.qd, self.last_action)

    def _observation(
        self,
        q: torch.Tensor,
        qd: torch.Tensor,
        last_action: torch.Tensor,
        transforms: torch.Tensor | None = None,
        frame: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The profile's observation of (q, qd) at ``frame`` (default: the envs' current frames; deployable
        profiles read the action); ``transforms``: the world body transforms of ``q`` if already computed
        (reused by the paper's)."""
        frame = self.frame if frame is None else frame
        if self._reads_action:
            return self.obs_module(q, qd, frame, last_action, transforms=transforms)
        return self.obs_module(q, qd, frame, transforms=transforms)

    def observe_critic(self) -> torch.Tensor | None:
        """The critics' observation [E, C] of the current state, or None when they see the actor's."""
        if self.critic_module is None:
            return None
        return self.critic_module(self.q, self.qd, self.frame, self.last_action)

    @torch.no_grad()
    def _fresh_observation(self, rows: torch.Tensor, critic: bool = False) -> torch.Tensor:
        """Observation [n, O] (the critics' with ``critic``) of the just-reset ``rows`` alone. Their state,
        frame and last action are fresh detached draws, so nothing upstream has a gradient through them (the
        same maths as observing all E rows and selecting these, at n/E of the forward cost and no backward)."""
        q, qd, a, f = self.q[rows], self.qd[rows], self.last_action[rows], self.frame[rows]
        if critic:
            return self.critic_module(q, qd, f, a)
        return self._observation(q, qd, a, frame=f)

    def noisy(self, obs: torch.Tensor) -> torch.Tensor:
        """The actor's training input: per-term noise U(-n, n) (scaled) when enabled."""
        if not self.cfg.env.obs_noise or self.cfg.env.obs_noise_scale == 0.0:
            return obs
        if obs.dim() == 2 and obs.shape[0] == self.num_envs:  # the envs' observation: their own streams
            u = self.rng.rows().rand(obs.shape[-1], dtype=obs.dtype)
        else:
            u = torch.rand(obs.shape, dtype=obs.dtype, device=obs.device)
        return obs + (2.0 * u - 1.0) * (self.obs_module.noise_vector * self.cfg.env.obs_noise_scale)

    def detach(self) -> None:
        """Start of a SHAC window: cut the graph of the carried state."""
        self.q = self.q.detach()
        self.qd = self.qd.detach()
        self.last_action = self.last_action.detach()
        self.transition.detach()

    def inject_nan(self, after_steps: int = 0) -> None:
        """Debug: ``after_steps`` steps from now, write NaN into env 0's state before the physics."""
        self._nan_countdown = max(int(after_steps), 0)

    # ------------------------------------------------------------------ features / metrics

    def features(
        self, q: torch.Tensor, qd: torch.Tensor, transforms: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """ADD features [E, D] and body positions [E, NB, 3] of raw states; ``transforms`` [E, NB, 4, 4]
        are the world body transforms of ``q`` if already computed (``Kinematics.transforms``)."""
        t = self.kin.transforms(q) if transforms is None else transforms
        pos, mat = t[..., :3, 3], t[..., :3, :3]
        key = self.kin.key_points(pos, mat)
        ang_w = (mat[:, 0] @ qd[:, 3:6, None])[..., 0]
        f = add_features(pos, mat, key, qd[:, 0:3], ang_w, qd[:, 6:])
        return f, pos

    # ------------------------------------------------------------------ step

    def step(self, action: torch.Tensor) -> StepOut:
        """Advance one control step with ``action`` [E, 29] in [-1, 1] (differentiable)."""
        cfg = self.cfg
        E = self.num_envs
        lat = (self.params.action_latency > 0)[:, None]
        applied = torch.where(lat, self.last_action, action)
        offset = self.params.default_joint_offset.to(self.dtype)
        q_target = self.default_joint_pos + offset + self.action_scale * applied
        q, qd = self.q, self.qd
        q, qd = self._push(q, qd)
        if self._nan_countdown == 0:
            q = torch.where(torch.arange(E, device=self.device)[:, None] == 0, torch.full_like(q, float("nan")), q)
        if self._nan_countdown >= 0:
            self._nan_countdown -= 1
        out = self.transition(sanitize_grad(q), sanitize_grad(qd), sanitize_grad(q_target))
        q_next, qd_next = out.q, out.qd
        bad = self._diverged(q_next, qd_next)
        # Diverged rows are replaced by a detached finite state (their reset comes below), so no NaN
        # reaches observations, rewards or the adjoint of other envs.
        if self.fixed_shapes or bool(bad.any()):
            q_safe, qd_safe = self.reference_state(self.frame)
            q_next = torch.where(bad[:, None], q_safe, q_next)
            qd_next = torch.where(bad[:, None], qd_safe, qd_next)
        self.frame = torch.clamp(self.frame + 1, max=self.num_frames - 1)
        self.episode_len = self.episode_len + 1
        transforms = self.kin.transforms(q_next)  # one FK for the ADD features and the observation
        feat, body_pos = self.features(q_next, qd_next, transforms)
        delta = self.ref_features[self.frame] - feat
        r_add = self.add.reward(delta) if self.add is not None else torch.zeros(E, dtype=self.dtype, device=self.device)
        r_rate = action_rate_penalty(action, self.last_action, cfg.env.action_rate_weight)
        r_self = torch.zeros_like(r_rate)
        if self.self_collision is not None:
            r_self = self.self_collision_weight * self.self_collision(transforms).sum(dim=-1)
        reward = torch.where(bad, torch.zeros_like(r_add), r_add + r_rate + r_self)
        fell = q_next[:, 2] < cfg.env.fall_height
        with torch.no_grad():
            err = (body_pos - self.ref_body_pos[self.frame]).norm(dim=-1).mean(dim=-1)
        strayed = torch.zeros_like(fell) if cfg.env.max_tracking_error is None else err > cfg.env.max_tracking_error
        strayed = strayed & ~fell & ~bad
        terminated = fell | bad | strayed
        if self.start_sampler is not None:
            self.start_sampler.count(self.frame, (fell | strayed) & ~bad)
        timeout = (self.frame >= self.num_frames - 1) & ~terminated
        done = terminated | timeout
        obs_before = self._observation(q_next, qd_next, action, transforms)
        critic_before = None
        if self.critic_module is not None:
            critic_before = self.critic_module(q_next, qd_next, self.frame, action, transforms=transforms)
        with torch.no_grad():
            self.episode_return = self.episode_return + reward.detach().double()
            info = {
                "tracking_error": torch.where(bad, torch.full_like(err, float("nan")), err),
                "reward_add": r_add.detach(),
                "reward_action_rate": r_rate.detach(),
                "reward_self_collision": r_self.detach(),
                "fell": fell & ~bad,
                "strayed": strayed,
                "diverged": bad,
                "episode_len": self.episode_len.clone(),
                "episode_return": self.episode_return.clone(),
                "foot_force": out.foot_force.detach() if out.foot_force is not None else None,
                "transition": out.extras,
            }
        self.last_action = action
        self.q, self.qd = q_next, qd_next
        obs, critic_obs = obs_before, critic_before
        if self.fixed_shapes or bool(done.any()):
            self.q, self.qd = self._reset_rows(done, self.q, self.qd)
            self.transition.reset(done)
            if self.fixed_shapes:  # no host read: every row observed, the reset ones selected
                obs = torch.where(done[:, None], self.observe(), obs_before)
                if critic_before is not None:
                    critic_obs = torch.where(done[:, None], self.observe_critic(), critic_before)
            else:
                rows = done.nonzero().squeeze(-1)
                obs = obs_before.index_copy(0, rows, self._fresh_observation(rows))
                if critic_before is not None:
                    critic_obs = critic_before.index_copy(0, rows, self._fresh_observation(rows, critic=True))
        return StepOut(
            obs=obs,
            reward=reward,
            done=done,
            terminated=terminated,
            timeout=timeout,
            obs_before_reset=obs_before,
            delta=delta.detach(),
            valid=~bad,
            info=info,
            critic_obs=critic_obs,
            critic_obs_before_reset=critic_before,
        )

    def _push(self, q: torch.Tensor, qd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Random velocity kicks every U(1, 3) s per env (constants added to qd)."""
        if not self.cfg.domain_rand.enabled:
            return q, qd
        self.push_timer = self.push_timer - 1
        due = self.push_timer <= 0
        pad = (self.num_envs, qd.shape[1] - 6)
        if self.fixed_shapes:  # E kicks and timers drawn, the due rows take theirs
            draw = self.rng.rows()
            kick = dr.sample_push(self.cfg.domain_rand, self.num_envs, self.device, draw=draw).to(self.dtype)
            timers = dr.sample_push_interval(
                self.cfg.domain_rand, self.num_envs, self.control_dt, self.device, draw=draw
            )
            self.push_timer = torch.where(due, timers, self.push_timer)
            kick = kick.masked_fill(~due[:, None], 0.0)
            return q, qd + torch.cat([kick, qd.new_zeros(pad)], dim=-1)
        idx = due.nonzero().squeeze(-1)
        n = idx.numel()
        if n == 0:
            return q, qd
        kick = torch.zeros(self.num_envs, 6, dtype=self.dtype, device=self.device)
        draw = self.rng.rows(idx)
        kick = kick.index_copy(0, idx, dr.sample_push(self.cfg.domain_rand, n, self.device, draw=draw).to(self.dtype))
        timers = dr.sample_push_interval(self.cfg.domain_rand, n, self.control_dt, self.device, draw=draw)
        self.push_timer = self.push_timer.index_copy(0, idx, timers)
        return q, qd + torch.cat([kick, torch.zeros(pad, dtype=self.dtype, device=self.device)], dim=-1)

    def _diverged(self, q: torch.Tensor, qd: torch.Tensor) -> torch.Tensor:
        """[E] bool: any non-finite entry, |qd| above max_abs_qd or |base position| above max_abs_pos."""
        with torch.no_grad():
            finite = torch.isfinite(q).all(dim=-1) & torch.isfinite(qd).all(dim=-1)
            huge = (qd.abs().amax(dim=-1) > self.cfg.env.max_abs_qd) | (
                q[:, :3].abs().amax(dim=-1) > self.cfg.env.max_abs_pos
            )
            return ~finite | huge

    # ------------------------------------------------------------------ checkpoint

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue bit-exactly (detached)."""
        return {
            "q": self.q.detach().clone(),
            "qd": self.qd.detach().clone(),
            "frame": self.frame.clone(),
            "episode_len": self.episode_len.clone(),
            "episode_return": self.episode_return.clone(),
            "last_action": self.last_action.detach().clone(),
            "push_timer": self.push_timer.clone(),
            "params": {k: v.clone() for k, v in self.params.state_dict().items()},
            "transition": self.transition.state_dict(),
            "rng": self.rng.state_dict(),
            **({"start_sampler": self.start_sampler.state_dict()} if self.start_sampler is not None else {}),
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        if tuple(d["q"].shape) != tuple(self.q.shape):
            raise ValueError(f"env state has {d['q'].shape[0]} envs, this run has {self.num_envs}")
        dev, dt = self.device, self.dtype
        self.q = d["q"].to(dev, dt)
        self.qd = d["qd"].to(dev, dt)
        self.frame = d["frame"].to(dev)
        self.episode_len = d["episode_len"].to(dev)
        self.episode_return = d["episode_return"].to(dev)
        self.last_action = d["last_action"].to(dev, dt)
        self.push_timer = d["push_timer"].to(dev)
        params = dr.EnvParams.from_state_dict({k: v.to(dev) for k, v in d["params"].items()})
        cur = self.params.state_dict()
        same = all(torch.equal(v, cur[k]) for k, v in params.state_dict().items())
        self.params = params
        if not same:  # re-uploading model arrays makes the simulator re-record its launches: only when needed
            self.sim_params_applied = apply_params_to_sim(self.sim, self.robot, self.params)
        self.transition.load_state_dict(d.get("transition", {}))
        if "rng" in d:
            self.rng.load_state_dict(d["rng"])
        if self.start_sampler is not None and "start_sampler" in d:
            self.start_sampler.load_state_dict(d["start_sampler"])
