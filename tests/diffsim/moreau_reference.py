"""Float64 reference of one Moreau physics step with smoothed foot contact (test oracle).

An independent, deliberately plain implementation of METHOD.md section 2 on top of MuJoCo C
(mass matrix, bias forces, point Jacobians), with the simulator's two measured decisions
(implicit PD damping, the scalar Gauss-Seidel step r_i = 1.8 / ||G_ii||_F or the per-component one;
see ``SimConfig``). The Warp simulator must agree with it to float64 round-off. One env at a time; slow but obvious.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from bcg_deploy.robots import RobotSpec


@dataclass
class ReferenceConfig:
    dt: float = 0.005
    kappa: float = 300.0
    mu: float = 1.0
    iterations: int = 10
    contact: bool = True
    gravity: bool = True
    pd: bool = True
    gain_scale: float = 1.0
    step: str = "scalar"  # Gauss-Seidel step: "scalar" or "component" (SimConfig.contact_step)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -50.0, 50.0)))


class MoreauReference:
    """``step(q, qd, q_target) -> (q+, qd+, info)`` in MuJoCo layout, float64."""

    def __init__(self, spec: RobotSpec, cfg: ReferenceConfig):
        self.spec, self.cfg = spec, cfg
        self.m = spec.load_model(scene=False)
        self.m.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
        if not cfg.gravity:
            self.m.opt.gravity[:] = 0.0
        self.d = mujoco.MjData(self.m)
        self.bodies = [self.m.body(c.body).id for c in spec.foot_contact_points]
        self.local = np.array([c.pos for c in spec.foot_contact_points])
        self.radius = np.array([c.radius for c in spec.foot_contact_points])

    def _pd(self, q_mid: np.ndarray, qd: np.ndarray, q_target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s, k = self.spec, self.cfg.gain_scale
        raw = k * s.kp * (q_target - q_mid[7:]) - k * s.kd * qd[6:]
        tau = np.clip(raw, -s.effort_limit, s.effort_limit)
        implicit_kd = np.where(np.abs(raw) < s.effort_limit, k * s.kd, 0.0)
        return tau, implicit_kd

    def _contact_jacobian(self) -> tuple[np.ndarray, np.ndarray]:
        nc = len(self.bodies)
        jac, depth = np.zeros((3 * nc, self.m.nv)), np.zeros(nc)
        for i, (b, lp) in enumerate(zip(self.bodies, self.local, strict=True)):
            center = self.d.xpos[b] + self.d.xmat[b].reshape(3, 3) @ lp
            depth[i] = self.radius[i] - center[2]
            jp = np.zeros((3, self.m.nv))
            mujoco.mj_jac(self.m, self.d, jp, None, center - np.array([0.0, 0.0, self.radius[i]]), b)
            jac[3 * i : 3 * i + 3] = jp
        return jac, depth

    def _solve_contact(self, G: np.ndarray, c: np.ndarray, depth: np.ndarray) -> np.ndarray:
        nc, mu = len(depth), self.cfg.mu
        s = _sigmoid(self.cfg.kappa * depth)
        blk = [[G[3 * i : 3 * i + 3, 3 * j : 3 * j + 3] for j in range(nc)] for i in range(nc)]
        scalar = self.cfg.step == "scalar"
        p = np.array([_project(-np.linalg.solve(blk[i][i], c[3 * i : 3 * i + 3]), mu) for i in range(nc)])
        for sweep in range(self.cfg.iterations):  # symmetric Gauss-Seidel: backward in odd sweeps
            for i in reversed(range(nc)) if sweep % 2 else range(nc):
                res = c[3 * i : 3 * i + 3] + blk[i][i] @ p[i]
                for j in range(nc):
                    if j != i:
                        res = res + s[j] * (blk[i][j] @ p[j])
                step = 1.8 / np.linalg.norm(blk[i][i]) * res if scalar else res / np.diag(blk[i][i])
                p[i] = _project(p[i] - step, mu)
        return p * s[:, None]

    def step(self, q: np.ndarray, qd: np.ndarray, q_target: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
        m, d, dt = self.m, self.d, self.cfg.dt
        q_mid = q.copy()
        mujoco.mj_integratePos(m, q_mid, qd, dt / 2)
        d.qpos[:], d.qvel[:] = q_mid, qd
        mujoco.mj_fwdPosition(m, d)
        mujoco.mj_fwdVelocity(m, d)
        M = np.zeros((m.nv, m.nv))
        mujoco.mj_fullM(m, d, M)
        h = -d.qfrc_bias.copy()
        if self.cfg.pd:
            tau, implicit_kd = self._pd(q_mid, qd, q_target)
            h[6:] += tau
            M[6:, 6:] += np.diag(dt * implicit_kd)
        Minv = np.linalg.inv(M)
        impulse = np.zeros((len(self.bodies), 3))
        jac, depth = self._contact_jacobian()
        if self.cfg.contact:
            G = jac @ Minv @ jac.T
            c = jac @ (qd + dt * Minv @ h)
            impulse = self._solve_contact(G, c, depth)
        qd_new = qd + Minv @ (dt * h + jac.T @ impulse.reshape(-1))
        q_new = q.copy()
        mujoco.mj_integratePos(m, q_new, 0.5 * (qd + qd_new), dt)
        return q_new, qd_new, {"depth": depth, "impulse": impulse}


def _project(p: np.ndarray, mu: float) -> np.ndarray:
    """Coulomb cone (z normal): no pull, tangential impulse scaled onto the cone."""
    if p[2] <= 0.0:
        return np.zeros(3)
    ft = np.hypot(p[0], p[1])
    if ft > mu * p[2]:
        return np.array([p[0] * mu * p[2] / ft, p[1] * mu * p[2] / ft, p[2]])
    return p
