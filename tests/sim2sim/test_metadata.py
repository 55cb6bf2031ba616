"""Metadata parsing (pure: a dict in, PolicyMetadata out): both export profiles, and the checks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bcg_deploy.errors import BcgdError
from bcg_deploy.robots import load_robot
from bcg_deploy.sim2sim.injection import (
    domain_randomization_from_metadata,
    init_noise_from_metadata,
    noise_levels,
    push_from_metadata,
)
from bcg_deploy.sim2sim.policy import parse_metadata

P = Path("p.onnx")


def common(spec):
    return {
        "bcgd.control_dt": "0.02",
        "bcgd.effort_limit": json.dumps(spec.effort_limit.tolist()),
        "bcgd.armature": json.dumps(spec.armature.tolist()),
        "bcgd.robot": json.dumps(spec.identity()),
        "bcgd.motion": json.dumps({"name": "x", "fps": 50.0, "num_frames": 12}),
        "bcgd.quat_order": json.dumps("wxyz"),
    }


def test_beyondmimic_and_holosoma_profiles_parse_alike():
    spec = load_robot()
    csv = lambda a: ",".join(repr(float(x)) for x in a)  # noqa: E731
    bm = common(spec) | {
        "joint_names": ",".join(spec.joint_names),
        "joint_stiffness": csv(spec.kp),
        "joint_damping": csv(spec.kd),
        "default_joint_pos": csv(spec.default_joint_pos),
        "action_scale": csv(spec.action_scale),
        "body_names": ",".join(spec.body_names),
    }
    ho = common(spec) | {
        "dof_names": json.dumps(list(spec.joint_names)),
        "kp": json.dumps(spec.kp.tolist()),
        "kd": json.dumps(spec.kd.tolist()),
        "default_joint_pos": json.dumps(spec.default_joint_pos.tolist()),
        "action_scale": json.dumps(spec.action_scale.tolist()),
        "body_names": json.dumps(list(spec.body_names)),
    }
    a, b = parse_metadata(bm, P, spec), parse_metadata(ho, P, spec)
    for m in (a, b):
        np.testing.assert_array_equal(m.kp, spec.kp)  # full precision survives
        np.testing.assert_array_equal(m.kd, spec.kd)
        np.testing.assert_array_equal(m.effort_limit, spec.effort_limit)
        assert m.joint_names == spec.joint_names and m.num_frames == 12 and m.control_dt == 0.02


def test_checks():
    spec = load_robot()
    base = common(spec) | {
        "joint_names": ",".join(spec.joint_names),
        "joint_stiffness": ",".join(map(str, spec.kp)),
        "joint_damping": ",".join(map(str, spec.kd)),
        "default_joint_pos": ",".join(map(str, spec.default_joint_pos)),
        "body_names": ",".join(spec.body_names),
    }
    swapped = list(spec.joint_names)
    swapped[0], swapped[1] = swapped[1], swapped[0]
    bad = {
        "joint order must be the robot's": {"joint_names": ",".join(swapped)},
        "expects 'wxyz'": {"bcgd.quat_order": json.dumps("xyzw")},
        "expected seconds > 0": {"bcgd.control_dt": "0"},
        "has 28 values": {"joint_damping": ",".join(map(str, spec.kd[:28]))},
        "not a list of numbers": {"joint_stiffness": "a,b"},
        "num_frames >= 2": {"bcgd.motion": json.dumps({"fps": 50})},
        "not valid JSON": {"bcgd.robot": "{"},
    }
    for expected, change in bad.items():
        with pytest.raises(BcgdError, match=expected.replace("(", r"\(").replace(")", r"\)")):
            parse_metadata(base | change, P, spec)
    hashed = base | {"bcgd.robot": json.dumps({"name": "g1", "model_hash": "0" * 64})}
    with pytest.raises(BcgdError, match="--force"):
        parse_metadata(hashed, P, spec)
    assert parse_metadata(hashed, P, spec, force=True).robot["model_hash"] == "0" * 64


def test_injection_settings_from_export_metadata():
    """The exporter's key names (bcg_deploy.export.metadata) map onto sim2sim's ranges."""
    dr, note = domain_randomization_from_metadata(
        {"enabled": True, "friction": [0.4, 1.0], "com_offset_m": [-0.02, 0.02], "joint_offset_rad": [-0.005, 0.005]}
    )
    assert dr.friction == (0.4, 1.0) and dr.com_offset_m == (-0.02, 0.02) and dr.joint_offset_rad == (-0.005, 0.005)
    assert "METHOD.md defaults for" in note and "kp_scale" in note
    dr, note = domain_randomization_from_metadata({"link_com_offset": 0.03, "default_joint_offset": 0.01})
    assert dr.com_offset_m == (-0.03, 0.03) and dr.joint_offset_rad == (-0.01, 0.01)
    assert "METHOD.md section 6 defaults" in domain_randomization_from_metadata(None)[1]
    push, note = push_from_metadata({"enabled": True, "interval_s": [2, 4], "lin_vel": [0.1, 0.2, 0.3], "ang_vel": 0.5})
    assert push.interval_s == (2.0, 4.0) and push.lin_vel == (0.1, 0.2, 0.3) and push.ang_vel == (0.5, 0.5, 0.5)
    levels, note = noise_levels(None)
    assert levels["joint_vel"] == 0.5 and "METHOD.md" in note


def test_init_noise_is_the_recorded_box_whatever_the_training_scale():
    box = {"reset_pos": [0.05, 0.05, 0.01], "reset_rot": [0.1, 0.1, 0.2], "reset_joint": 0.1}
    plain, note = init_noise_from_metadata(box)
    wide, wide_note = init_noise_from_metadata({**box, "reset_scale": 1.5})
    assert wide == plain and plain.rot == (0.1, 0.1, 0.2)
    assert "1.5 x this box" in wide_note and "x this box" not in note
