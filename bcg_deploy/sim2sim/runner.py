"""One sim2sim run: an exported policy (or a reference replay) in MuJoCo over its clip, and what it measured.

Simulation (stated in every report): the packaged G1 scene (``RobotSpec.scene_path``), physics at
``physics_dt`` (default 0.002 s = 500 Hz, the G1's low-level rate), MuJoCo's semi-implicit Euler
integrator, Newton solver, pyramidal friction cones (the MJCF's), 100 solver iterations. The policy
runs every ``control_dt`` (metadata ``bcgd.control_dt``), which must be a whole number of physics steps.

PD: the MJCF's position actuators are turned into plain torque motors (gain 1, no bias, control range
+/- the metadata effort limit), and at EVERY physics step we compute
``tau = clip(kp (q_target - q) - kd qd, -effort, effort)`` with kp, kd, effort from the policy's
metadata and write it to ``ctrl``. The PD is therefore explicit like the robot's joint controller,
applied exactly once, and the armature is the metadata's (``bcgd.armature``) when present.

A run starts in reference frame 0 (root pose and velocity, joints), as training's reference state
initialisation. Control step k (time k * control_dt): the policy reads the (delayed, noisy) state and
``time_step = k``; its target reaches the PD after the action latency (until the first one arrives the
PD holds the pose of reference frame 0); after the step the state is
compared with reference frame k + 1. A run ends at the clip's last frame or when the root (pelvis)
falls below ``fall_height`` (metrics then cover the frames up to the fall).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import mujoco
import numpy as np

from bcg_deploy.errors import BcgdError
from bcg_deploy.motions.motion import Motion
from bcg_deploy.sim2sim import metrics
from bcg_deploy.sim2sim.injection import (
    ActionDelayLine,
    DrSample,
    InitDraw,
    LatencySampler,
    StateHistory,
    apply_domain_randomization,
    push_schedule,
)
from bcg_deploy.sim2sim.policy import OnnxPolicy, make_inputs
from bcg_deploy.sim2sim.reference import base_track, initial_state
from bcg_deploy.sim2sim.setup import RunResult, Sim2SimConfig, Sim2SimSetup, foot_geoms, joint_dofs

Controller = Callable[[int, dict], np.ndarray]
"""(control step k, raw inputs name -> float32 [1, n]) -> joint position targets [J] (rad)."""


def run_streams(seed: int, run_index: int) -> dict[str, np.random.Generator]:
    """Independent generators per injection, so enabling one never changes another's draws."""
    ss = np.random.SeedSequence(entropy=seed, spawn_key=(run_index,))
    names = ("latency", "obs_latency", "noise", "randomize", "push", "init")  # append only: keeps older draws
    return {n: np.random.default_rng(c) for n, c in zip(names, ss.spawn(len(names)), strict=True)}


def simulate_run(
    setup: Sim2SimSetup,
    cfg: Sim2SimConfig,
    run_index: int = 0,
    controller: Controller | None = None,
    on_control_step: Callable[[int, mujoco.MjModel, mujoco.MjData], None] | None = None,
    on_physics_step: Callable[[int, np.ndarray, mujoco.MjData], None] | None = None,
    start: InitDraw | None = None,
) -> RunResult:
    """One run over the clip. ``controller`` defaults to the policy (or the replay of the reference);
    ``on_control_step(k, m, d)`` is called after every control step (video, viewer) and
    ``on_physics_step(i, target, d)`` after every physics step (tests). ``start``: this initial-state
    perturbation instead of the run's seeded draw (diagnostics: a chosen start; the other streams unchanged)."""
    ref, n_sub, dt = setup.reference, setup.n_sub, cfg.physics_dt
    rng = run_streams(cfg.seed, run_index)
    m = setup.model
    j = setup.spec.num_joints
    dr = DrSample(kp_scale=np.ones(j), kd_scale=np.ones(j), joint_offset=np.zeros(j))
    if setup.dr is not None:
        m = _copy_model(setup.model)
        dr = apply_domain_randomization(m, setup.dr, rng["randomize"], joint_dofs(m))
    d = mujoco.MjData(m)
    qpos0, qvel0 = initial_state(ref, m.nq, m.nv)
    if start is None and setup.init_noise is not None:
        start = setup.init_noise.draw(rng["init"], m.nq - 7)
    if start is not None:
        qpos0, qvel0 = start.apply(qpos0, qvel0, setup.spec.joint_range)
    d.qpos[:], d.qvel[:] = qpos0, qvel0
    mujoco.mj_forward(m, d)

    if controller is None:
        controller = _replay_controller(ref) if (cfg.replay or setup.policy is None) else _policy_controller(setup)
    reads_inputs = getattr(controller, "reads_inputs", True)
    noise = setup.noise if setup.noise is not None and setup.noise.enabled else None
    num_k = ref.num_frames - 1
    num_steps = num_k * n_sub
    lat, olat = LatencySampler(*cfg.latency_ms), LatencySampler(*cfg.obs_latency_ms)
    history = StateHistory(m.nq, m.nv, olat.max_steps(dt)) if olat.enabled else None
    pushes = push_schedule(setup.push, num_k * setup.control_dt, dt, rng["push"]) if setup.push else []
    push_at = {i: kick for i, kick in pushes}
    pin_qpos, pin_qvel = base_track(ref, num_steps, dt) if cfg.pin_base else (None, None)
    inputs = make_inputs(j)

    kp, kd = setup.kp * dr.kp_scale, setup.kd * dr.kd_scale
    lim, nlim = setup.effort_limit.copy(), -setup.effort_limit
    offset = dr.joint_offset
    delay = ActionDelayLine(ref.joint_pos[0])
    kp_tgt = kp * (delay.current + offset)
    qj, vj, ctrl = d.qpos[7:], d.qvel[6:], d.ctrl
    a, b = np.zeros(j), np.zeros(j)

    bids = setup.body_ids if setup.body_ids is not None else np.arange(1, m.nbody)
    feet = foot_geoms(m)
    tr = _Trace.empty(num_k, n_sub, bids.size, j, feet.size)
    geom_z = d.geom_xpos[:, 2]
    t0 = time.perf_counter()
    for k in range(num_k):
        i0 = k * n_sub
        # --- sense and act
        if history is not None:
            history.record(i0, d.qpos, d.qvel)
            sq, sv = history.get(i0, olat.sample_steps(rng["obs_latency"], dt))
        else:
            sq, sv = d.qpos, d.qvel
        if reads_inputs:
            _fill_inputs(inputs, sq, sv)
            if noise is not None:
                noise.apply(inputs, rng["noise"])
        target = controller(k, inputs)
        if not np.all(np.isfinite(target)):
            raise BcgdError(f"the policy returned a non-finite joint target at control step {k}")
        delay.push(i0, lat.sample_steps(rng["latency"], dt), target, k)
        # --- physics
        for s in range(n_sub):
            i = i0 + s
            if i >= delay.next_activation:
                kp_tgt = kp * (delay.update(i) + offset)
            if push_at and i in push_at:
                d.qvel[:6] += push_at[i]
            if pin_qpos is not None:
                d.qpos[:7], d.qvel[:6] = pin_qpos[i], pin_qvel[i]
            if history is not None and s:
                history.record(i, d.qpos, d.qvel)
            np.multiply(kp, qj, out=a)
            np.multiply(kd, vj, out=b)
            np.subtract(kp_tgt, a, out=a)
            np.subtract(a, b, out=a)
            np.minimum(a, lim, out=a)
            np.maximum(a, nlim, out=ctrl)
            mujoco.mj_step(m, d)
            tr.torque[i] = ctrl
            tr.sphere_z[i] = geom_z[feet]  # the state this step's contacts were found in
            if on_physics_step is not None:
                on_physics_step(i, delay.current, d)
        # --- record against reference frame k + 1
        if pin_qpos is not None:  # the pinned base sits exactly on reference frame k + 1
            d.qpos[:7], d.qvel[:6] = pin_qpos[i0 + n_sub], pin_qvel[i0 + n_sub]
        mujoco.mj_kinematics(m, d)
        tr.record(k, d.xpos[bids], qj, d.qpos[:3])
        if on_control_step is not None:
            on_control_step(k, m, d)
        if d.qpos[2] < cfg.fall_height and tr.fall_k is None:
            tr.fall_k = k
            if cfg.stop_on_fall:
                break
    tr.wall_s = time.perf_counter() - t0
    return _result(setup, cfg, run_index, m, tr, dr, start, len(pushes))


@dataclass
class _Trace:
    """What one run measured: per control step k (against reference frame k + 1) and per physics step."""

    body_pos: np.ndarray  # (K, B, 3) world positions of the tracked bodies (m)
    joint_pos: np.ndarray  # (K, J) rad
    root_pos: np.ndarray  # (K, 3) world root (pelvis) position (m)
    torque: np.ndarray  # (K * n_sub, J) applied joint torques (N m), per physics step
    sphere_z: np.ndarray  # (K * n_sub, F) foot contact sphere centre heights (m), per physics step
    steps: int = 0  # control steps done
    fall_k: int | None = None  # control step at which the root fell below the fall height
    wall_s: float = 0.0

    @classmethod
    def empty(cls, num_k: int, n_sub: int, num_bodies: int, num_joints: int, num_feet: int) -> _Trace:
        return cls(np.zeros((num_k, num_bodies, 3)), np.zeros((num_k, num_joints)), np.zeros((num_k, 3)),
                   np.zeros((num_k * n_sub, num_joints)), np.zeros((num_k * n_sub, num_feet)))  # fmt: skip

    def record(self, k: int, body_pos: np.ndarray, joint_pos: np.ndarray, root_pos: np.ndarray) -> None:
        self.body_pos[k], self.joint_pos[k], self.root_pos[k] = body_pos, joint_pos, root_pos
        self.steps = k + 1


def _result(
    setup: Sim2SimSetup, cfg: Sim2SimConfig, run_index: int, m: mujoco.MjModel, tr: _Trace, dr: DrSample,
    start: InitDraw | None, n_push: int,
) -> RunResult:  # fmt: skip
    ref, k_done, fall_k = setup.reference, tr.steps, tr.fall_k
    sl = slice(1, k_done + 1)
    bp, jp, rp = tr.body_pos[:k_done], tr.joint_pos[:k_done], tr.root_pos[:k_done]
    radius = m.geom_size[foot_geoms(m), 0]
    pen_sum, pen_n = metrics.sphere_floor_penetration(tr.sphere_z[: k_done * setup.n_sub], radius)
    return RunResult(
        index=run_index,
        seed=[int(cfg.seed), int(run_index)],
        fell=fall_k is not None,
        fall_time_s=None if fall_k is None else round((fall_k + 1) * setup.control_dt, 9),
        steps=k_done,
        duration_s=round(k_done * setup.control_dt, 9),
        e_track_cm=metrics.e_track_cm(bp, ref.body_pos_w[sl]),
        joint_rmse_rad=metrics.joint_rmse(jp, ref.joint_pos[sl]),
        root_pos_err_cm=metrics.root_position_error_cm(rp, ref.root_pos[sl]),
        foot_penetration_mm=metrics.mean_penetration_mm(pen_sum, pen_n),
        torque_saturation=metrics.torque_saturation_fraction(tr.torque[: k_done * setup.n_sub], setup.effort_limit),
        randomization=dr.summary() if setup.dr is not None else None,
        initial_perturbation=start.summary() if start is not None else None,
        pushes=n_push,
        wall_s=tr.wall_s,
        series={
            "t": np.arange(1, k_done + 1) * setup.control_dt,
            "body_err_cm": 100 * metrics.body_position_error_series(bp, ref.body_pos_w[sl]),
            "joint_err_rad": metrics.joint_error_series(jp, ref.joint_pos[sl]),
            "root_err_cm": 100 * metrics.root_position_error_series(rp, ref.root_pos[sl]),
            "root_height_m": rp[:, 2].copy(),
        },
    )


def foot_penetration(m: mujoco.MjModel, g1: list, g2: list, dist: list) -> tuple[float, int]:
    """Sum of ``-dist`` (m) and count over MuJoCo contacts (``d.contact`` geom1, geom2, dist, copied)
    between a foot contact sphere and the floor. The run itself uses the equivalent, cheaper
    :func:`metrics.sphere_floor_penetration` on the sphere heights (tested equal to this)."""
    if not dist:
        return 0.0, 0
    g1, g2, dist = np.concatenate(g1), np.concatenate(g2), np.concatenate(dist)
    foot = np.zeros(m.ngeom, dtype=bool)
    foot[foot_geoms(m)] = True
    floor = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "floor")
    sel = (foot[g1] & (g2 == floor)) | (foot[g2] & (g1 == floor))
    pen = metrics.contact_penetration(dist[sel])
    return float(pen.sum()), int(pen.size)


def _copy_model(m: mujoco.MjModel) -> mujoco.MjModel:
    import copy

    return copy.deepcopy(m)


def _fill_inputs(inputs: dict, qpos: np.ndarray, qvel: np.ndarray) -> None:
    """Raw policy inputs from a MuJoCo state."""
    inputs["base_pos"][0] = qpos[:3]
    inputs["base_quat"][0] = qpos[3:7]
    inputs["base_lin_vel"][0] = qvel[:3]
    inputs["base_ang_vel"][0] = qvel[3:6]
    inputs["joint_pos"][0] = qpos[7:]
    inputs["joint_vel"][0] = qvel[6:]


def _policy_controller(setup: Sim2SimSetup) -> Controller:
    """bcgd's raw-state ONNX: the policy itself; an obs-signature policy: its deploy stack's runtime
    (``bcg_deploy.stacks``), which builds the observation and the targets as the stack does."""
    policy = setup.policy
    if isinstance(policy, OnnxPolicy) and policy.profile is None:

        def act(k: int, inputs: dict) -> np.ndarray:
            return policy.act(inputs, k)

        return act
    return policy.controller(setup)


def _replay_controller(ref: Motion) -> Controller:
    """Targets = the reference joint positions of the frame the control step ends on."""

    def act(k: int, inputs: dict) -> np.ndarray:
        return ref.joint_pos[min(k + 1, ref.num_frames - 1)]

    act.reads_inputs = False  # type: ignore[attr-defined]
    return act
