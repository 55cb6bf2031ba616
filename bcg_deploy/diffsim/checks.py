"""Oracle checks shared by the tests and the benchmarks: in-contact states and finite-difference gradients."""

from __future__ import annotations

import numpy as np
import torch

from bcg_deploy.robots.spec import RobotSpec


def standing_state(robot: RobotSpec, n: int, drop: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """q [n, 36], qd [n, 35] (float64): the ``home`` keyframe with the base raised by ``drop`` m, at rest."""
    q0 = np.r_[robot.default_root_pos + [0.0, 0.0, drop], 1.0, 0.0, 0.0, 0.0, robot.default_joint_pos]
    return np.tile(q0, (n, 1)), np.zeros((n, 35))


def in_contact_states(robot: RobotSpec, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(q, qd, q_target) float64: feet a few mm into the floor, perturbed joints, velocities and PD targets,
    so that the contact solve is active (a mix of sticking, sliding and separating spheres)."""
    rng = np.random.default_rng(seed)
    q, _ = standing_state(robot, n, drop=-0.002)
    q[:, 7:] += rng.uniform(-0.05, 0.05, (n, 29))
    q[:, 2] += rng.uniform(-0.004, 0.002, n)
    qd = rng.uniform(-0.3, 0.3, (n, 35))
    qd[:, 2] -= 0.2
    q_target = robot.default_joint_pos + rng.uniform(-0.1, 0.1, (n, 29))
    return q, qd, q_target


def fd_gradient_check(sim, q, qd, q_target, steps: int = 1, directions: int = 2, seed: int = 0, h: float = 1e-6):
    """Worst relative disagreement of the simulator's gradients with float64 central differences.

    The loss of each env is a fixed random linear function of (q, qd) after ``steps`` control steps; for each
    input (q, qd, q_target) and ``directions`` random directions (the base quaternion components are held,
    the simulator normalises them) the directional derivative from autograd is compared with
    (L(x + h d) - L(x - h d)) / 2h, relative to max(|FD|, 1e-3). ``sim`` must be float64 with ``len(q)`` envs.
    Returns {input name: worst relative error}.
    """
    rng = np.random.default_rng(seed)
    n = q.shape[0]
    wq, wqd = torch.tensor(rng.normal(size=(n, 36))), torch.tensor(rng.normal(size=(n, 35)))

    def loss(q, qd, qt):
        for _ in range(steps):
            st = sim.step(q, qd, qt)
            q, qd = st.q, st.qd
        return (wq * q).sum(1) + (wqd * qd).sum(1)

    inputs = {"q": q, "qd": qd, "q_target": q_target}
    leaves = {k: torch.tensor(v, requires_grad=True) for k, v in inputs.items()}
    loss(*leaves.values()).sum().backward()
    worst = {}
    for name, x in inputs.items():
        errs = []
        for _ in range(directions):
            d = rng.normal(size=x.shape)
            if name == "q":
                d[:, 3:7] = 0.0
            plus, minus = dict(inputs), dict(inputs)
            plus[name], minus[name] = x + h * d, x - h * d
            with torch.no_grad():
                fd = (loss(*map(torch.tensor, plus.values())) - loss(*map(torch.tensor, minus.values()))) / (2 * h)
            an = (leaves[name].grad.numpy() * d).sum(1)
            errs.append(float(np.max(np.abs(fd.numpy() - an) / np.maximum(np.abs(fd.numpy()), 1e-3))))
        worst[name] = max(errs)
    return worst
