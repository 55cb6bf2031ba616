"""bcgd export / inspect through the real entry point: bad inputs are one-line errors, exit != 0."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from bcg_deploy.cli import _register, app
from bcg_deploy.training.checkpoint import load_checkpoint, save_checkpoint

_DRIVER = """
import io, json, sys, traceback
from bcg_deploy.cli import main
out = {}
for name, args in json.loads(sys.argv[1]).items():
    err, old = io.StringIO(), sys.stderr
    sys.stderr, sys.argv, code = err, ["bcgd", *args], 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        code, _ = -1, err.write(traceback.format_exc())
    finally:
        sys.stderr = old
    out[name] = [code, err.getvalue()]
print(json.dumps(out))
"""


class _Exploit:
    marker = "pwned"

    def __reduce__(self):
        return (os.system, (f"touch {_Exploit.marker}",))


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory, ckpt_dir):
    d = tmp_path_factory.mktemp("bad")
    good = load_checkpoint(ckpt_dir / "run.pt")
    data = (ckpt_dir / "run.pt").read_bytes()
    (d / "truncated.pt").write_bytes(data[: len(data) // 3])
    save_checkpoint(d / "other_model.pt", dict(good, robot={"name": "g1", "model_hash": "f" * 64}))
    save_checkpoint(d / "other_robot.pt", dict(good, robot={"name": "h1", "model_hash": "f" * 64}))
    save_checkpoint(d / "no_actor.pt", {k: v for k, v in good.items() if k != "actor"})
    _Exploit.marker = str(d / "pwned")
    with open(d / "evil.pt", "wb") as fh:
        torch.save(dict(good, metrics={"x": _Exploit()}), fh, pickle_module=pickle)
    (d / "a_folder.onnx").mkdir()
    return d


def test_bad_inputs_one_line_nonzero(bad_files, ckpt_dir):
    d, good = bad_files, str(ckpt_dir / "run.pt")
    out = str(d / "p.onnx")
    cases = {
        "missing file": (["export", str(d / "nope.pt"), "-o", out], "not found"),
        "truncated": (["export", str(d / "truncated.pt"), "-o", out], "truncated"),
        "other model": (["export", str(d / "other_model.pt"), "-o", out], "is for robot 'g1' (model ffffffffffff)"),
        "other robot": (["export", str(d / "other_robot.pt"), "-o", out], "is for robot 'h1'"),
        "missing key": (["export", str(d / "no_actor.pt"), "-o", out], "lacks required key 'actor'"),
        "code pickle": (["export", str(d / "evil.pt"), "-o", out], "not a bcg-deploy checkpoint"),
        "folder is a file": (["export", good, "-o", str(d / "truncated.pt" / "p.onnx")], "is a file, not a folder"),
        "output is a folder": (["export", good, "-o", str(d / "a_folder.onnx")], "is a folder"),
        "bad signature": (["export", good, "-o", out, "--inputs", "pixels"], "expected raw or obs"),
        "inspect missing": (["inspect", str(d / "nope.onnx")], "not found"),
        "inspect not onnx": (["inspect", good], "not an ONNX model"),
    }
    # One interpreter runs the real entry point ``main()`` once per case (a process per case would
    # pay the torch import eleven times); stderr is captured per case.
    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER, json.dumps({k: v[0] for k, v in cases.items()})],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, (code, stderr) in results.items():
        msg = stderr.strip()
        assert code == 2, (name, code, stderr[-800:])
        assert "Traceback" not in stderr and len(msg.splitlines()) == 1, (name, stderr)
        assert msg.startswith("error:") and cases[name][1] in msg, (name, msg)
    assert not (d / "pwned").exists()
    assert not (d / "p.onnx").exists()


@pytest.fixture(scope="module")
def runner():
    _register()
    return CliRunner()


def test_inspect(runner, raw_export, ckpt_dir):
    res = runner.invoke(app, ["inspect", str(raw_export.path), "--json", "-"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    assert rep["signature"] == "raw" and rep["opset"] == 17
    assert [i["name"] for i in rep["inputs"]][-1] == "time_step" and rep["inputs"][0]["shape"] == ["batch", 3]
    assert rep["metadata"]["anchor_body_name"] == "pelvis"
    assert rep["stored_parity"]["max_abs_err"] == raw_export.parity["max_abs_err"]
    rerun = rep["parity_rerun"]
    assert rerun["mode"] == "self_consistency" and rerun["passed"] and rerun["batch_vs_single_max_abs_err"] <= 1e-5
    res = runner.invoke(app, ["inspect", str(raw_export.path), "--checkpoint", str(ckpt_dir / "run.pt"), "--json", "-"])
    assert res.exit_code == 0, res.output
    rerun = json.loads(res.output)["parity_rerun"]
    assert rerun["mode"] == "checkpoint" and rerun["passed"] and rerun["max_abs_err"] <= 1e-5
    assert rerun["num_inputs"] >= 1000
    # the same actor with another normaliser is not this policy: the re-run fails, exit 1
    res = runner.invoke(app, ["inspect", str(raw_export.path), "--checkpoint", str(ckpt_dir / "run_other_norm.pt")])
    assert res.exit_code == 1 and "FAILED" in res.output
    res = runner.invoke(app, ["inspect", str(raw_export.path)])  # the table view
    assert res.exit_code == 0 and "metadata_props" in res.output and "joint_stiffness" in res.output


def test_export_cli(runner, ckpt_dir, tmp_path):
    out = tmp_path / "p.onnx"
    res = runner.invoke(app, ["export", str(ckpt_dir / "run.pt"), "-o", str(out), "--inputs", "obs", "--json", "-"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    assert rep["signature"] == "obs" and rep["parity"]["max_abs_err"] <= 1e-5 and out.is_file()
    res = runner.invoke(app, ["export", str(ckpt_dir / "run.pt"), "-o", str(out)])  # it exists: not replaced
    assert res.exit_code != 0 and "exists; give --force" in str(res.exception)
    res = runner.invoke(app, ["export", str(ckpt_dir / "run.pt"), "-o", str(out), "--force"])
    assert res.exit_code == 0 and "parity" in res.output and "max abs" in res.output
