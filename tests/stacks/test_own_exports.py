"""Our own deploy exports replay through their stack's runtime: ``beyondmimic`` / ``beyondmimic_wose`` through
motion_tracking_controller's (its reset call on a zero observation), ``unitree`` through unitree_rl_mjlab's (its
float32 frame index). On the reference states the stack runtime's observation equals sim2sim's contract
(``ObsContract``, the training maths) wherever the stack does not differ on purpose."""

from __future__ import annotations

import numpy as np
import pytest

from bcg_deploy.motions.motion import Motion
from bcg_deploy.sim2sim import Sim2SimConfig, prepare, run_sim2sim
from bcg_deploy.sim2sim.obs_contract import ObsContract
from bcg_deploy.sim2sim.reference import initial_state
from bcg_deploy.stacks import detect, verify
from bcg_deploy.stacks.replay import StackPolicy
from bcg_deploy.stacks.unitree_runtime import mjlab_frame

from .test_runtimes import Recorder


@pytest.fixture
def exports(deploy_exports):
    return deploy_exports


def _states(setup, k):
    ref = setup.reference
    one = Motion.from_bodies(ref.fps, *(getattr(ref, f)[k : k + 2] for f in ("joint_pos", "joint_vel",
                             "body_pos_w", "body_quat_w", "body_lin_vel_w", "body_ang_vel_w")))  # fmt: skip
    return initial_state(one, setup.model.nq, setup.model.nv)


def _instrumented(path):
    """sim2sim's set-up of ``path``, its policy, a recorder of the ONNX calls, the stack's runtime calling
    through it, and the clean contract (``ObsContract``) on the same model and reference."""
    setup = prepare(path, Sim2SimConfig(runs=1))
    pol = setup.policy
    rec = Recorder(pol.path)
    rt = pol.runtime(setup.model)
    rt.session = rec
    meta = pol.meta
    contract = ObsContract(pol.profile, setup.model, setup.reference, meta.joint_names, meta.body_names,
                           meta.default_joint_pos)  # fmt: skip
    return setup, pol, rec, rt, contract


@pytest.mark.parametrize("profile", ["beyondmimic", "beyondmimic_wose"])
def test_beyondmimic_export_runs_as_motion_tracking_controller(exports, profile):
    """The stack's observation equals the contract's at every step, with the contract fed the stack's previous
    action; the first one is the policy's output on zeros (motion_tracking_controller src/MotionOnnxPolicy.cpp:
    11-15), which a clean-contract replay would have left at 0."""
    assert detect(exports[profile])[0] == "motion_tracking_controller" and verify(exports[profile]).ok
    setup, pol, rec, rt, contract = _instrumented(exports[profile])
    assert isinstance(pol, StackPolicy) and pol.stack == "motion_tracking_controller"
    zero_action = rec.session.run(["actions"], {"obs": np.zeros((1, pol.profile.obs_dim), np.float32),
                                                "time_step": np.zeros((1, 1), np.float32)})[0][0]  # fmt: skip
    last = zero_action.astype(np.float64)
    assert np.abs(last).max() > 1e-3
    q0, _ = _states(setup, 0)
    contract.reset(q0)
    for k in range(4):
        q, v = _states(setup, k)
        rt.act(k, q, v)
        got = rec.feeds[-1]["obs"][0]
        np.testing.assert_allclose(got, contract.observation(k, q, v, last)[0], atol=2e-5)
        last = rec.session.run(["actions"], rec.feeds[-1])[0][0].astype(np.float64)


def test_unitree_export_runs_as_unitree_rl_mjlab(exports):
    """State_Mimic's observation equals the contract's at the steps where its float32 frame is k, and is the
    contract's of frame k - 1 where it is not (include/State_Mimic.h:95-101)."""
    path = exports["unitree"]
    assert detect(path.parent.parent)[0] == "unitree_rl_mjlab" and verify(path.parent.parent).ok
    setup, pol, rec, rt, contract = _instrumented(path)
    q0, _ = _states(setup, 0)
    contract.reset(q0)
    last = np.zeros(29)
    steps = [0, 1, 2, 15, 16]
    assert mjlab_frame(15, 0.02, setup.reference.num_frames) == 14
    for k in range(17):
        q, v = _states(setup, k)
        rt.act(k, q, v)
        if k in steps:
            frame = mjlab_frame(k, 0.02, setup.reference.num_frames)
            want = contract.observation(frame, q, v, last)[0]
            np.testing.assert_allclose(rec.feeds[-1]["obs"][0], want, atol=2e-5)
        last = rec.session.run([rec.session.get_outputs()[0].name], rec.feeds[-1])[0][0].astype(np.float64)


def test_reports_name_the_stack(exports, tmp_path):
    rep = run_sim2sim(exports["beyondmimic_wose"], Sim2SimConfig(runs=1, max_duration_s=0.3, jobs=1))
    stack = rep.settings["stack"]
    assert stack["name"] == "motion_tracking_controller" and "bcgd export" in stack["chosen"]
    names = {r["name"]: r["modelled"] for r in stack["behaviours"]}
    assert names["reset forward on zeros"] == "yes"
    rep = run_sim2sim(exports["unitree"], Sim2SimConfig(runs=1, max_duration_s=0.3, jobs=1))
    assert rep.settings["stack"]["name"] == "unitree_rl_mjlab"
    assert {r["name"]: r["modelled"] for r in rep.settings["stack"]["behaviours"]}["float32 frame index"] == "yes"


def test_stack_bcgd_is_the_clean_contract(exports):
    """``--stack bcgd``: the same export through the contract alone; its first step differs from the controller's
    only by the last-action term (zero against the reset call's output)."""
    from bcg_deploy.sim2sim.reference import initial_state as init
    from bcg_deploy.stacks.replay import ContractPolicy

    clean = prepare(exports["beyondmimic"], Sim2SimConfig(runs=1, stack="bcgd"))
    stack = prepare(exports["beyondmimic"], Sim2SimConfig(runs=1))
    assert isinstance(clean.policy, ContractPolicy) and isinstance(stack.policy, StackPolicy)
    q, v = init(clean.reference, clean.model.nq, clean.model.nv)
    from bcg_deploy.sim2sim.policy import make_inputs

    inputs = make_inputs(29)
    inputs["base_pos"][0], inputs["base_quat"][0], inputs["joint_pos"][0] = q[:3], q[3:7], q[7:]
    inputs["base_lin_vel"][0], inputs["base_ang_vel"][0], inputs["joint_vel"][0] = v[:3], v[3:6], v[6:]
    a = clean.policy.controller(clean)(0, inputs)
    b = stack.policy.controller(stack)(0, inputs)
    assert np.abs(a - b).max() > 1e-4


def test_verify_refuses_our_export_changed_after_export(exports, tmp_path):
    """Our exports carry a content hash (``bcg_deploy.integrity``): ``bcgd verify`` refuses a copy edited after
    the export with one line, even where the edit (here the doc string) changes nothing a stack reads."""
    import onnx

    assert verify(exports["beyondmimic"]).ok
    model = onnx.load(str(exports["beyondmimic"]))
    model.doc_string = "edited"
    edited = tmp_path / "edited.onnx"
    onnx.save(model, str(edited))
    found = verify(edited).findings.mismatches
    assert len(found) == 1 and "was changed after bcgd export" in found[0], found
