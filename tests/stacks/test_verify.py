"""``bcgd verify``: a policy in each stack's format passes (exit 0, a summary); each deliberately broken copy gives
exactly one mismatch line naming what is wrong, and exit 1. The checks cite the stack code they come from in
``bcg_deploy/stacks``; the fixtures are built here in the stacks' formats (``fixtures.py``)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from bcg_deploy.stacks import detect, verify
from tests.cli.util import bcgd_here

from . import fixtures as fx


@pytest.fixture(autouse=True)
def _capsys(capsys):
    global _CAP
    _CAP = capsys  # noqa: F841


def cli(*args: str) -> SimpleNamespace:
    """``bcgd verify ARGS`` in this process (the command's main, its exit code and output)."""
    return bcgd_here("verify", *args, capsys=_CAP)


def mismatches(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("mismatch: ")]


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    d = tmp_path_factory.mktemp("good")
    return {
        "unitree_rl_mjlab": fx.unitree_folder(d / "mj"),
        "unitree_rl_lab": fx.unitree_folder(d / "lab", "unitree_rl_lab"),
        "motion_tracking_controller": fx.mtc_onnx(d / "wbt.onnx"),
        "holosoma": fx.holosoma_onnx(d / "holo.onnx"),
    }


@pytest.mark.parametrize("stack", ["unitree_rl_mjlab", "unitree_rl_lab", "motion_tracking_controller", "holosoma"])
def test_each_format_verifies(good, stack):
    assert detect(good[stack])[0] == stack
    r = cli(good[stack])
    assert r.returncode == 0, r.stdout + r.stderr
    assert not mismatches(r.stdout) and r.stdout.strip().splitlines()[-1].startswith(f"ok: {stack}")
    assert "154" in r.stdout  # the summary states the observation size it checked


def test_holosoma_without_action_scale_is_named(good):
    """holosoma #125: no action_scale in the ONNX is fine for fc600e7 (config 1.0) but named, with the fix."""
    out = cli(good["holosoma"]).stdout
    assert "no action_scale" in out and "holosoma #125" in out and "1.0" in out


def _one(path, *needles: str) -> str:
    r = cli(path)
    lines = mismatches(r.stdout)
    assert r.returncode == 1, r.stdout + r.stderr
    assert len(lines) == 1, lines
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_160_value_policy_with_154_value_config(tmp_path):
    """unitree_rl_mjlab #23: the deploy binds the model's size (algorithms.h:257-292) and never compares."""
    _one(fx.unitree_folder(tmp_path, obs_dim=160), "160", "154", "#23")


def test_wrong_joint_order(tmp_path):
    """joint_ids_map swapping a hip pitch and a knee: the knee motor gets the hip's default -0.1 rad, below the
    knee's range (deploy.yaml names no joints; the per-joint values show the order)."""

    def swap(doc):
        ids = doc["joint_ids_map"]
        ids[0], ids[3] = ids[3], ids[0]

    folder = fx.unitree_folder(tmp_path, stack="unitree_rl_lab", edit=swap)
    _one(folder, "left_knee_joint", "wrong joint order")


def test_wrong_joint_order_mtc(tmp_path):
    names = list(fx.SPEC.joint_names)
    names[0] = "left_hip_pitch"  # a name the G1 does not have
    _one(fx.mtc_onnx(tmp_path / "p.onnx", joint_names=",".join(names)), "joint_names", "left_hip_pitch_joint")


def test_missing_action_scale(tmp_path):
    def drop(doc):
        doc["actions"]["JointPositionAction"].pop("scale")

    _one(fx.unitree_folder(tmp_path, edit=drop), "no scale", "unscaled")


def test_holosoma_action_scale_other_than_its_config(tmp_path):
    _one(fx.holosoma_onnx(tmp_path / "p.onnx", action_scale=[0.5] * 29), "action_scale", "1")


def test_motion_file_of_the_wrong_length(tmp_path):
    def short(arrays):
        arrays["joint_vel"] = arrays["joint_vel"][:-3]

    _one(fx.unitree_folder(tmp_path, motion_edit=short), "joint_vel", "[37, 29]", "[40, 29]")


def test_csv_motion_of_the_wrong_width(tmp_path):
    _one(fx.unitree_folder(tmp_path, "unitree_rl_lab", motion_edit=lambda rows: rows[:, :-1]), "7 + 29")


def test_float64_npz(tmp_path):
    """cnpy hands the loader the raw bytes as float32 (State_Mimic.h:69-88): a float64 array is garbage."""

    def f64(arrays):
        arrays["joint_pos"] = arrays["joint_pos"].astype(np.float64)

    _one(fx.unitree_folder(tmp_path, motion_edit=f64), "float64", "float32")


def test_mtc_unknown_term_and_size(tmp_path):
    terms = [*fx.MTC_TERMS[:-1], ("last_action", 29)]  # unitree's name, not one the controller builds
    _one(fx.mtc_onnx(tmp_path / "a.onnx", terms=terms), "last_action", "not one the controller builds")
    _one(fx.mtc_onnx(tmp_path / "b.onnx", obs_dim=160), "154", "160")


def test_symbolic_batch_dimension(tmp_path):
    import onnx

    folder = fx.unitree_folder(tmp_path)
    path = folder / "exported" / "policy.onnx"
    m = onnx.load(str(path))
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(m, str(path))
    _one(folder, "static")


def test_library_reports_all_mismatches_at_once(tmp_path):
    def two(doc):
        doc["actions"]["JointPositionAction"].pop("scale")
        doc["step_dt"] = -1

    r = verify(fx.unitree_folder(tmp_path, edit=two))
    assert not r.ok and len(r.findings.mismatches) == 2


def test_bad_input_is_one_error_line(tmp_path):
    from tests.cli.util import assert_one_line_error, bcgd

    assert_one_line_error(bcgd("verify", tmp_path / "none.onnx"), "no such file")
    r = cli(tmp_path / "none.onnx")
    assert r.returncode == 2 and r.stderr.strip().startswith("error:") and len(r.stderr.strip().splitlines()) == 1
    r = cli(fx.mtc_onnx(tmp_path / "p.onnx"), "--stack", "ros")
    assert r.returncode == 2 and "--stack ros" in r.stderr


def test_sim2sim_refuses_a_mismatch(tmp_path):
    from bcg_deploy.errors import BcgdError
    from bcg_deploy.sim2sim import Sim2SimConfig, prepare

    with pytest.raises(BcgdError, match="would not run it as trained.*160 values"):
        prepare(fx.unitree_folder(tmp_path, obs_dim=160), Sim2SimConfig(runs=1))


def test_folder_with_both_motions_and_an_fsm_fragment(tmp_path):
    """A folder as ``bcgd export --profile unitree`` writes it: the NPZ (unitree_rl_mjlab) and the CSV with the FSM
    fragment naming it and its fps (unitree_rl_lab), no config/config.yaml: each stack reads its own file."""
    import yaml

    from bcg_deploy.stacks import inspect

    folder = fx.unitree_folder(tmp_path, frames=30)
    (tmp_path / "config" / "config.yaml").unlink()
    lab = fx.unitree_folder(tmp_path / "lab", "unitree_rl_lab", frames=30)
    (folder / "params" / "motion.csv").write_bytes((lab / "params" / "motion.csv").read_bytes())
    base = "config/policy/mimic/x/"
    state = {"fps": 50.0, "motion_file": base + "params/motion.csv", "policy_dir": base}
    (folder / "params" / "unitree_rl_lab_fsm.yaml").write_text(yaml.safe_dump({"FSM": {"Mimic_x": state}}))
    mj, lb = inspect(folder, "unitree_rl_mjlab"), inspect(folder, "unitree_rl_lab")
    assert mj.ok and lb.ok, mj.lines() + lb.lines()
    assert mj.files.motion_path.suffix == ".npz" and lb.files.motion_path.suffix == ".csv" and lb.files.fps == 50.0
