"""Host -> device: compile a ``mujoco.MjModel`` into a Warp ``Model``; allocate ``StepData``.

The Warp model is read from the same MJCF both simulators load (never a second description):
tree, joint frames and axes, inertias and armature come from ``mujoco.MjModel``, the PD gains
and effort limits from ``RobotSpec`` (which reads them from the MJCF's actuators).
"""

from __future__ import annotations

import mujoco
import numpy as np
import torch
import warp as wp

from bcg_deploy.diffsim.types import JNT_FREE, JNT_HINGE, JNT_NONE, Model, StepData, Types
from bcg_deploy.robots.spec import RobotSpec


def _wxyz_to_xyzw(q: np.ndarray) -> np.ndarray:
    return np.concatenate([q[..., 1:4], q[..., :1]], axis=-1)


def _check_supported(mjm: mujoco.MjModel) -> None:
    for b in range(1, mjm.nbody):
        if mjm.body_jntnum[b] > 1:
            raise NotImplementedError(f"body {mjm.body(b).name!r} has {mjm.body_jntnum[b]} joints: at most 1 supported")
    for j in range(mjm.njnt):
        t = mjm.jnt_type[j]
        if t == mujoco.mjtJoint.mjJNT_FREE:
            if mjm.jnt_bodyid[j] != 1 or mjm.body_parentid[1] != 0:
                raise NotImplementedError("a free joint is supported only on body 1, a child of the world")
        elif t != mujoco.mjtJoint.mjJNT_HINGE:
            raise NotImplementedError(f"joint {mjm.joint(j).name!r}: only free and hinge joints are supported")
    for name in ("dof_damping", "dof_frictionloss"):
        if np.any(getattr(mjm, name) != 0):
            raise NotImplementedError(f"{name} is not supported (must be 0)")
    if np.any(mjm.jnt_stiffness != 0):
        raise NotImplementedError("jnt_stiffness is not supported (must be 0)")
    if np.any(mjm.dof_parentid[1:] >= np.arange(1, mjm.nv)):
        raise NotImplementedError("dofs must be ordered parent before child")


def tree_arrays(mjm: mujoco.MjModel) -> dict:
    """Index arrays of the tree (numpy int32): body children, per-body joint, mass-matrix sparsity."""
    nb, nv = mjm.nbody, mjm.nv
    children = [[] for _ in range(nb)]
    for b in range(1, nb):
        children[mjm.body_parentid[b]].append(b)
    max_children = max(1, max(len(c) for c in children))
    body_children = -np.ones((nb, max_children), np.int32)
    for b, c in enumerate(children):
        body_children[b, : len(c)] = c
    jnttype = np.full(nb, JNT_NONE, np.int32)
    qposadr = -np.ones(nb, np.int32)
    dofadr = -np.ones(nb, np.int32)
    jnt_pos = np.zeros((nb, 3))
    jnt_axis = np.zeros((nb, 3))
    for b in range(1, nb):
        if mjm.body_jntnum[b] == 1:
            j = mjm.body_jntadr[b]
            jnttype[b] = JNT_FREE if mjm.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE else JNT_HINGE
            qposadr[b], dofadr[b] = mjm.jnt_qposadr[j], mjm.jnt_dofadr[j]
            jnt_pos[b], jnt_axis[b] = mjm.jnt_pos[j], mjm.jnt_axis[j]
    # Tree-sparse rows: dof i, then its ancestors up to the root.
    rows = []
    for i in range(nv):
        row, j = [], i
        while j >= 0:
            row.append(j)
            j = mjm.dof_parentid[j]
        rows.append(row)
    Mnum = np.array([len(r) for r in rows], np.int32)
    Madr = np.concatenate([[0], np.cumsum(Mnum)[:-1]]).astype(np.int32)
    return {
        "body_parentid": mjm.body_parentid.astype(np.int32),
        "body_children": body_children,
        "max_children": max_children,
        "body_jnttype": jnttype,
        "body_qposadr": qposadr,
        "body_dofadr": dofadr,
        "jnt_pos": jnt_pos,
        "jnt_axis": jnt_axis,
        "dof_bodyid": mjm.dof_bodyid.astype(np.int32),
        "dof_Madr": Madr,
        "dof_Mnum": Mnum,
        "M_colind": np.concatenate(rows).astype(np.int32),
    }


def inertia_matrices(iquat_wxyz: np.ndarray, diag: np.ndarray) -> np.ndarray:
    """[..., 3, 3] rotational inertia in the body frame from principal axes (quaternion) and moments."""
    w, x, y, z = np.moveaxis(np.asarray(iquat_wxyz, dtype=float), -1, 0)
    R = np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
            np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
            np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
        ],
        -2,
    )
    return R @ (np.asarray(diag)[..., :, None] * np.swapaxes(R, -1, -2))


def put_model(mjm: mujoco.MjModel, robot: RobotSpec, t: Types, device: str, gravity: bool = True) -> Model:
    """Compile ``mjm`` (the robot without scene) into a Warp ``Model`` of precision ``t``.

    Raises NotImplementedError for MJCF features we do not simulate (ball/slide joints, several joints
    on one body, joint damping/friction/stiffness) rather than ignoring them silently.
    """
    _check_supported(mjm)
    tree = tree_arrays(mjm)
    nb, nv = mjm.nbody, mjm.nv
    jids = [mujoco.mj_name2id(mjm, mujoco.mjtObj.mjOBJ_JOINT, n) for n in robot.joint_names]
    if jids and min(jids) < 0:
        raise ValueError(f"{robot.name}: a RobotSpec joint is missing from the MJCF")
    act_qposadr = mjm.jnt_qposadr[jids].astype(np.int32)
    act_dofadr = mjm.jnt_dofadr[jids].astype(np.int32)
    dof_actid = -np.ones(nv, np.int32)
    dof_actid[act_dofadr] = np.arange(len(jids), dtype=np.int32)

    def ints(a):
        return wp.array(np.ascontiguousarray(a, dtype=np.int32), dtype=wp.int32, device=device)

    def arr(a, dtype):
        return wp.array(np.ascontiguousarray(a, dtype=t.np_dtype), dtype=dtype, device=device)

    g = mjm.opt.gravity if gravity else np.zeros(3)
    return Model(
        nq=mjm.nq,
        nv=nv,
        nbody=nb,
        nu=len(jids),
        nM=int(tree["dof_Mnum"].sum()),
        max_children=tree["max_children"],
        has_free_base=bool(tree["body_jnttype"][1] == JNT_FREE),
        has_jnt_pos=bool(np.any(tree["jnt_pos"] != 0)),
        types=t,
        device=device,
        body_parentid=ints(tree["body_parentid"]),
        body_children=ints(tree["body_children"]),
        body_jnttype=ints(tree["body_jnttype"]),
        body_qposadr=ints(tree["body_qposadr"]),
        body_dofadr=ints(tree["body_dofadr"]),
        body_pos=arr(mjm.body_pos, t.vec3),
        body_quat=arr(_wxyz_to_xyzw(mjm.body_quat), t.quat),
        jnt_pos=arr(tree["jnt_pos"], t.vec3),
        jnt_axis=arr(tree["jnt_axis"], t.vec3),
        body_mass=arr(mjm.body_mass[None], t.scalar),
        body_ipos=arr(mjm.body_ipos[None], t.vec3),
        body_inertia_mat=arr(inertia_matrices(mjm.body_iquat, mjm.body_inertia)[None], t.mat33),
        dof_bodyid=ints(tree["dof_bodyid"]),
        dof_Madr=ints(tree["dof_Madr"]),
        dof_Mnum=ints(tree["dof_Mnum"]),
        M_colind=ints(tree["M_colind"]),
        dof_armature=arr(mjm.dof_armature[None], t.scalar),
        dof_actid=ints(dof_actid),
        act_qposadr=ints(act_qposadr),
        act_dofadr=ints(act_dofadr),
        act_kp=arr(robot.kp[None], t.scalar),
        act_kd=arr(robot.kd[None], t.scalar),
        act_effort=arr(robot.effort_limit[None], t.scalar),
        gravity=t.vec3(*[float(x) for x in g]),
        host={
            **{k: v for k, v in tree.items() if isinstance(v, np.ndarray)},
            "act_dofadr": act_dofadr,
            "body_iquat": mjm.body_iquat.copy(),
            "body_inertia": mjm.body_inertia.copy(),
        },
    )


def step_layout(
    m: Model, num_envs: int, substeps: int, bias_midpoint: bool = False, extra_layout: tuple = ()
) -> list[tuple[str, tuple, type, int, bool]]:
    """(name, shape, warp dtype, scalars per element, has adjoint) of every ``StepData`` array; with
    ``bias_midpoint`` also the arrays of the predicted-midpoint-velocity pass (``*_pred``, ``*_mid``);
    ``extra_layout`` adds further stages' arrays (the contact stage's, ``contact.contact_layout``)."""
    t, E, S, nb, nv = m.types, num_envs, substeps, m.nbody, m.nv
    extra = list(extra_layout)
    if bias_midpoint:
        extra += [(n, (S, E, nv), t.scalar, 1, True) for n in ("dqd_pred", "qd_pred")]
        extra += [(n, (S, E, nb), t.vec6, 6, True) for n in ("cvel_mid", "cacc_mid", "cfrc_mid")]
        extra += [(n, (S, E, nv), t.scalar, 1, True) for n in ("qfrc_bias_mid", "qfrc_actuator_mid")]
        extra += [(n, (S, E, nv), t.scalar, 1, True) for n in ("qfrc_smooth_mid", "dof_damping_mid")]
    return extra + [
        ("q", (S + 1, E, m.nq), t.scalar, 1, True),
        ("qd", (S + 1, E, nv), t.scalar, 1, True),
        ("q_target", (E, m.nu), t.scalar, 1, True),
        ("q_mid", (S, E, m.nq), t.scalar, 1, True),
        ("ref_pos", (S, E), t.vec3, 3, True),
        ("xpos", (S, E, nb), t.vec3, 3, True),
        ("xquat", (S, E, nb), t.quat, 4, True),
        ("cinert", (S, E, nb), t.vec10, 10, True),
        ("cdof", (S, E, nv), t.vec6, 6, True),
        ("cvel", (S, E, nb), t.vec6, 6, True),
        ("cacc", (S, E, nb), t.vec6, 6, True),
        ("cfrc", (S, E, nb), t.vec6, 6, True),
        ("crb", (S, E, nb), t.vec10, 10, True),
        ("qM", (S, E, m.nM), t.scalar, 1, True),
        ("qLD", (S, E, m.nM), t.scalar, 1, False),
        ("qfrc_bias", (S, E, nv), t.scalar, 1, True),
        ("qfrc_actuator", (S, E, nv), t.scalar, 1, True),
        ("qfrc_smooth", (S, E, nv), t.scalar, 1, True),
        ("dof_damping", (S, E, nv), t.scalar, 1, True),
        ("dqd", (S, E, nv), t.scalar, 1, True),
    ]


HEAD = ("q", "qd", "q_target")  # arrays without a per-substep leading dim of size S


def _carve(buffer: torch.Tensor, offset: int, shape: tuple, dtype: type, per: int, device: str, lead_stride=None):
    """A Warp array and a torch view over ``buffer`` starting at ``offset`` (scalars; no copy). With
    ``lead_stride`` (scalars), the leading dim is strided (substep-major storage), the rest contiguous."""
    inner = list(shape[1:]) if lead_stride is not None else list(shape)
    inner_strides, acc = [], per
    for n in reversed(inner):
        inner_strides.insert(0, acc)
        acc *= n
    size = shape if per == 1 else (*shape, per)
    if lead_stride is None:
        strides = inner_strides
    else:
        strides = [lead_stride, *inner_strides]
    view = buffer.as_strided(size, strides + ([1] if per > 1 else []), offset)
    es = buffer.element_size()
    arr = wp.array(
        ptr=buffer.data_ptr() + offset * es, shape=shape, strides=tuple(x * es for x in strides), dtype=dtype,
        device=device,
    )  # fmt: skip
    return arr, view


def _allocate(layout: list, names: list, dtype: torch.dtype, device: str, zero: bool):
    """One flat buffer: the HEAD arrays first, then one contiguous block per substep holding that
    substep's slice of every other array. Returns (buffer, arrays, views, block offsets, block size)."""
    spec = {n: (shape, wdt, per) for n, shape, wdt, per, _ in layout}
    head = [n for n in names if n in HEAD]
    body = [n for n in names if n not in HEAD]
    substeps = spec[body[0]][0][0] if body else 0
    head_size = sum(int(np.prod(spec[n][0])) * spec[n][2] for n in head)
    per_sub = {n: int(np.prod(spec[n][0][1:])) * spec[n][2] for n in body}
    block = sum(per_sub.values())
    total = head_size + substeps * block
    buf = (torch.zeros if zero else torch.empty)(total, dtype=dtype, device=torch.device(device))
    arrays, views, off = {}, {}, 0
    for n in head:
        arrays[n], views[n] = _carve(buf, off, *spec[n], device)
        off += int(np.prod(spec[n][0])) * spec[n][2]
    for n in body:
        arrays[n], views[n] = _carve(buf, off, *spec[n], device, lead_stride=block)
        off += per_sub[n]
    return buf, arrays, views, head_size, block


def make_step_data(
    m: Model,
    num_envs: int,
    substeps: int,
    bias_midpoint: bool = False,
    shared_grads: StepData | None = None,
    extra_layout: tuple = (),
    grads: bool = True,
) -> StepData:
    """Allocate one control step's arrays in two flat torch buffers (forward values and adjoints).

    Storage is substep-major (all arrays of substep s are one contiguous block), so a substep's kernels
    touch one region and its adjoints can be zeroed with one memset just before its backward (see
    ``integrator.record_step``). The adjoints are only live during the step's backward call (its input
    adjoints are copied out at its end), so steps may share them: ``shared_grads`` (a StepData of the
    same layout) lends its adjoint buffer, which halves the tape's memory and keeps the adjoints in
    cache from one step's backward to the next. ``qLD`` has no adjoint. ``grads=False`` allocates no
    adjoints at all (a forward-only step: its launches must be recorded without gradients).
    """
    layout = step_layout(m, num_envs, substeps, bias_midpoint, extra_layout)
    tdt, dev = m.types.torch_dtype, m.device
    fwd, arrays, views, _, _ = _allocate(layout, [n for n, *_ in layout], tdt, dev, zero=False)
    if not grads:
        return StepData(
            arrays=arrays, grads={}, views=views, grad_views={}, fwd_buffer=fwd,
            grad_buffer=torch.empty(0, dtype=tdt, device=fwd.device), grad_flat=None, grad_blocks=[], fwd_cmds=[],
            adj_cmds=[],
        )  # fmt: skip
    if shared_grads is not None:
        g = shared_grads
        return StepData(
            arrays=arrays, grads=g.grads, views=views, grad_views=g.grad_views, fwd_buffer=fwd,
            grad_buffer=g.grad_buffer, grad_flat=g.grad_flat, grad_blocks=g.grad_blocks, fwd_cmds=[], adj_cmds=[],
        )  # fmt: skip
    names = [n for n, *_, has_grad in layout if has_grad]
    grad, grads, grad_views, head, block = _allocate(layout, names, tdt, dev, zero=True)
    S = m.types.scalar
    # Warp memsets, not torch's zero_(): torch splits a large fill over its intra-op threads, which on a
    # shared 2-core machine measured 0.25-8 ms instead of 7 us.
    grad_flat = wp.array(ptr=grad.data_ptr(), shape=(grad.numel(),), dtype=S, device=dev)
    es = grad.element_size()
    blocks = [
        wp.array(ptr=grad.data_ptr() + (head + s * block) * es, shape=(block,), dtype=S, device=dev)
        for s in range(substeps)
    ]
    return StepData(
        arrays=arrays, grads=grads, views=views, grad_views=grad_views, fwd_buffer=fwd, grad_buffer=grad,
        grad_flat=grad_flat, grad_blocks=blocks, fwd_cmds=[], adj_cmds=[],
    )  # fmt: skip
