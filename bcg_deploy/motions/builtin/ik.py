"""Damped-least-squares leg IK on the MuJoCo model: place both feet, given the root and upper body.

Each leg (hip pitch, roll, yaw, knee, ankle pitch, roll) is a 6-DoF chain and its foot target is a
full pose (6 constraints), so with the root prescribed the two legs are independent 6x6 problems.
Per iteration: ``mj_kinematics`` + ``mj_comPos`` then ``mj_jacBody`` for each ankle_roll_link,
error e = [p* - p; log(q* q^-1)] (world frame), step dq = J^T (J J^T + lambda^2 I)^-1 e, scaled so
no joint moves more than ``max_step`` rad, then clamped to the joint ranges. Frames are solved in
order, each warm-started from the previous solution.
"""

from __future__ import annotations

import mujoco
import numpy as np

from bcg_deploy.robots import RobotSpec
from bcg_deploy.rotations import quat_numpy as Q


class LegIK:
    """Solve leg joints so both ankle_roll_link frames reach target poses (m, world; quat wxyz)."""

    def __init__(
        self, robot: RobotSpec, damping: float = 1e-3, tol: float = 1e-7, max_iters: int = 50, max_step: float = 0.2
    ):
        self.model = robot.load_model(scene=False)
        self.data = mujoco.MjData(self.model)
        self.damping = damping
        self.tol = tol
        self.max_iters = max_iters
        self.max_step = max_step
        self.feet = [mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, b) for b in robot.foot_bodies]
        self.legs = []
        for side in ("left", "right"):
            names = [
                n for n in robot.joint_names if n.startswith(f"{side}_") and ("hip" in n or "knee" in n or "ankle" in n)
            ]
            jids = [mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_JOINT, n) for n in names]
            self.legs.append(
                (
                    np.array([self.model.jnt_qposadr[j] for j in jids]),
                    np.array([self.model.jnt_dofadr[j] for j in jids]),
                    self.model.jnt_range[jids].copy(),
                )
            )
        self._jacp = np.zeros((3, self.model.nv))
        self._jacr = np.zeros((3, self.model.nv))

    def solve_frame(self, qpos: np.ndarray, foot_pos: np.ndarray, foot_quat: np.ndarray) -> tuple[np.ndarray, float]:
        """Leg joints of ``qpos`` [nq] updated in place so feet reach ``foot_pos`` [2,3], ``foot_quat`` [2,4].

        Returns (qpos, residual), residual = largest |e| over both feet (m and rad mixed).
        """
        m, d = self.model, self.data
        lam2 = self.damping**2
        resid = np.inf
        for _ in range(self.max_iters):
            d.qpos[:] = qpos
            mujoco.mj_kinematics(m, d)
            mujoco.mj_comPos(m, d)
            resid = 0.0
            for leg, body in enumerate(self.feet):
                qadr, dadr, rng = self.legs[leg]
                ep = foot_pos[leg] - d.xpos[body]
                er = Q.log(Q.mul(foot_quat[leg], Q.conj(d.xquat[body])))
                e = np.concatenate([ep, er])
                resid = max(resid, float(np.abs(e).max()))
                mujoco.mj_jacBody(m, d, self._jacp, self._jacr, body)
                jac = np.vstack([self._jacp[:, dadr], self._jacr[:, dadr]])
                dq = jac.T @ np.linalg.solve(jac @ jac.T + lam2 * np.eye(6), e)
                dq *= min(1.0, self.max_step / max(float(np.abs(dq).max()), 1e-12))
                qpos[qadr] = np.clip(qpos[qadr] + dq, rng[:, 0], rng[:, 1])
            if resid < self.tol:
                break
        return qpos, resid

    def solve(self, qpos: np.ndarray, foot_pos: np.ndarray, foot_quat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Solve every frame of ``qpos`` [T, nq] (legs as initial guess for frame 0); returns (qpos, residual [T])."""
        out = np.array(qpos, dtype=np.float64)
        resid = np.zeros(len(out))
        prev_legs = None
        for k in range(len(out)):
            if prev_legs is not None:
                for leg, (qadr, _, _) in enumerate(self.legs):
                    out[k, qadr] = prev_legs[leg]
            _, resid[k] = self.solve_frame(out[k], foot_pos[k], foot_quat[k])
            prev_legs = [out[k, qadr].copy() for qadr, _, _ in self.legs]
        return out, resid
