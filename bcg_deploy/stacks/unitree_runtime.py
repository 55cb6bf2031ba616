"""Unitree's G1 ``State_Mimic`` at run time: how it indexes its motion at control step k, and the runtime that
builds its observation and targets (``UnitreeRuntime.act``). The files and the facts are in ``unitree``; the
lines cited are of unitree_rl_mjlab 5b7e396 (``deploy/``) and unitree_rl_lab 4711dee (``deploy/robots/g1_29dof/``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bcg_deploy.robots import RobotSpec
from bcg_deploy.rotations import quat_numpy as quat
from bcg_deploy.stacks.base import RootMotion, quat_matrix, yaw_matrix
from bcg_deploy.stacks.unitree import LAB, MJLAB, NPZ_DT, WAIST, Term, UnitreeFiles

# --------------------------------------------------------------------------------------------- motion indexing


def mjlab_frame(k: int, step_dt: float, num_frames: int, time_start: float = 0.0) -> int:
    """unitree_rl_mjlab's reference frame at control step ``k``, in float32 as compiled:
    ``time = episode_length * step_dt + time_start`` (``State_Mimic.cpp:171``, long * float -> float), then
    ``floor(clamp(time, 0, N dt) / dt)`` with ``dt = 1.0f / 50.0f``, at most N - 1 (``State_Mimic.h:95-101``)."""
    f32 = np.float32
    dt = f32(1.0) / f32(50.0)
    t = f32(f32(k) * f32(step_dt)) + f32(time_start)
    duration = f32(num_frames) * dt
    phase = min(max(t, f32(0.0)), duration)
    return min(int(math.floor(f32(phase / dt))), num_frames - 1)


def lab_blend(t: float, fps: float, num_frames: int) -> tuple[int, int, np.float32]:
    """unitree_rl_lab's (index_0, index_1, blend) at time ``t`` s (``include/State_Mimic.h``
    ``MotionLoader_::update``, float32): phase = clamp(t / (N dt), 0, 1), index_0 = round(phase (N - 1)),
    blend = round((t - index_0 dt) / dt * 1e5) / 1e5."""
    f32 = np.float32
    dt = f32(1.0) / f32(fps)
    duration = f32(num_frames) * dt
    t = f32(t)
    phase = min(max(f32(t / duration), f32(0.0)), f32(1.0))
    i0 = int(math.floor(float(f32(phase * f32(num_frames - 1))) + 0.5))  # std::round, phase >= 0
    i1 = min(i0 + 1, num_frames - 1)
    blend = f32(np.floor(f32(f32((t - f32(i0) * dt) / dt) * f32(1e5)) + f32(0.5)) / f32(1e5))
    return i0, i1, blend


def eigen_slerp(a: np.ndarray, b: np.ndarray, t: np.float32) -> np.ndarray:
    """Eigen's ``QuaternionBase::slerp`` in float32 (w x y z): linear weights when |a.b| >= 1 - epsilon (float
    epsilon, 2^-23), the shortest arc otherwise."""
    f32 = np.float32
    a, b = a.astype(f32), b.astype(f32)
    d = f32(np.dot(a, b))
    ad = abs(d)
    if ad >= f32(1.0) - np.finfo(f32).eps:
        s0, s1 = f32(1.0) - t, t
    else:
        theta = f32(np.arccos(ad))
        st = f32(np.sin(theta))
        s0 = f32(np.sin(f32(f32(1.0) - t) * theta) / st)
        s1 = f32(np.sin(t * theta) / st)
    if d < 0:
        s1 = -s1
    return (s0 * a + s1 * b).astype(f32)


@dataclass
class MotionSample:
    """The loader's state at one control step (float32, file column order)."""

    root_quat: np.ndarray  # w x y z
    joint_pos: np.ndarray
    joint_vel: np.ndarray


def sample(files: UnitreeFiles, k: int) -> MotionSample:
    """What the loader returns at control step ``k`` (the motion->update(k step_dt + time_start) that precedes
    env->step())."""
    nf = files.joint_pos.shape[0]
    if files.stack == MJLAB:
        i = mjlab_frame(k, files.step_dt, nf, files.time_start)
        return MotionSample(files.root_quat[i], files.joint_pos[i], files.joint_vel[i])
    t = np.float32(np.float32(k) * np.float32(files.step_dt)) + np.float32(files.time_start)
    return sample_lab(files, float(t))


def sample_lab(files: UnitreeFiles, t: float) -> MotionSample:
    i0, i1, b = lab_blend(t, files.fps, files.joint_pos.shape[0])
    one = np.float32(1.0)
    jp = files.joint_pos[i0] * (one - b) + files.joint_pos[i1] * b
    jv = files.joint_vel[i0] * (one - b) + files.joint_vel[i1] * b
    return MotionSample(eigen_slerp(files.root_quat[i0], files.root_quat[i1], b), jp, jv)


def root_motion(files: UnitreeFiles, spec: RobotSpec, control_dt: float) -> RootMotion:
    """The reference clip at the control rate (what sim2sim measures tracking against): the motion at
    t = k control_dt, joints in model order. NPZ: its frames (50 Hz); CSV: linear / slerp interpolation."""
    perm = _file_to_model(files, spec)
    src = {"kind": "motion_file", "file": files.motion_path.name}
    if files.stack == MJLAB:
        jp, jv = files.joint_pos[:, perm], files.joint_vel[:, perm]
        f64 = lambda v: np.asarray(v, np.float64)  # noqa: E731
        return RootMotion(1.0 / NPZ_DT, f64(files.root_pos), f64(files.root_quat), f64(jp), f64(jv), src)
    duration = (files.joint_pos.shape[0] - 1) / files.fps
    t = np.arange(int(math.floor(duration / control_dt + 1e-9)) + 1) * control_dt
    x = t * files.fps
    i0 = np.minimum(np.floor(x).astype(int), files.joint_pos.shape[0] - 1)
    i1 = np.minimum(i0 + 1, files.joint_pos.shape[0] - 1)
    a = (x - i0)[:, None]
    lerp = lambda v: (1 - a) * v[i0].astype(np.float64) + a * v[i1].astype(np.float64)  # noqa: E731
    q = quat.slerp(files.root_quat[i0].astype(np.float64), files.root_quat[i1].astype(np.float64), a[:, 0])
    jp = lerp(files.joint_pos)[:, perm]
    jv = np.gradient(jp, control_dt, axis=0)
    return RootMotion(1.0 / control_dt, lerp(files.root_pos), q, jp, jv, src)


def _file_to_model(files: UnitreeFiles, spec: RobotSpec) -> np.ndarray:
    """Columns of the motion file in model order: the files hold SDK motor order (= model order)."""
    return np.arange(spec.num_joints)


# --------------------------------------------------------------------------------------------- runtime


class UnitreeRuntime:
    """``State_Mimic`` driving one run: ``act(k, qpos, qvel)`` is one pass of the policy thread
    (robot->update, motion->update, env->step) and returns the joint targets in model order."""

    def __init__(self, files: UnitreeFiles, session) -> None:  # noqa: ANN001 - onnxruntime session
        self.files, self.session = files, session
        self.out_name = files.onnx.output_order[0]
        self.shape = files.onnx.inputs["obs"]
        self.action = np.zeros(files.action_dim, np.float32)
        self.buffers: dict[str, list[np.ndarray]] = {}
        self.init = np.eye(3, dtype=np.float32)
        self.phase = np.float32(0.0)
        self.f32 = np.float32

    # --- the robot's view: IMU quaternion and gyro of the pelvis, motor q and dq in SDK order
    def _read(self, qpos: np.ndarray, qvel: np.ndarray) -> None:
        f = self.files
        self.quat = qpos[3:7].astype(np.float32)
        self.gyro = qvel[3:6].astype(np.float32)
        self.motor_q, self.motor_dq = qpos[7:].astype(np.float32), qvel[6:].astype(np.float32)
        self.q, self.dq = self.motor_q[f.ids], self.motor_dq[f.ids]

    def _torso(self, root_quat: np.ndarray, joints: np.ndarray) -> np.ndarray:
        r = quat_matrix(root_quat).astype(np.float32)
        y, x, p = (float(joints[i]) for i in WAIST)
        f32 = np.float32
        return r @ quat.axis_rotation(2, y, f32) @ quat.axis_rotation(0, x, f32) @ quat.axis_rotation(1, p, f32)

    def _term(self, t: Term, m: MotionSample) -> np.ndarray:
        f = self.files
        name = t.name
        ids = f.ids if f.stack == LAB else np.arange(f.ids.size)  # unitree_rl_lab remaps the motion columns
        if name == "motion_command":
            return np.concatenate([m.joint_pos[ids], m.joint_vel[ids]])
        if name == "motion_joint_pos":
            return m.joint_pos[ids]
        if name == "motion_joint_vel":
            return m.joint_vel[ids]
        if name == "motion_anchor_ori_b":
            real = self._torso(self.quat, self.motor_q)
            ref = self._torso(m.root_quat, m.joint_pos)
            rot = real.T @ (self.init @ ref)  # ((init ref)^-1 real)^T
            return rot[:, :2].reshape(6)
        if name == "base_ang_vel":
            return self.gyro
        if name == "projected_gravity":
            return (quat_matrix(self.quat).T @ np.array([0.0, 0.0, -1.0])).astype(np.float32)
        joint_ids = (t.params.get("asset_cfg") or {}).get("joint_ids") if isinstance(t.params, dict) else None
        sel = np.asarray(joint_ids, int) if joint_ids else slice(None)
        if name == "joint_pos":
            return self.q[sel]
        if name == "joint_pos_rel":
            return (self.q - f.default.astype(np.float32))[sel]
        if name == "joint_vel_rel":
            return self.dq[sel]
        if name == "last_action":
            return self.action.copy()
        if name == "velocity_commands":
            return np.zeros(3, np.float32)  # no joystick input: 0 (clamped to ranges that contain 0)
        if name == "gait_phase":
            period = np.float32(t.params.get("period", 1.0))
            self.phase = np.float32(np.fmod(self.phase + np.float32(f.step_dt) / period, np.float32(1.0)))
            return np.array([np.sin(self.phase * 2 * np.pi), np.cos(self.phase * 2 * np.pi)], np.float32)
        raise KeyError(name)

    def _add(self, t: Term, value: np.ndarray) -> None:
        v = np.asarray(value, np.float32).copy()
        lo, hi = t.clip if t.clip is not None else (None, None)
        if t.scale_first:
            v = v * t.scale.astype(np.float32) if t.scale is not None else v
            v = np.clip(v, lo, hi) if t.clip is not None else v
        else:
            v = np.clip(v, lo, hi) if t.clip is not None else v
            v = v * t.scale.astype(np.float32) if t.scale is not None else v
        buf = self.buffers.setdefault(t.name, [])
        buf.append(v.astype(np.float32))
        del buf[: max(0, len(buf) - t.history)]

    def _observation(self, m: MotionSample) -> np.ndarray:
        terms = self.files.terms
        for t in terms:
            self._add(t, self._term(t, m))
        if self.files.gym_history:
            parts = [self.buffers[t.name][h] for h in range(terms[0].history) for t in terms]
        else:
            parts = [v for t in terms for v in self.buffers[t.name]]
        return np.concatenate(parts).astype(np.float32)

    def reset(self, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """enter(): init_quat from the robot's and the motion's start yaw, then env->reset()."""
        f = self.files
        self._read(qpos, qvel)
        first = sample_lab(f, 0.0) if f.stack == LAB else sample(f, 0)  # lab: the loader's state before reset
        start = sample(f, 0)
        ref = first if f.stack == LAB else start
        robot_yaw = yaw_matrix(self._torso(self.quat, self.motor_q))
        ref_yaw = yaw_matrix(quat_matrix(ref.root_quat).astype(np.float32))
        self.init = (robot_yaw @ ref_yaw.T).astype(np.float32)
        self.action[:] = 0.0
        self.buffers.clear()
        for t in f.terms:  # ObservationManager::reset: the history filled with the current value
            for _ in range(t.history):
                self._add(t, self._term(t, start))

    def act(self, k: int, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
        f = self.files
        if k == 0:
            self.reset(qpos, qvel)
        self._read(qpos, qvel)
        obs = self._observation(sample(f, k))
        padded = np.zeros(int(np.prod(self.shape)), np.float32)  # the deploy binds the model's size
        padded[: min(obs.size, padded.size)] = obs[: padded.size]
        raw = self.session.run([self.out_name], {"obs": padded.reshape(self.shape)})[0].reshape(-1)
        self.action = raw[: f.action_dim].astype(np.float32)
        processed = self.action * f.scale.astype(np.float32) if f.scale is not None else self.action.copy()
        if f.offset is not None:
            processed = processed + f.offset.astype(np.float32)
        if f.clip is not None:
            processed = np.clip(processed, f.clip[:, 0], f.clip[:, 1])
        target = np.zeros(f.ids.size)
        target[f.ids] = processed  # motor joint_ids_map[i] <- processed[i]
        return target
