"""Each stack's runtime against our reading of its code (file:line in each test): what it feeds the policy at
reset and at every step. The policies are the fixtures' linear actors run by onnxruntime; a recorder keeps the
feeds each ``session.run`` got."""

from __future__ import annotations

import numpy as np
import pytest

from bcg_deploy.rotations import quat_numpy as quat
from bcg_deploy.sim2sim.reference import initial_state
from bcg_deploy.stacks import holosoma, inspect, unitree_motion
from bcg_deploy.stacks import motion_tracking_controller as mtc
from bcg_deploy.stacks.base import session
from bcg_deploy.stacks.unitree_runtime import UnitreeRuntime, eigen_slerp, lab_blend, mjlab_frame

from . import fixtures as fx


class Recorder:
    """A real onnxruntime session that keeps a copy of every feed."""

    def __init__(self, path) -> None:
        self.session, self.feeds = session(path), []

    def run(self, names, feeds):
        self.feeds.append({k: np.array(v, copy=True) for k, v in feeds.items()})
        return self.session.run(names, feeds)


def _state(c: dict, k: int) -> tuple[np.ndarray, np.ndarray]:
    q = np.concatenate([c["root_pos"][k], c["root_quat"][k], c["joint_pos"][k]])
    v = np.concatenate([np.zeros(6), c["joint_vel"][k]])
    return q, v


# ----------------------------------------------------------------------------------- unitree_rl_mjlab


def test_mjlab_frame_index_is_float32():
    """unitree_rl_mjlab 5b7e396 deploy/robots/g1/src/State_Mimic.cpp:171 ``motion->update(env->episode_length *
    env->step_dt + time_range_[0])`` (long * float -> float) and include/State_Mimic.h:95-101 ``frame =
    floor(clamp(time, 0, duration) / dt)``, dt = 1.0f / 50.0f: frame k - 1 at 43 of the 751 steps of a 15 s clip."""
    k = np.arange(751)
    frames = np.array([mjlab_frame(i, 0.02, 751) for i in k])
    behind = np.nonzero(frames != k)[0]
    assert len(behind) == 43 and behind[0] == 15 and np.all(frames[behind] == behind - 1)
    assert np.sum(np.floor(k * 0.02 / (1 / 50)) != k) < len(behind)  # the float32 arithmetic makes most of them
    assert mjlab_frame(10_000, 0.02, 751) == 750  # clamped to the last frame


def test_unitree_runtime_observes_the_float32_frame(tmp_path):
    """The runtime's motion_command at step 15 is NPZ frame 14 (the deploy's), and the first observation's
    last_action is zero (action_manager.h:151-157); the anchor term at the start is the identity's 6D when the
    robot stands on the reference (init_quat = yaw(robot torso) yaw(reference pelvis)^T, State_Mimic.cpp:162-165,
    with zero waist yaw)."""
    folder = fx.unitree_folder(tmp_path, frames=40)
    files = inspect(folder).files
    rec = Recorder(files.onnx.path)
    rt = UnitreeRuntime(files, rec)
    c = fx.clip(40)
    for k in range(17):
        q, v = _state(c, min(k, 39))
        target = rt.act(k, q, v)
    obs = [f["obs"][0] for f in rec.feeds]
    np.testing.assert_allclose(obs[15][:29], files.joint_pos[14], atol=0)
    np.testing.assert_allclose(obs[16][:29], files.joint_pos[16], atol=0)
    assert np.all(obs[0][-29:] == 0) and np.any(obs[1][-29:] != 0)
    np.testing.assert_allclose(obs[1][-29:], fx.BIAS + obs[0] @ _weights(files.onnx.path), atol=1e-5)
    assert target.shape == (29,)


def _weights(path):
    import onnx
    from onnx import numpy_helper

    return numpy_helper.to_array(next(t for t in onnx.load(str(path)).graph.initializer if t.name == "W"))


def test_unitree_anchor_term_is_the_fixed_one(tmp_path):
    """Robot rotated 0.4 rad in yaw against a reference it otherwise matches: init_quat absorbs the start yaw,
    so the anchor term is the identity's 6D (1, 0, 0, 1, 0, 0) (the FIXED term of unitree_rl_lab 4711dee
    State_Mimic.cpp: rot = ((init_quat ref)^-1 real)^T)."""
    folder = fx.unitree_folder(tmp_path, frames=10)
    files = inspect(folder).files
    files.joint_pos[:, 12:15] = 0.0  # a straight waist: the reference pelvis yaw is the torso's
    rec = Recorder(files.onnx.path)
    c = fx.clip(10)
    q, v = _state(c, 0)
    q[7 + 12 : 7 + 15] = 0.0
    q[3:7] = quat.mul(np.array([np.cos(0.2), 0, 0, np.sin(0.2)]), q[3:7])
    UnitreeRuntime(files, rec).act(0, q, v)
    np.testing.assert_allclose(rec.feeds[0]["obs"][0][58:64], [1, 0, 0, 1, 0, 0], atol=2e-6)


# ----------------------------------------------------------------------------------- unitree_rl_lab


def test_lab_index_and_blend():
    """unitree_rl_lab 4711dee include/State_Mimic.h MotionLoader_::update: index_0 = round(t / (N dt) (N - 1)),
    blend = round((t - index_0 dt) / dt 1e5) / 1e5: at t = k dt the pair gives frame k (blend 0 on index k, or
    blend 1 on index k - 1 past mid-clip, where float32 makes it 1.00002 at some steps: a 2e-5 extrapolation)."""
    n = 751
    for k in (0, 1, 374, 376, 600, 749):
        i0, i1, b = lab_blend(k * 0.02, 50.0, n)
        assert (i0 == k and abs(float(b)) < 1e-4) or (i1 == k and abs(float(b) - 1) < 1e-4), (k, i0, b)
    i0, _, b = lab_blend(0.5 * 0.02, 50.0, n)
    assert i0 == 0 and abs(float(b) - 0.5) < 1e-5


def test_eigen_slerp_matches_the_shortest_arc():
    rng = np.random.default_rng(0)
    a, b = quat.normalize(rng.standard_normal(4)), quat.normalize(rng.standard_normal(4))
    for t in (0.0, 0.3, 1.0):
        got = eigen_slerp(a, -b, np.float32(t)).astype(np.float64)
        want = quat.slerp(a, b, t)
        assert min(np.abs(got - want).max(), np.abs(got + want).max()) < 1e-5


def test_csv_to_npz_resampling(tmp_path):
    """unitree_rl_mjlab scripts/csv_to_npz.py:45-131: 30 -> 50 fps by lerp / slerp at t = i / 50 s; a
    constant-velocity root gives its velocity back (central differences)."""
    rows = 31
    t = np.arange(rows) / 30.0
    data = np.zeros((rows, 36))
    data[:, 0] = 0.6 * t
    data[:, 6] = 1.0
    data[:, 7:] = 0.1 * np.sin(t)[:, None]
    path = tmp_path / "m.csv"
    np.savetxt(path, data, delimiter=",")
    r = unitree_motion.resample_csv(path)
    assert r["joint_pos"].shape == (50, 29)  # arange(0, 1.0, 0.02)
    np.testing.assert_allclose(r["root_pos"][:, 0], 0.6 * np.arange(50) / 50, atol=1e-6)
    np.testing.assert_allclose(r["root_lin_vel"][:, 0], 0.6, atol=1e-4)
    np.testing.assert_allclose(r["joint_pos"][15], data[9, 7:], atol=1e-6)  # t = 0.3 s = CSV row 9


# ----------------------------------------------------------------------------------- motion_tracking_controller


def test_mtc_reset_runs_the_policy_on_zeros(tmp_path):
    """motion_tracking_controller 6beda6d src/MotionOnnxPolicy.cpp:11-15: reset() sets time step 0 and runs
    forward(zeros); forward (lines 17-21) feeds time_step then increments it. So the first update sees the
    reference of frame 0 and, as its 'actions' term, the policy's output on the zero observation (here its bias),
    and runs with time_step 1."""
    path = fx.mtc_onnx(tmp_path / "p.onnx", frames=20)
    ins = inspect(path)
    rec = Recorder(path)
    c = fx.clip(20)
    rt = mtc.MtcRuntime(ins.files, rec, fx.SPEC.load_model())
    for k in range(3):
        rt.act(k, *_state(c, k))
    ts = [float(f["time_step"][0, 0]) for f in rec.feeds]
    assert ts == [0.0, 1.0, 2.0, 3.0]
    assert np.all(rec.feeds[0]["obs"] == 0)
    first = rec.feeds[1]["obs"][0]
    np.testing.assert_allclose(first[-29:], fx.BIAS, atol=1e-6)  # last action = policy(0), not 0
    np.testing.assert_allclose(first[:29], c["joint_pos"][0], atol=1e-6)  # command: frame 0
    np.testing.assert_allclose(rec.feeds[2]["obs"][0][:29], c["joint_pos"][1], atol=1e-6)
    # the robot on the reference: the aligned anchor orientation is the identity's 6D
    np.testing.assert_allclose(first[58:64], [1, 0, 0, 1, 0, 0], atol=1e-6)


def test_mtc_joint_order_by_name(tmp_path):
    """The metadata joint order is the policy's (README.md: joint order in the ONNX metadata): a policy listing
    the joints in another order gets its observation and sends its targets by name."""
    names = list(fx.SPEC.joint_names)
    perm = np.random.default_rng(1).permutation(29)
    shuffled = [names[i] for i in perm]
    f3 = lambda v: ",".join(f"{x:.3f}" for x in v)  # noqa: E731
    path = fx.mtc_onnx(tmp_path / "p.onnx", joint_names=",".join(shuffled),
                       default_joint_pos=f3(fx.SPEC.default_joint_pos[perm]),
                       action_scale=f3(fx.SPEC.action_scale[perm]))  # fmt: skip
    ins = inspect(path)
    np.testing.assert_array_equal(np.asarray(shuffled)[ins.files.perm], names)
    rec = Recorder(path)
    c = fx.clip(20)
    q, v = _state(c, 0)
    target = mtc.MtcRuntime(ins.files, rec, fx.SPEC.load_model()).act(0, q, v)
    obs = rec.feeds[1]["obs"][0]
    np.testing.assert_allclose(obs[67:96], (q[7:] - fx.SPEC.default_joint_pos)[perm], atol=2e-3)  # joint_pos
    a = rec.session.run(["actions"], rec.feeds[1])[0][0]
    np.testing.assert_allclose(target[perm], fx.SPEC.default_joint_pos[perm] + fx.SPEC.action_scale[perm] * a,
                               atol=2e-3)  # fmt: skip


# ----------------------------------------------------------------------------------- holosoma


def test_holosoma_observes_the_previous_reference(tmp_path):
    """holosoma fc600e7 policies/wbt.py:192-208 (setup: the policy on zeros at time_step 0 gives motion_command_0)
    and 262-320 (the observation uses the reference the previous call returned, then the call runs with
    time_step k): step k sees frame k - 1 (frame 0 at step 0); terms sorted by name (policies/base.py:125-136):
    actions 0:29, base_ang_vel 29:32, dof_pos 32:61, dof_vel 61:90, motion_command 90:148, motion_ref_ori_b 148:154;
    dof_pos relative to the CONFIG default (config_values/robot.py:34-40)."""
    path = fx.holosoma_onnx(tmp_path / "p.onnx", frames=20)
    ins = inspect(path)
    rec = Recorder(path)
    c = fx.clip(20)
    rt = holosoma.HoloRuntime(ins.files, rec, fx.SPEC)
    for k in range(4):
        rt.act(k, *_state(c, k))
    assert [float(f["time_step"][0, 0]) for f in rec.feeds] == [0.0, 0.0, 1.0, 2.0, 3.0]
    obs = [f["obs"][0] for f in rec.feeds[1:]]
    for k, frame in ((0, 0), (1, 0), (2, 1), (3, 2)):
        np.testing.assert_allclose(obs[k][90:119], c["joint_pos"][frame], atol=1e-6)
    assert np.all(obs[0][:29] == 0) and np.any(obs[1][:29] != 0)  # last action: zero at start, then the output
    q, _ = _state(c, 2)
    np.testing.assert_allclose(obs[2][32:61], q[7:] - np.asarray(holosoma.DEFAULT_DOF_ANGLES), atol=1e-6)
    np.testing.assert_allclose(obs[0][148:154], [1, 0, 0, 1, 0, 0], atol=1e-5)  # on the reference: identity


@pytest.mark.parametrize("stack", ["motion_tracking_controller", "holosoma"])
def test_reference_from_the_graph(tmp_path, stack):
    """The clip sim2sim measures against, read from the graph (pelvis from the anchor / torso pose through the
    joints where the stack gives no pelvis), equals the clip the fixture exported."""
    from bcg_deploy.stacks.replay import StackPolicy

    make = fx.mtc_onnx if stack == "motion_tracking_controller" else fx.holosoma_onnx
    pol = StackPolicy(make(tmp_path / "p.onnx", frames=15), fx.SPEC, None, False, None)
    ref, c = pol.reference(), fx.clip(15)
    np.testing.assert_allclose(ref.root_pos, c["root_pos"], atol=1e-5)
    np.testing.assert_allclose(ref.body_pos_w, c["body_pos_w"], atol=1e-5)
    q0, _ = initial_state(ref, 36, 35)
    np.testing.assert_allclose(q0[7:], c["joint_pos"][0], atol=1e-6)
