"""Data-parallel training (training/parallel/distributed.py): 2 ranks over gloo give the single-process update.

The reference is one process with the same seed and the same split of the envs into random streams
(``runner.env_streams=2``): every env then sees the same randomness as on its rank, so the only
difference left is the order of floating-point sums.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bcg_deploy.training.config import SHACCfg
from bcg_deploy.training.parallel import distributed as dd

WORKER = Path(__file__).with_name("dist_worker.py")
ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], env_extra: dict[str, str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env_extra}
    env.pop("WORLD_SIZE", None) if "WORLD_SIZE" not in env_extra else None
    return subprocess.Popen([sys.executable, str(WORKER), *args], env=env, cwd=ROOT)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


def _one_update(tmp_path: Path, dtype: str, envs: int = 64, iters: int = 1, overrides: str = "") -> tuple[dict, dict]:
    """(single process x ``envs`` in 2 streams, 2 ranks x ``envs / 2``) after ``iters`` SHAC updates."""
    horizon = 4
    single, ranked = tmp_path / f"single_{dtype}.pt", tmp_path / f"ranked_{dtype}.pt"
    port = str(dd.free_port())
    common = {"BCGD_TEST_DTYPE": dtype, "BCGD_TEST_OVERRIDES": overrides}
    procs = [_run([str(single), str(envs), str(horizon), str(iters), "2"], common)]
    for r in range(2):
        rank = {
            "RANK": str(r),
            "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2",  # one machine: gradients summed through shared memory (host_reduce)
            "LOCAL_RANK": str(r),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
        }
        procs.append(_run([str(ranked), str(envs), str(horizon), str(iters)], {**common, **rank}))
    for p in procs:
        assert p.wait(timeout=600) == 0
    return torch.load(single), torch.load(ranked)


def _worst(a: dict, b: dict, group: str, norm: bool = False) -> float:
    if norm:
        return max(float((b[group][k] - v).norm() / v.norm()) for k, v in a[group].items())
    return max(_rel(b[group][k], v) for k, v in a[group].items())


def test_two_ranks_of_32_envs_update_like_one_process_of_64_in_float64(tmp_path: Path) -> None:
    """In float64 the split changes nothing but the order of sums: parameters equal to 1e-9."""
    a, b = _one_update(tmp_path, "float64")
    assert a["metrics"]["actor_grad_norm"] > 0 and a["metrics"]["critic_loss"] > 0
    for group in ("actor", "critic", "actor_grad"):
        assert _worst(a, b, group) < 1e-9, group
    assert _rel(b["obs_mean"], a["obs_mean"]) < 1e-12
    assert _rel(b["add_mean_abs"], a["add_mean_abs"]) < 1e-12
    assert a["metrics"]["episodes_done"] == b["metrics"]["episodes_done"]


def test_two_ranks_of_32_envs_update_like_one_process_of_64_in_float32(tmp_path: Path) -> None:
    """In float32 the gradients agree to 1e-5 element-wise (relative to the largest entry), the critics'
    parameters to 1e-5 relative (norm of the difference over the norm, per tensor), and the actor's entries
    whose gradient float32 resolves (|g| >= 1e-4 max |g|) to 1e-3 of a step.

    The other entries differ by up to a whole step: Adam moves an entry by about lr g / (|g| + 1e-8) whatever
    |g| is, so the float32 rounding of a gradient that nearly cancels (|g| ~ 1e-7 against summands of 1e-2)
    becomes a difference of its step. One such entry of the 29 x 128 output layer was 1.2e-5 of its norm on
    an AVX-512 CPU; in the critics it is compounded over 64 steps and averaged out. The float64 test shows
    the split itself is exact."""
    a, b = _one_update(tmp_path, "float32")
    assert _worst(a, b, "actor_grad") < 1e-5
    assert _worst(a, b, "critic", norm=True) < 1e-5
    lr = SHACCfg().actor_lr  # the worker trains with the defaults
    for k, v in a["actor"].items():
        diff, g = (b["actor"][k] - v).abs(), a["actor_grad"][k].abs()
        resolved = g >= 1e-4 * g.max()
        assert float((diff * resolved).max()) < 1e-3 * lr, k
        assert float(diff.max()) <= 2 * lr * (1 + 1e-3), k
    assert abs(a["metrics"]["reward"] - b["metrics"]["reward"]) < 1e-5


def test_adaptive_starts_see_every_ranks_failures(tmp_path: Path) -> None:
    """Each rank counts its own envs' failures; the runner sums them, so every rank folds the same counts
    into the same start distribution, the single process's."""
    overrides = "env.adaptive_start=true env.max_tracking_error=0.05"  # 5 cm: many strays, many counts
    a, b = _one_update(tmp_path, "float64", envs=16, iters=2, overrides=overrides)
    other = torch.load(tmp_path / "ranked_float64.pt.rank1")
    assert a["start_failures"].sum() > 0
    torch.testing.assert_close(b["start_failures"], a["start_failures"], rtol=0, atol=0)
    torch.testing.assert_close(other["start_failures"], a["start_failures"], rtol=0, atol=0)


def test_moments_merge_exactly() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(100, 7, generator=g, dtype=torch.float64) * 3 + 1
    n, mean, m2 = dd.merge_moments([dd.moments(x[:13]), dd.moments(x[13:13]), dd.moments(x[13:])])
    assert float(n) == 100
    torch.testing.assert_close(mean, x.mean(0), rtol=0, atol=1e-12)
    torch.testing.assert_close(m2, (x - x.mean(0)).square().sum(0), rtol=1e-12, atol=1e-12)


def test_env_state_round_trips_across_world_sizes() -> None:
    g = torch.Generator().manual_seed(1)
    ranks = [
        {"q": torch.randn(n, 3, generator=g), "t": torch.zeros(()), "sub": {"left": torch.arange(n)}, "rng": f"s{i}"}
        for i, n in enumerate((3, 2))
    ]
    merged = dd.merge_env_states(ranks)
    assert merged["q"].shape == (5, 3) and merged["rng"] == ["s0", "s1"]
    back = dd.split_env_state(merged, [3, 2], 1)
    torch.testing.assert_close(back["q"], ranks[1]["q"])
    assert back["rng"] == "s1" and back["sub"]["left"].tolist() == [0, 1]
    other = dd.split_env_state(merged, [5], 0)  # one process: every env, no stream of a rank
    assert other["q"].shape == (5, 3) and "rng" not in other
    with pytest.raises(Exception, match="has 5 envs"):
        dd.split_env_state(merged, [2, 2], 0)


def test_default_nproc_keeps_eight_envs_per_rank() -> None:
    assert dd.default_nproc(8, "cpu") == 1
    assert dd.default_nproc(64, "cpu") == min(len(os.sched_getaffinity(0)), 8)


def test_the_reported_failure_is_the_cause_not_its_consequence() -> None:
    """When several ranks are seen failed at once, the launcher names the one that did not only die of
    another's death: a rank that lost its peers or was aborted by its runtime (SIGABRT) comes last."""
    import signal

    kill, abort, lost = -int(signal.SIGKILL), -int(signal.SIGABRT), dd.LOST_PEERS_EXIT
    assert dd.first_cause([(0, abort), (1, kill)]) == (1, kill)
    assert dd.first_cause([(0, lost), (1, 1)]) == (1, 1)
    assert dd.first_cause([(0, lost), (1, abort)]) == (0, lost)
    assert dd.first_cause([(0, kill), (1, kill)]) == (0, kill)
    assert dd.first_cause([(1, abort)]) == (1, abort)  # alone, an abort is the cause
