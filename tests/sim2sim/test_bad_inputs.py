"""Unusable policy files are refused with a one-line error and a non-zero exit (no traceback).

The small ONNX graphs here are built with onnx.helper only to test rejection; they are not policies.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from bcg_deploy.cli import _register, main
from bcg_deploy.robots import load_robot

RAW = ("base_pos", "base_quat", "base_lin_vel", "base_ang_vel", "joint_pos", "joint_vel", "time_step")


def tiny_graph(path, inputs=RAW, joints=29, metadata=None):
    dims = {"base_pos": 3, "base_quat": 4, "base_lin_vel": 3, "base_ang_vel": 3, "time_step": 1, "obs": 849, "qpos": 36}
    dims |= {"joint_pos": joints, "joint_vel": joints}
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", dims[n]]) for n in inputs]
    src = inputs[0]
    names = ["joint_pos_target", "ref_joint_pos", "ref_joint_vel", "body_pos_w", "body_quat_w"]
    names += ["body_lin_vel_w", "body_ang_vel_w"]
    nodes = [helper.make_node("Identity", [src], [n]) for n in names]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names]
    model = helper.make_model(helper.make_graph(nodes, "tiny", ins, outs), opset_imports=[helper.make_opsetid("", 17)])
    for k, v in (metadata or {}).items():
        model.metadata_props.append(onnx.StringStringEntryProto(key=k, value=v))
    onnx.save(model, str(path))
    return path


def full_metadata(joints=29, model_hash=None):
    spec = load_robot()
    names = list(spec.joint_names[:joints])
    csv = lambda a: ",".join(f"{x:.17g}" for x in np.resize(a, joints))  # noqa: E731
    return {
        "joint_names": ",".join(names),
        "joint_stiffness": csv(spec.kp),
        "joint_damping": csv(spec.kd),
        "default_joint_pos": csv(spec.default_joint_pos),
        "action_scale": csv(spec.action_scale),
        "body_names": ",".join(spec.body_names),
        "anchor_body_name": "pelvis",
        "bcgd.control_dt": "0.02",
        "bcgd.effort_limit": json.dumps(list(np.resize(spec.effort_limit, joints))),
        "bcgd.robot": json.dumps({"name": "g1", "model_hash": model_hash or spec.model_hash}),
        "bcgd.motion": json.dumps({"name": "tiny", "fps": 50, "num_frames": 10}),
        "bcgd.quat_order": json.dumps("wxyz"),
    }


def run_cli(args, capsys):
    _register()
    old = sys.argv
    sys.argv = ["bcgd", *map(str, args)]
    try:
        with pytest.raises(SystemExit) as exc:
            main()
    finally:
        sys.argv = old
    out = capsys.readouterr()
    return exc.value.code, out.err


CASES = {
    "missing file": (lambda p: p / "nope.onnx", "no such file"),
    "unreadable file": (lambda p: _write(p / "junk.onnx", b"this is not an onnx model"), "not a loadable ONNX model"),
    "no metadata": (lambda p: tiny_graph(p / "nometa.onnx"), "no bcgd metadata"),
    "wrong input names": (
        lambda p: tiny_graph(p / "obs.onnx", inputs=("obs", "time_step"), metadata=full_metadata()),
        "paper profile's 849-value observation",
    ),
    "unknown input names": (
        lambda p: tiny_graph(p / "x.onnx", inputs=("base_pos", "qpos", "time_step"), metadata=full_metadata()),
        "do not match the expected",
    ),
    "28 joints": (lambda p: tiny_graph(p / "j28.onnx", joints=28, metadata=full_metadata(28)), "expected (batch, 29)"),
    "28 joint names": (lambda p: tiny_graph(p / "n28.onnx", metadata=full_metadata(28)), "has 28 joints"),
    "wrong model hash": (
        lambda p: tiny_graph(p / "hash.onnx", metadata=full_metadata(model_hash="ab" * 32)),
        "pass --force",
    ),
    "missing key": (
        lambda p: tiny_graph(p / "key.onnx", metadata={k: v for k, v in full_metadata().items() if k != "bcgd.motion"}),
        "missing bcgd.motion",
    ),
}


def _write(path, data):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_policy_one_line_error(case, tmp_path, capsys):
    make, expected = CASES[case]
    path = make(tmp_path)
    code, err = run_cli(["sim2sim", path, "--runs", "1"], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error:") and expected in lines[0], lines[0]
    assert "Traceback" not in err


def test_bad_arguments_one_line_error(tmp_path, capsys):
    for args, expected in (
        (["--latency", "abc"], "--latency"),
        (["--latency", "30:10"], "LO <= HI"),
        (["--pin-base"], "only used with --replay"),
        (["--physics-dt", "0.003"], "whole number of physics steps"),
    ):
        path = tiny_graph(tmp_path / "hash.onnx", metadata=full_metadata(model_hash="ab" * 32))
        code, err = run_cli(["sim2sim", path, "--force", *args], capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1 and expected in err, (args, err)


def test_cli_process_exit_code(tmp_path):
    """The installed entry point: exit status 2 and a one-line message on stderr, no traceback."""
    path = tiny_graph(tmp_path / "nometa.onnx")
    code = "from bcg_deploy.cli import main; main()"
    proc = subprocess.run([sys.executable, "-c", code, "sim2sim", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "no bcgd metadata" in proc.stderr
