"""Shaped containers of the differentiable simulator (mujoco_warp style).

``Model`` holds what does not change during a rollout (the tree, frames, inertias, gains), compiled
from the MJCF by :mod:`bcg_deploy.diffsim.io`. ``StepData`` holds every array of ONE control step of
``S`` physics substeps: each substep writes its own slice, so nothing is overwritten while a
backward pass may still need it.

Shape notation: ``E`` environments, ``S`` substeps, ``NB`` bodies including the world (MuJoCo ``nbody``),
``NQ``/``NV`` position/velocity sizes, ``NU`` actuated hinges, ``NM`` entries of the tree-sparse mass
matrix. A leading ``*`` dimension is 1 (shared by all envs) or ``E`` (per-env override, e.g. domain
randomisation); kernels index it with ``env % shape[0]``.

Frames: spatial quantities are world-aligned and taken about the env's reference point
``ref_pos`` (the base position at the substep's midpoint configuration). Body positions are stored
RELATIVE to ``ref_pos``, so their size (and the size of every Jacobian built from them) does not grow
with the robot's distance from the world origin. Spatial motion vectors are ``(angular, linear)``;
spatial force vectors are ``(torque about ref_pos, force)``. Quaternions inside Warp arrays are
Warp's ``(x, y, z, w)``; the MuJoCo ``w x y z`` order is used only in ``q`` (qpos layout).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cache

import numpy as np
import torch
import warp as wp

# Joint types we compile (one joint per body at most).
JNT_NONE = 0
JNT_FREE = 1
JNT_HINGE = 2


@dataclass(frozen=True)
class Types:
    """The Warp scalar/vector types of one precision; kernels are built per ``Types``."""

    name: str  # "float32" | "float64"
    scalar: type
    vec3: type
    vec6: type
    vec10: type  # packed spatial inertia: Ixx Iyy Izz Ixy Ixz Iyz (about ref_pos), m*c (3), m
    quat: type
    mat33: type
    np_dtype: type
    torch_dtype: torch.dtype


@cache
def types_for(name: str) -> Types:
    """``Types`` for ``"float32"`` or ``"float64"``."""
    if name == "float32":
        s, npd, td = wp.float32, np.float32, torch.float32
    elif name == "float64":
        s, npd, td = wp.float64, np.float64, torch.float64
    else:
        raise ValueError(f"dtype {name!r}: expected 'float32' or 'float64'")
    return Types(
        name=name,
        scalar=s,
        vec3=wp.types.vector(3, s),
        vec6=wp.types.vector(6, s),
        vec10=wp.types.vector(10, s),
        quat=wp.types.quaternion(s),
        mat33=wp.types.matrix((3, 3), s),
        np_dtype=npd,
        torch_dtype=td,
    )


@dataclass
class Model:
    """Constant description of the articulated robot, on one device, in one precision.

    Tree (int arrays, MuJoCo body order: a parent precedes its children):
        body_parentid [NB]; body_children [NB, max_children] (-1 padded);
        body_jnttype [NB] (JNT_NONE | JNT_FREE | JNT_HINGE); body_qposadr, body_dofadr [NB] (-1 if no joint).
    Frames (in the parent body frame, m / unit quaternion): body_pos [NB] vec3, body_quat [NB] quat;
        jnt_pos [NB] vec3 (joint anchor in the body frame), jnt_axis [NB] vec3 (hinge axis, body frame).
    Inertia (per env ``*``): body_mass [*, NB] kg; body_ipos [*, NB] vec3 (CoM in body frame, m);
        body_inertia_mat [*, NB] mat33 (rotational inertia about the CoM in the body frame, kg m^2:
        R(iquat) diag(inertia) R(iquat)^T; host copies of MuJoCo's body_iquat/body_inertia in ``host``).
    Dofs: dof_bodyid [NV]; dof_Madr, dof_Mnum [NV]: row ``i`` of the tree-sparse mass matrix holds
        ``M[i, j]`` for ``j`` = i, parent(i), parent(parent(i)), ... at ``dof_Madr[i] + k``;
        M_colind [NM] the column ``j`` of each entry; dof_armature [*, NV] (kg m^2 or kg).
    Actuation (PD on hinges, RobotSpec joint order): act_qposadr, act_dofadr [NU]; act_kp [*, NU] (N m/rad),
        act_kd [*, NU] (N m s/rad), act_effort [*, NU] (N m, symmetric clamp). dof_actid [NV] (-1: none).
    gravity: vec3 (m/s^2, world), zero when disabled.
    """

    nq: int
    nv: int
    nbody: int
    nu: int
    nM: int
    max_children: int
    has_free_base: bool
    has_jnt_pos: bool
    types: Types
    device: str
    body_parentid: wp.array
    body_children: wp.array
    body_jnttype: wp.array
    body_qposadr: wp.array
    body_dofadr: wp.array
    body_pos: wp.array
    body_quat: wp.array
    jnt_pos: wp.array
    jnt_axis: wp.array
    body_mass: wp.array
    body_ipos: wp.array
    body_inertia_mat: wp.array
    dof_bodyid: wp.array
    dof_Madr: wp.array
    dof_Mnum: wp.array
    M_colind: wp.array
    dof_armature: wp.array
    dof_actid: wp.array
    act_qposadr: wp.array
    act_dofadr: wp.array
    act_kp: wp.array
    act_kd: wp.array
    act_effort: wp.array
    gravity: object  # Types.vec3 value
    # Host copies of the index arrays (numpy), for unpacking and tests.
    host: dict = dataclasses.field(default_factory=dict)


@dataclass
class StepData:
    """Every array of one control step (E envs, S substeps); substep ``s`` owns slice ``[s]``.

    State (MuJoCo qpos/qvel layout): q [S+1, E, NQ] (q[0] is the input, q[S] the output);
        qd [S+1, E, NV]; q_target [E, NU] held over the substeps (rad).
    Midpoint configuration of substep s: q_mid [S, E, NQ]; ref_pos [S, E] vec3 (world, m).
    Kinematics at q_mid: xpos [S, E, NB] vec3 (body origin minus ref_pos, world-aligned, m);
        xquat [S, E, NB] quat (body orientation in world); cinert [S, E, NB] vec10 (body spatial
        inertia about ref_pos); cdof [S, E, NV] vec6 (dof motion axes about ref_pos).
    Velocity products (RNE with the substep's initial velocity qd[s]): cvel [S, E, NB] vec6;
        cacc [S, E, NB] vec6 (bias acceleration incl. -gravity); cfrc [S, E, NB] vec6 (subtree forces).
    Mass matrix: crb [S, E, NB] vec10 (composite inertias); qM [S, E, NM] (tree-sparse, incl. armature);
        qLD [S, E, NM] its L^T D L factorisation (D on the diagonal slots; forward-only values).
    Generalised forces (N, N m): qfrc_bias [S, E, NV] (MuJoCo qfrc_bias: gravity + Coriolis/centrifugal);
        qfrc_actuator [S, E, NV] (clamped PD); qfrc_smooth [S, E, NV] = actuator + applied - bias;
        dof_damping [S, E, NV] implicit PD damping dt kd added to M's diagonal (0 with explicit damping).
    Velocity update: dqd [S, E, NV] = M^-1 (dt qfrc_smooth + qfrc_impulse), qd[s+1] = qd[s] + dqd[s].
    """

    arrays: dict  # name -> wp.array with a leading [S] or [S+1] dim (or none for q_target)
    grads: dict  # name -> wp.array of the same shape: adjoints (missing for forward-only arrays)
    views: dict  # name -> torch view of the same memory as arrays[name] (scalar components last)
    grad_views: dict  # name -> torch view of grads[name]
    fwd_buffer: torch.Tensor  # flat storage of all forward arrays
    grad_buffer: torch.Tensor  # flat storage of all adjoints
    grad_flat: wp.array  # the same memory as a Warp array: ``grad_flat.zero_()`` resets all adjoints
    grad_blocks: list  # per substep: a flat Warp array over that substep's adjoint block
    fwd_cmds: list  # recorded Warp launches of the forward pass, in order
    adj_cmds: list  # recorded adjoint launches, already in reverse order

    def __getattr__(self, name: str):
        try:
            return self.__dict__["arrays"][name]
        except KeyError as exc:
            raise AttributeError(name) from exc
