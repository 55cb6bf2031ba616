"""run.pt: round trip, atomic refusal of diverged models, one-line errors on bad files."""

from __future__ import annotations

import os
import pickle
import random

import numpy as np
import pytest
import torch

from bcg_deploy.errors import BcgdError
from bcg_deploy.observations.paper import ObservationModule
from bcg_deploy.robots import load_robot
from bcg_deploy.training.checkpoint import (
    EXPORT_KEYS,
    NonFiniteCheckpointError,
    build_checkpoint,
    capture_rng,
    load_checkpoint,
    motion_from_checkpoint,
    plain,
    restore_rng,
    save_checkpoint,
)
from bcg_deploy.training.networks import Actor, Critic
from bcg_deploy.training.normalizer import RunningNormalizer
from tests.synthetic import synthetic_motion


@pytest.fixture(scope="module")
def robot():
    return load_robot("g1")


@pytest.fixture(scope="module")
def payload(robot):
    motion = synthetic_motion(robot, seconds=0.5)
    om = ObservationModule(robot, motion)
    actor = Actor(om.obs_dim, robot.num_joints, hidden=(16, 8))
    critics = [Critic(om.obs_dim, hidden=(8,)) for _ in range(3)]
    opt = torch.optim.Adam(actor.parameters(), lr=1e-3)
    actor.deterministic(torch.randn(2, om.obs_dim)).sum().backward()
    opt.step()
    norm = RunningNormalizer(om.obs_dim)
    norm.update(torch.randn(10, om.obs_dim))
    config = {"sim": {"physics_dt": 0.005, "substeps": 4, "kappa": 300.0}, "hidden": (16, 8), "path": None}
    return build_checkpoint(
        robot=robot, motion=motion, observation=om, config=config, actor=actor, obs_normalizer=norm,
        critics=critics, target_critics=critics, optimizers={"actor": opt}, iteration=7,
        rng=capture_rng(warp_seed=3), metrics={"reward": np.float32(1.5)},
    )  # fmt: skip


def test_round_trip(tmp_path, robot, payload):
    path = save_checkpoint(tmp_path / "run.pt", payload)
    assert not [p for p in os.listdir(tmp_path) if p != "run.pt"]  # no tmp files left
    ckpt = load_checkpoint(path, robot=robot)
    assert ckpt["iteration"] == 7 and ckpt["robot"] == {
        **robot.identity(),
        "action_scale": list(robot.action_scale),
        "default_joint_pos": list(robot.default_joint_pos),
    }
    assert ckpt["config"]["hidden"] == [16, 8] and ckpt["metrics"]["reward"] == 1.5
    for k, v in payload["actor"].items():
        assert torch.equal(ckpt["actor"][k], v)
    assert len(ckpt["critics"]) == 3 and ckpt["optimizers"]["actor"]["state"]
    motion = motion_from_checkpoint(ckpt)
    assert motion.num_frames == ckpt["motion"]["num_frames"] and motion.fps == 50.0
    assert motion.body_quat_w.dtype == np.float64
    om = ObservationModule(robot, motion)
    assert om.spec() == ckpt["observation"]


def test_rng_round_trip(payload):
    state = capture_rng()
    a = (torch.rand(3), np.random.rand(3), random.random())  # noqa: NPY002
    restore_rng(state)
    b = (torch.rand(3), np.random.rand(3), random.random())  # noqa: NPY002
    assert torch.equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2] == b[2]


def test_non_finite_never_overwrites(tmp_path, payload):
    path = save_checkpoint(tmp_path / "run.pt", payload)
    good = path.read_bytes()
    bad = dict(payload)
    bad["actor"] = {k: v.clone() for k, v in payload["actor"].items()}
    bad["actor"]["mu.weight"][0, 0] = float("nan")
    with pytest.raises(NonFiniteCheckpointError, match="mu.weight"):
        save_checkpoint(path, bad)
    bad = dict(payload, obs_normalizer={**payload["obs_normalizer"], "var": torch.full_like(
        payload["obs_normalizer"]["var"], float("inf"))})  # fmt: skip
    with pytest.raises(NonFiniteCheckpointError, match="obs_normalizer"):
        save_checkpoint(path, bad)
    assert path.read_bytes() == good


def _one_line(exc: BaseException) -> str:
    msg = str(exc)
    assert "\n" not in msg
    return msg


def test_bad_files(tmp_path, robot, payload):
    with pytest.raises(BcgdError, match="not found"):
        load_checkpoint(tmp_path / "nope.pt")
    path = save_checkpoint(tmp_path / "run.pt", payload)
    data = path.read_bytes()
    (tmp_path / "trunc.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(BcgdError, match="truncated") as e:
        load_checkpoint(tmp_path / "trunc.pt")
    assert "miniz" not in _one_line(e.value)  # no torch internals
    (tmp_path / "notes.pt").write_text("a text file\n")
    with pytest.raises(BcgdError, match="is not a checkpoint"):
        load_checkpoint(tmp_path / "notes.pt")
    other = dict(payload, robot={"name": "g1", "model_hash": "0" * 64})
    save_checkpoint(tmp_path / "other.pt", other)
    with pytest.raises(BcgdError, match="is for robot") as e:
        load_checkpoint(tmp_path / "other.pt", robot=robot)
    _one_line(e.value)
    missing = {k: v for k, v in payload.items() if k != "obs_normalizer"}
    save_checkpoint(tmp_path / "missing.pt", missing)
    with pytest.raises(BcgdError, match="'obs_normalizer'"):
        load_checkpoint(tmp_path / "missing.pt", required=EXPORT_KEYS)
    no_critics = {k: v for k, v in payload.items() if k != "critics"}
    save_checkpoint(tmp_path / "nocrit.pt", no_critics)
    load_checkpoint(tmp_path / "nocrit.pt", required=EXPORT_KEYS)  # export does not need them
    with pytest.raises(BcgdError, match="'critics'"):
        load_checkpoint(tmp_path / "nocrit.pt")
    torch.save({"format": "something-else"}, tmp_path / "foreign.pt")
    with pytest.raises(BcgdError, match="not a bcg-deploy run checkpoint"):
        load_checkpoint(tmp_path / "foreign.pt")
    with pytest.raises(BcgdError, match="cannot write checkpoint"):
        save_checkpoint(tmp_path / "no_dir" / "run.pt", payload)


class _Exploit:
    def __reduce__(self):
        return (os.system, (f"touch {_Exploit.marker}",))


def test_code_running_pickle_refused(tmp_path, payload):
    _Exploit.marker = tmp_path / "pwned"
    evil = dict(payload, metrics={"x": _Exploit()})
    with open(tmp_path / "evil.pt", "wb") as fh:
        torch.save(evil, fh, pickle_module=pickle)
    with pytest.raises(BcgdError, match="not a bcg-deploy checkpoint: it holds Python objects") as e:
        load_checkpoint(tmp_path / "evil.pt")
    _one_line(e.value)
    assert not (tmp_path / "pwned").exists()


def test_rng_state_records_the_cuda_generators():
    state = capture_rng()
    if not torch.cuda.is_available():
        assert state["cuda"] == []
        restore_rng({**state, "cuda": [torch.zeros(16, dtype=torch.uint8)] * 3})  # foreign machine: ignored
        return
    assert len(state["cuda"]) == torch.cuda.device_count()
    a = torch.rand(4, device="cuda")
    restore_rng(state)
    assert torch.equal(a, torch.rand(4, device="cuda"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the CUDA generators' round trip)")
def test_rng_round_trip_through_a_checkpoint_file_on_cuda(tmp_path, payload):
    path = save_checkpoint(tmp_path / "run.pt", {**payload, "rng": plain(capture_rng())})
    a = torch.randn(8, device="cuda")
    restore_rng(load_checkpoint(path)["rng"])
    assert torch.equal(a, torch.randn(8, device="cuda"))
