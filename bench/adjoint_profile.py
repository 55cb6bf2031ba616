"""Where the simulator's backward time goes: forward vs adjoint time of every recorded launch of one control
step, and of each stage function of the smooth kernel run alone.

    python bench/adjoint_profile.py [--sizes 16 256] [--contact] [--out bench/results/adjoint_profile.json]

"commands": each recorded launch of one control step (``Simulator`` with graphs off), grouped by kernel
(``ZeroCmd`` = the per-substep memsets of the adjoints), in us per env per control step.
"stages": each stage of ``integrator.smooth_kernel`` (midpoint, kinematics, com_vel, rne, actuation, crb,
mass_matrix) in a kernel of its own on the same data, forward and adjoint, in us per env per substep.
Timings are process CPU time (robust to other jobs preempting us), the best of ``--repeats``, with the
forward and adjoint repeats interleaved. The ratio to watch is adjoint / forward per stage.
Prints ``name.metric: value`` lines; writes JSON.
"""

# No ``from __future__ import annotations``: Warp reads the (closure) type annotations at definition.

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch
import warp as wp

from bcg_deploy.diffsim import SimConfig, Simulator
from bcg_deploy.diffsim import actuation as dact
from bcg_deploy.diffsim import inertia as dinertia
from bcg_deploy.diffsim import kinematics as dkin
from bcg_deploy.diffsim import rne as drne
from bcg_deploy.diffsim.tape import launch_cmd
from bcg_deploy.fileio import atomic_write_json
from bcg_deploy.robots import load_robot


def _best_cpu(fns: list, reps: int, repeats: int) -> list[float]:
    """Best process CPU seconds per call of each function, repeats interleaved."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for k, fn in enumerate(fns):
            c0 = time.process_time()
            for _ in range(reps):
                fn()
            best[k] = min(best[k], (time.process_time() - c0) / reps)
    return best


def _name(cmd) -> str:
    kernel = getattr(cmd, "kernel", None)
    if kernel is None:
        return type(cmd).__name__
    return kernel.key.split("__")[-1].rsplit("_", 1)[0] if "__" in kernel.key else kernel.key


def _state(sim: Simulator, robot, num_envs: int):
    rng = np.random.default_rng(0)
    q = np.zeros((num_envs, 36))
    q[:, :3] = robot.default_root_pos
    q[:, 3] = 1.0
    q[:, 7:] = robot.default_joint_pos + rng.uniform(-0.1, 0.1, (num_envs, 29))
    qd = rng.uniform(-0.5, 0.5, (num_envs, 35))
    tdt = sim.types.torch_dtype
    target = torch.tensor(robot.default_joint_pos, dtype=tdt).expand(num_envs, -1).contiguous()
    return torch.tensor(q, dtype=tdt), torch.tensor(qd, dtype=tdt), target


def profile_commands(sim: Simulator, robot, repeats: int) -> dict:
    """us per env per control step of each kernel's forward launches and adjoint launches."""
    E = sim.num_envs
    lease = sim._acquire()
    d = lease.data
    sim._forward(d, *_state(sim, robot, E))
    cmds = [("fwd", c) for c in d.fwd_cmds] + [("adj", c) for c in d.adj_cmds]
    reps = max(2, 2000 // E)
    times = _best_cpu([c.launch for _, c in cmds], reps, repeats)
    out: dict = {}
    for (kind, c), t in zip(cmds, times, strict=True):
        key = f"{_name(c)}.{kind}"
        out[key] = out.get(key, 0.0) + 1e6 * t / E
    out["total.fwd"] = sum(v for k, v in out.items() if k.endswith(".fwd"))
    out["total.adj"] = sum(v for k, v in out.items() if k.endswith(".adj"))
    return out


def _stage_kernels(sim: Simulator):
    t, m = sim.types, sim.model
    S, vec3, vec6, vec10, quat, mat33 = t.scalar, t.vec3, t.vec6, t.vec10, t.quat, t.mat33
    kin = dkin.build(t, m.has_jnt_pos)
    rn = drne.build(t, m.max_children)
    inr = dinertia.build(t, m.max_children)
    act = dact.build(t).actuation
    midpoint, kinematics, com_vel, rne, crb, mass_matrix = (
        kin.midpoint, kin.kinematics, rn.com_vel, rn.rne, inr.crb, inr.mass_matrix,
    )  # fmt: skip
    mod = f"bench_adjoint_profile_{t.name}"

    @wp.kernel(module=mod)
    def k_midpoint(
        body_jnttype: wp.array(dtype=int), body_qposadr: wp.array(dtype=int), body_dofadr: wp.array(dtype=int),
        q: wp.array2d(dtype=S), qd: wp.array2d(dtype=S), h: S, q_mid: wp.array2d(dtype=S),
        ref_pos: wp.array(dtype=vec3),
    ):  # fmt: skip
        midpoint(body_jnttype, body_qposadr, body_dofadr, wp.tid(), q, qd, h, q_mid, ref_pos)

    @wp.kernel(module=mod)
    def k_kinematics(
        body_parentid: wp.array(dtype=int), body_jnttype: wp.array(dtype=int), body_qposadr: wp.array(dtype=int),
        body_dofadr: wp.array(dtype=int), body_pos: wp.array(dtype=vec3), body_quat: wp.array(dtype=quat),
        jnt_pos: wp.array(dtype=vec3), jnt_axis: wp.array(dtype=vec3), body_mass: wp.array2d(dtype=S),
        body_ipos: wp.array2d(dtype=vec3), body_inertia_mat: wp.array2d(dtype=mat33), q_mid: wp.array2d(dtype=S),
        ref_pos: wp.array(dtype=vec3), xpos: wp.array2d(dtype=vec3), xquat: wp.array2d(dtype=quat),
        cinert: wp.array2d(dtype=vec10), cdof: wp.array2d(dtype=vec6),
    ):  # fmt: skip
        kinematics(
            body_parentid, body_jnttype, body_qposadr, body_dofadr, body_pos, body_quat, jnt_pos, jnt_axis,
            body_mass, body_ipos, body_inertia_mat, wp.tid(), q_mid, ref_pos, xpos, xquat, cinert, cdof,
        )  # fmt: skip

    @wp.kernel(module=mod)
    def k_com_vel(
        body_parentid: wp.array(dtype=int), body_jnttype: wp.array(dtype=int), body_dofadr: wp.array(dtype=int),
        gravity: vec3, qd: wp.array2d(dtype=S), cdof: wp.array2d(dtype=vec6), cvel: wp.array2d(dtype=vec6),
        cacc: wp.array2d(dtype=vec6),
    ):  # fmt: skip
        com_vel(body_parentid, body_jnttype, body_dofadr, gravity, wp.tid(), qd, cdof, cvel, cacc)

    @wp.kernel(module=mod)
    def k_rne(
        body_children: wp.array2d(dtype=int), dof_bodyid: wp.array(dtype=int), cinert: wp.array2d(dtype=vec10),
        cvel: wp.array2d(dtype=vec6), cacc: wp.array2d(dtype=vec6), cdof: wp.array2d(dtype=vec6),
        cfrc: wp.array2d(dtype=vec6), qfrc_bias: wp.array2d(dtype=S),
    ):  # fmt: skip
        rne(body_children, dof_bodyid, wp.tid(), cinert, cvel, cacc, cdof, cfrc, qfrc_bias)

    @wp.kernel(module=mod)
    def k_actuation(
        dof_actid: wp.array(dtype=int), act_qposadr: wp.array(dtype=int), act_kp: wp.array2d(dtype=S),
        act_kd: wp.array2d(dtype=S), act_effort: wp.array2d(dtype=S), q_mid: wp.array2d(dtype=S),
        qd: wp.array2d(dtype=S), q_target: wp.array2d(dtype=S), qfrc_applied: wp.array2d(dtype=S),
        qfrc_bias: wp.array2d(dtype=S), damping_dt: S, qfrc_actuator: wp.array2d(dtype=S),
        qfrc_smooth: wp.array2d(dtype=S), dof_damping: wp.array2d(dtype=S),
    ):  # fmt: skip
        act(
            dof_actid, act_qposadr, act_kp, act_kd, act_effort, wp.tid(), q_mid, qd, q_target, qfrc_applied,
            qfrc_bias, damping_dt, qfrc_actuator, qfrc_smooth, dof_damping,
        )  # fmt: skip

    @wp.kernel(module=mod)
    def k_crb(body_children: wp.array2d(dtype=int), cinert: wp.array2d(dtype=vec10), crb_out: wp.array2d(dtype=vec10)):
        crb(body_children, wp.tid(), cinert, crb_out)

    @wp.kernel(module=mod)
    def k_mass_matrix(
        dof_bodyid: wp.array(dtype=int), dof_Madr: wp.array(dtype=int), dof_Mnum: wp.array(dtype=int),
        M_colind: wp.array(dtype=int), dof_armature: wp.array2d(dtype=S), cdof: wp.array2d(dtype=vec6),
        crb_in: wp.array2d(dtype=vec10), dof_damping: wp.array2d(dtype=S), qM: wp.array2d(dtype=S),
    ):  # fmt: skip
        mass_matrix(dof_bodyid, dof_Madr, dof_Mnum, M_colind, dof_armature, wp.tid(), cdof, crb_in, dof_damping, qM)

    return {
        "midpoint": k_midpoint, "kinematics": k_kinematics, "com_vel": k_com_vel, "rne": k_rne,
        "actuation": k_actuation, "crb": k_crb, "mass_matrix": k_mass_matrix,
    }  # fmt: skip


def profile_stages(sim: Simulator, robot, repeats: int) -> dict:
    """us per env per substep of each smooth-kernel stage alone: forward, adjoint."""
    E, m, S = sim.num_envs, sim.model, sim.types.scalar
    lease = sim._acquire()
    d = lease.data
    sim._forward(d, *_state(sim, robot, E))
    A = {n: (a if n == "q_target" else a[0]) for n, a in d.arrays.items()}
    G = {n: (a if n == "q_target" else a[0]) for n, a in d.grads.items()}
    N = [None]
    zero = sim._zero_frc
    k = _stage_kernels(sim)
    # name: (model inputs, data inputs, outputs): adjoints for every data input/output that has one.
    spec = {
        "midpoint": ([m.body_jnttype, m.body_qposadr, m.body_dofadr], ["q", "qd", S(0.0025)], ["q_mid", "ref_pos"]),
        "kinematics": (
            [
                m.body_parentid,
                m.body_jnttype,
                m.body_qposadr,
                m.body_dofadr,
                m.body_pos,
                m.body_quat,
                m.jnt_pos,
                m.jnt_axis,
                m.body_mass,
                m.body_ipos,
                m.body_inertia_mat,
            ],
            ["q_mid", "ref_pos"],
            ["xpos", "xquat", "cinert", "cdof"],
        ),  # fmt: skip
        "com_vel": ([m.body_parentid, m.body_jnttype, m.body_dofadr, m.gravity], ["qd", "cdof"], ["cvel", "cacc"]),
        "rne": ([m.body_children, m.dof_bodyid], ["cinert", "cvel", "cacc", "cdof"], ["cfrc", "qfrc_bias"]),
        "actuation": (
            [m.dof_actid, m.act_qposadr, m.act_kp, m.act_kd, m.act_effort],
            ["q_mid", "qd", "q_target", zero, "qfrc_bias", S(0.005)],
            ["qfrc_actuator", "qfrc_smooth", "dof_damping"],
        ),
        "crb": ([m.body_children], ["cinert"], ["crb"]),
        "mass_matrix": (
            [m.dof_bodyid, m.dof_Madr, m.dof_Mnum, m.M_colind, m.dof_armature],
            ["cdof", "crb", "dof_damping"],
            ["qM"],
        ),
    }
    out = {}
    for name, (model, data, outs) in spec.items():
        ins = model + [A[x] if isinstance(x, str) else x for x in data]
        adj_ins = N * len(model) + [G[x] if isinstance(x, str) else None for x in data]
        o = [A[x] for x in outs]
        fwd = launch_cmd(k[name], E, ins, o, sim.device)
        adj = launch_cmd(k[name], E, ins, o, sim.device, adj_ins, [G[x] for x in outs])
        fwd.launch()
        adj.launch()
        tf, ta = _best_cpu([fwd.launch, adj.launch], max(2, 1000 // E), repeats)
        out[name] = {"fwd": 1e6 * tf / E, "adj": 1e6 * ta / E, "adj_over_fwd": ta / tf}
    out["sum"] = {k2: sum(v[k2] for v in out.values()) for k2 in ("fwd", "adj")}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="*", default=[16, 256])
    p.add_argument("--contact", action="store_true", help="profile the contact step's commands too")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "adjoint_profile.json"))
    args = p.parse_args()
    wp.config.quiet = True
    torch.set_num_threads(1)
    robot = load_robot("g1")
    rows = []
    for E in args.sizes:
        sim = Simulator(robot, SimConfig(num_envs=E, dtype=args.dtype, contact=args.contact, graphs=False))
        cmds = profile_commands(sim, robot, args.repeats)
        stages = profile_stages(sim, robot, args.repeats)
        rows.append({"num_envs": E, "contact": args.contact, "commands": cmds, "stages": stages})
        for key, v in cmds.items():
            print(f"E{E}.commands.{key}: {v:.2f}")
        print(f"E{E}.commands.kernel_ratio_fwd_plus_adj_vs_fwd: {1 + cmds['total.adj'] / cmds['total.fwd']:.2f}")
        for name, v in stages.items():
            extra = f" (adj/fwd {v['adj_over_fwd']:.2f})" if "adj_over_fwd" in v else ""
            print(f"E{E}.stages.{name}: fwd {v['fwd']:.2f} adj {v['adj']:.2f}{extra}")
    report = {"dtype": args.dtype, "loadavg_1min": os.getloadavg()[0], "units": "us per env", "results": rows}
    out = Path(args.out)
    atomic_write_json(out, report)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
