"""Device resolution and the trainer's numerics: TF32 pinned off (and recorded), deterministic mode."""

from __future__ import annotations

import pytest
import torch
import yaml

from bcg_deploy.errors import BcgdError
from bcg_deploy.training.device import configure_numerics, numerics_state, resolve_device
from bcg_deploy.training.runner import Trainer

from .conftest import tiny_cfg


@pytest.fixture
def restore_numerics():
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.get_float32_matmul_precision(), torch.are_deterministic_algorithms_enabled())  # fmt: skip
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[0], saved[1]
    torch.set_float32_matmul_precision(saved[2])
    torch.use_deterministic_algorithms(saved[3])


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(BcgdError, match="expected cpu or cuda"):
        resolve_device("banana")
    with pytest.raises(BcgdError, match="expected cpu or cuda"):
        resolve_device("meta")
    if torch.cuda.is_available():
        assert resolve_device("cuda") == torch.device(f"cuda:{torch.cuda.current_device()}")
    else:
        with pytest.raises(BcgdError, match="CUDA is not available"):
            resolve_device("cuda")


def test_trainer_pins_tf32_off_and_records_it(tmp_path, tiny_motion, monkeypatch, restore_numerics):
    # What an environment override or an earlier import could have switched on:
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("medium")
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "1")
    tr = Trainer(tiny_cfg(f"runner.out_dir={tmp_path}"), motion=tiny_motion)
    state = numerics_state()
    assert not state["tf32_matmul"] and not state["tf32_cudnn"]
    assert state["float32_matmul_precision"] == "highest" and state["nvidia_tf32_override"] == "0"
    assert tr.numerics["tf32_matmul"] is False and tr.numerics["deterministic_algorithms"] is False
    written = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert written["runner"]["tf32"] is False and written["runner"]["deterministic"] is False


def test_tf32_cannot_be_switched_on_by_config():
    with pytest.raises(BcgdError, match="runner.tf32 must be false"):
        tiny_cfg("runner.tf32=true").validate()


def test_deterministic_mode(restore_numerics):
    state = configure_numerics("cpu", deterministic=True)
    assert state["deterministic_algorithms"] and torch.are_deterministic_algorithms_enabled()
    assert state["warp_deterministic"] is None  # CPU kernels are single-threaded: Warp's option left alone
    assert not configure_numerics("cpu")["deterministic_algorithms"]


def test_cuda_runs_default_to_gpu_sized_batches(tmp_path):
    from bcg_deploy.training.config import CUDA_NUM_ENVS, TrainConfig, cuda_defaults
    from bcg_deploy.training.run import plan_run

    cpu = TrainConfig()
    assert cuda_defaults(cpu).env.num_envs == 128
    cpu.runner.device = "cuda:0"
    assert cuda_defaults(cpu).env.num_envs == CUDA_NUM_ENVS == 2048

    def cfg(envs, device, overrides=()):
        return plan_run(task="dance", motion=None, start=None, duration=None, envs=envs, iterations=None,
                            horizon=None, device=device, kappa=None, seed=None, out=tmp_path / "r", save_every=None,
                            overrides=list(overrides), resume=None)  # fmt: skip

    assert cfg(None, "cuda").env.num_envs == 2048
    assert cfg(128, "cuda").env.num_envs == 128
    assert cfg(None, "cuda", ["env.num_envs=256"]).env.num_envs == 256
    assert cfg(None, "cpu").env.num_envs == 128


def test_native_bf16_reads_the_cpu_flags(monkeypatch):
    """A CPU multiplies bf16 in hardware when it reports AVX512-BF16 or AMX-BF16; AVX-512 alone converts in
    software (slower than float32), so it does not count."""
    import bcg_deploy.training.device as device_module

    for flags, expected in (({"avx2", "avx512f"}, False), ({"avx512f", "avx512_bf16"}, True), ({"amx_bf16"}, True)):
        monkeypatch.setattr(device_module, "cpu_flags", lambda flags=flags: frozenset(flags))
        assert device_module.native_bf16("cpu") is expected


def test_bcgd_train_notes_a_bf16_critic_without_bf16_hardware(monkeypatch):
    """``shac.critic_bf16`` on a device that converts bf16 in software gets a header note; on bf16 hardware, or
    with the switch off, none."""
    import bcg_deploy.training.device as device_module
    from bcg_deploy.training.run import precision_notes

    for native in (False, True):
        monkeypatch.setattr(device_module, "native_bf16", lambda device, native=native: native)
        for bf16 in (False, True):
            notes = precision_notes(tiny_cfg(f"shac.critic_bf16={bf16}"))
            assert len(notes) == int(bf16 and not native), (native, bf16, notes)
            assert all("slower than float32" in n for n in notes)
