"""Bundled Contact Gradients on the real simulator (float64, kappa 50, tiny networks).

Oracles: MuJoCo's mj_jacBody for the foot Jacobian; plain SHAC (``SimTransition``) for a bundle of
identical branches; separate per-branch simulator calls for the bundled gradient."""

from __future__ import annotations

import subprocess
import sys

import mujoco
import numpy as np
import pytest
import torch

from bcg_deploy.errors import BcgdError
from bcg_deploy.observations.kinematics import Kinematics
from bcg_deploy.robots import load_robot
from bcg_deploy.training.algorithms.bcg import (
    BundledTransition,
    average_branches,
    bucket_size,
    damped_pinv,
    foot_jacobian,
    leg_chains,
)
from bcg_deploy.training.algorithms.shac import SHAC
from bcg_deploy.training.config import BCGCfg
from bcg_deploy.training.env.add import ADD
from bcg_deploy.training.env.imitation import ImitationEnv, SimTransition
from bcg_deploy.training.logger import read_metrics
from bcg_deploy.training.runner import Trainer

from .conftest import tiny_cfg

ROBOT = load_robot("g1")
BASE = ("sim.dtype=float64", "sim.kappa=50", "env.num_envs=3", "domain_rand.push_interval_s=0.04,0.06")


def _bcg(**kw) -> BCGCfg:
    return BCGCfg(enabled=True, **kw)


@pytest.fixture(scope="module")
def setup(tiny_motion):
    """A float64 env (randomised parameters, pushes, one env with latency) + tiny SHAC, and its state."""
    torch.manual_seed(0)
    cfg = tiny_cfg(*BASE, "shac.horizon=6")
    env = ImitationEnv(cfg, ROBOT, tiny_motion)
    env.add = ADD(env.feature_dim, cfg.add).double()
    shac = SHAC(cfg.shac, env.obs_dim, env.num_actions, cfg.env.num_envs).double()
    env.reset()
    for s in (1.0, 1.1):
        shac.obs_normalizer.update(env.observe() * s)
    env.params.action_latency = torch.tensor([1, 0, 0])
    assert all(env.sim_params_applied[k] for k in ("act_kp", "body_mass", "friction"))
    return env, shac, env.state_dict()


def _window(env, shac, state, transition):
    """One SHAC window from ``state`` with fixed noise; returns (loss, actor grads, rollout stats)."""
    env.transition = transition
    env.load_state_dict(state)
    torch.manual_seed(123)
    roll = shac.rollout(env)
    shac.actor.zero_grad()
    roll.actor_loss.backward()
    grads = torch.cat([p.grad.flatten() for p in shac.actor.parameters()])
    env.transition = SimTransition(env.sim)
    return float(roll.actor_loss.detach()), grads, roll.stats


# ---------------------------------------------------------------------------------------------
# pieces


def test_foot_jacobian_matches_mujoco():
    m = ROBOT.load_model(scene=False)
    d = mujoco.MjData(m)
    rng = np.random.default_rng(0)
    q = np.tile(m.qpos0, (3, 1))
    q[:, :3] += rng.normal(0, 0.3, (3, 3))
    quat = rng.normal(size=(3, 4))
    q[:, 3:7] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
    q[:, 7:] = rng.uniform(m.jnt_range[1:, 0], m.jnt_range[1:, 1])
    kin = Kinematics(ROBOT, torch.float64)
    chains = leg_chains(ROBOT)
    assert [c.foot for c in chains] == list(ROBOT.foot_bodies) and all(len(c.qpos) == 6 for c in chains)
    for chain in chains:
        jac = foot_jacobian(kin, torch.as_tensor(q), chain).numpy()
        body = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, chain.foot)
        for i in range(3):
            d.qpos[:] = q[i]
            mujoco.mj_forward(m, d)
            jacp = np.zeros((3, m.nv))
            mujoco.mj_jacBody(m, d, jacp, None, body)
            np.testing.assert_allclose(jac[i], jacp[:, list(chain.dof)], atol=1e-12)
            other = [j for j in range(6, m.nv) if j not in chain.dof]
            assert np.abs(jacp[:, other]).max() == 0.0  # no other hinge moves this foot


def test_damped_pinv_and_averaging():
    gen = torch.Generator().manual_seed(0)
    jac = torch.randn(4, 3, 6, generator=gen, dtype=torch.float64)
    pinv = damped_pinv(jac, 1e-4)
    ref = jac.transpose(-1, -2) @ torch.linalg.inv(jac @ jac.transpose(-1, -2) + 1e-4 * torch.eye(3, dtype=jac.dtype))
    torch.testing.assert_close(pinv, ref, rtol=1e-12, atol=1e-12)
    dp = torch.randn(4, 3, 1, generator=gen, dtype=torch.float64)
    assert float((jac @ pinv @ dp - dp).abs().max()) < 1e-3 * float(dp.abs().max())  # J J+ ~ I (full rank)
    # averaging: arithmetic means; quaternion sign-aligned, averaged, renormalised
    q = torch.randn(2, 3, 36, generator=gen, dtype=torch.float64)
    quat = torch.nn.functional.normalize(torch.tensor([1.0, 0.1, 0.0, 0.0], dtype=torch.float64), dim=0)
    q[..., 3:7] = quat
    q[0, 1, 3:7] = -quat  # same rotation, other sign
    qd = torch.randn(2, 3, 35, generator=gen, dtype=torch.float64)
    q_avg, qd_avg = average_branches(q, qd, quat.expand(2, 4))
    torch.testing.assert_close(q_avg[:, :3], q[:, :, :3].mean(1))
    torch.testing.assert_close(q_avg[:, 7:], q[:, :, 7:].mean(1))
    torch.testing.assert_close(q_avg[:, 3:7], quat.expand(2, 4))
    torch.testing.assert_close(qd_avg, qd.mean(1))
    assert [bucket_size(n) for n in (1, 16, 17, 33, 64, 65, 100, 640)] == [16, 16, 24, 40, 64, 80, 112, 640]


def test_offsets_perturb_only_the_triggering_legs(setup):
    env, _, state = setup
    env.load_state_dict(state)
    cfg = _bcg(num_branches=4)
    tr = BundledTransition(cfg, env, seed=5)
    tr.force = torch.tensor([[500.0, 0.0], [0.0, 0.0], [450.0, 401.0]], dtype=torch.float64)
    gen_state = tr.generator.get_state()
    q, qd = env.q.clone(), env.qd.clone()
    with torch.no_grad():
        out = tr(q, qd, q[:, 7:].clone())
    ids, dq, dqd = tr.last_offsets
    assert ids.tolist() == [0, 2]
    assert out.extras["bcg_starts"] == 2 and out.extras["bcg_start_feet"] == 3
    assert out.extras["bcg_branch_rows"] == 8 and out.extras["bcg_sim_rows"] == bucket_size(1 + 8)
    assert tr.left.tolist() == [cfg.horizon - 1, 0, cfg.horizon - 1]
    left, right = leg_chains(ROBOT)
    # replay the draws: per foot (left, right) over its triggering envs, dp then dv
    gen = torch.Generator().manual_seed(0)
    gen.set_state(gen_state)
    kin = Kinematics(ROBOT, torch.float64)
    for chain, rows in ((left, [0, 1]), (right, [1])):
        env_ids = ids[rows]
        pinv = damped_pinv(foot_jacobian(kin, q[env_ids], chain), cfg.damping)
        dp = cfg.sigma_p * torch.randn(len(rows), 4, 3, 1, generator=gen, dtype=torch.float64)
        dv = cfg.sigma_v * torch.randn(len(rows), 4, 3, 1, generator=gen, dtype=torch.float64)
        torch.testing.assert_close(dq[rows][..., list(chain.qpos)], (pinv[:, None] @ dp)[..., 0], rtol=0, atol=1e-15)
        torch.testing.assert_close(dqd[rows][..., list(chain.dof)], (pinv[:, None] @ dv)[..., 0], rtol=0, atol=1e-15)
        jac = foot_jacobian(kin, q[env_ids], chain)
        moved = jac[:, None] @ dq[rows][..., list(chain.qpos), None]
        assert float((moved - dp).norm(dim=-2).max()) < 0.05 * float(dp.norm(dim=-2).max())  # ~ the Cartesian draw
    other_q = [j for j in range(36) if j not in left.qpos]
    other_v = [j for j in range(35) if j not in left.dof]
    assert dq[0][:, other_q].abs().max() == 0 and dqd[0][:, other_v].abs().max() == 0  # env 0: left leg only
    assert dq[1][:, :7].abs().max() == 0 and dqd[1][:, :6].abs().max() == 0  # the base is never perturbed
    assert float(dq[0][:, list(left.qpos)].abs().max()) > 1e-4


def _start_offsets(env, state, cfg: BCGCfg, seed: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """The offsets (dq, dqd) of bundles started by both feet of every env, one step from ``state``."""
    env.load_state_dict(state)
    tr = BundledTransition(cfg, env, seed=seed)
    tr.force = torch.full((3, 2), 1e4, dtype=torch.float64)
    with torch.no_grad():
        tr(env.q.clone(), env.qd.clone(), env.q[:, 7:].clone())
    ids, dq, dqd = tr.last_offsets
    assert ids.tolist() == [0, 1, 2]
    return dq, dqd


def test_joint_space_clamp_bounds_the_offsets(setup):
    """max_dq / max_dqd clamp every joint offset element-wise after J+; offsets inside stay bit-identical."""
    env, _, state = setup
    assert BCGCfg().max_dq is None and BCGCfg().max_dqd is None  # off by default
    free_q, free_qd = _start_offsets(env, state, _bcg(num_branches=8, sigma_p=0.05, sigma_v=0.5))
    bq, bqd = 0.5 * float(free_q.abs().max()), 0.5 * float(free_qd.abs().max())
    dq, dqd = _start_offsets(env, state, _bcg(num_branches=8, sigma_p=0.05, sigma_v=0.5, max_dq=bq, max_dqd=bqd))
    for free, clamped, bound in ((free_q, dq, bq), (free_qd, dqd, bqd)):
        inside = free.abs() <= bound
        assert int((~inside).sum()) > 0 and int((inside & (free != 0)).sum()) > 0  # both cases occur
        assert float(clamped.abs().max()) <= bound
        assert torch.equal(clamped[inside], free[inside])
        assert torch.equal(clamped[~inside], torch.sign(free[~inside]) * bound)
    # the same draws: both transitions consumed the generator alike; without a bound nothing was clamped
    assert torch.equal(dq == 0, free_q == 0) and float(free_q.abs().max()) == 2 * bq


def test_bundle_lifecycle_and_reset(setup):
    env, _, state = setup
    env.load_state_dict(state)
    tr = BundledTransition(_bcg(num_branches=2, horizon=3, tau=1e9), env, seed=0)
    tr.force = torch.tensor([[0.0, 2e9], [0.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    q, qd = env.q.clone(), env.qd.clone()
    counts = []
    with torch.no_grad():
        for _ in range(4):
            out = tr(q, qd, env.q[:, 7:].clone())
            q, qd = out.q, out.qd
            counts.append((out.extras["bcg_starts"], out.extras["bcg_bundled_envs"], int(tr.left[0])))
        assert counts == [(1, 1, 2), (0, 1, 1), (0, 1, 0), (0, 0, 0)]  # H = 3 steps, then nominal
        tr.force = torch.full((3, 2), 3e9, dtype=torch.float64)
        tr(q, qd, env.q[:, 7:].clone())
        assert tr.left.tolist() == [2, 2, 2]
        tr.reset(torch.tensor([True, False, True]))
        assert tr.left.tolist() == [0, 2, 0] and tr.force[0].abs().max() == 0
        out = tr(q, qd, env.q[:, 7:].clone())
        assert out.extras["bcg_bundled_envs"] == 1 and out.extras["bcg_starts"] == 0


def test_state_dict_resumes_exactly(setup):
    env, _, state = setup
    env.load_state_dict(state)
    tr = BundledTransition(_bcg(num_branches=3, horizon=2, tau=100.0), env, seed=1)
    q, qd, qt = env.q.clone(), env.qd.clone(), env.q[:, 7:].clone()

    def run(n, q, qd):
        outs = []
        for _ in range(n):
            o = tr(q, qd, qt)
            q, qd = o.q, o.qd
            outs.append(o)
        return outs

    with torch.no_grad():
        first = run(2, q, qd)
        saved = tr.state_dict()
        a = run(3, first[-1].q, first[-1].qd)
        tr.load_state_dict(saved)
        b = run(3, first[-1].q, first[-1].qd)
    assert sum(o.extras["bcg_bundled_envs"] for o in a) > 0
    for oa, ob in zip(a, b, strict=True):
        assert torch.equal(oa.q, ob.q) and torch.equal(oa.qd, ob.qd)


def test_state_dicts_of_ranks_merge_and_resume_in_one_process(setup):
    """A rank with open bundles and one without: their states merge by key (the branch states are always
    saved) and the merged run continues its bundles; a state without branch states closes them."""
    from bcg_deploy.training.parallel.distributed import merge_env_states, split_env_state

    env, _, state = setup
    env.load_state_dict(state)
    tr = BundledTransition(_bcg(num_branches=2, horizon=3, tau=1e9), env, seed=0)
    tr.force = torch.tensor([[0.0, 2e9], [0.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    qt = env.q[:, 7:].clone()
    with torch.no_grad():
        out = tr(env.q.clone(), env.qd.clone(), qt)  # env 0 opens a bundle of 3 steps
        busy = tr.state_dict()
        idle = BundledTransition(_bcg(num_branches=2, horizon=3, tau=1e9), env, seed=1).state_dict()
        assert set(idle) == set(busy)
        merged = merge_env_states([idle, busy])
        assert merged["left"].tolist() == [0, 0, 0, 2, 0, 0] and merged["avg_q"].shape[0] == 6
        tr.load_state_dict(split_env_state(merged, [3, 3], 1))
        nxt = tr(out.q, out.qd, qt)  # continues the carried bundle
        assert nxt.extras["bcg_bundled_envs"] == 1 and int(tr.left[0]) == 1
        tr.load_state_dict({k: v for k, v in busy.items() if k not in ("br_q", "avg_q")})
        assert tr.left.tolist() == [0, 0, 0] and tr(out.q, out.qd, qt).extras["bcg_bundled_envs"] == 0


# ---------------------------------------------------------------------------------------------
# acceptance: identical to plain SHAC for a bundle of identical branches; the bundled gradient


@pytest.mark.parametrize("branches", [1, 3])
def test_identical_branches_reproduce_plain_shac(setup, branches):
    """B branches with zero perturbation: every branch is the nominal state, so loss and actor gradient
    equal plain SHAC's (with bundles started and continued, pushes, latency, per-env parameters)."""
    env, shac, state = setup
    loss0, g0, _ = _window(env, shac, state, SimTransition(env.sim))
    cfg = _bcg(num_branches=branches, horizon=2, sigma_p=0.0, sigma_v=0.0, tau=50.0)
    loss1, g1, stats = _window(env, shac, state, BundledTransition(cfg, env))
    tr = stats["transition"]
    assert tr["bcg_starts"] >= 2 and tr["bcg_bundled_envs"] > tr["bcg_starts"]  # bundles started and continued
    assert tr["bcg_param_uploads"] >= 1  # per-env parameters were mapped onto the bundle rows
    assert loss1 == pytest.approx(loss0, rel=1e-12, abs=0)
    assert float((g1 - g0).abs().max()) <= 1e-12 * float(g0.abs().max())


def test_bundled_gradient_is_mean_of_branch_sensitivities(setup):
    """H = 2, B = 3: the bundled gradient (w.r.t. the policy parameters and the start state) equals
    the one computed from B separate simulator calls per step with the offsets as constants."""
    env, _, state = setup
    env.load_state_dict(state)
    B = 3
    tr = BundledTransition(_bcg(num_branches=B, horizon=2, sigma_p=0.02, sigma_v=0.05), env, seed=3)
    tr.force = torch.tensor([[500.0, 500.0], [0.0, 0.0], [0.0, 450.0]], dtype=torch.float64)
    gen = torch.Generator().manual_seed(11)
    theta = (0.05 * torch.randn(3, 29, generator=gen, dtype=torch.float64)).requires_grad_(True)
    mix = 0.1 * torch.randn(29, 64, generator=gen, dtype=torch.float64)
    w = torch.randn(2, 3, 71, generator=gen, dtype=torch.float64)
    w[:, :, 3:7] = 0.0  # arithmetic components only (the quaternion is renormalised)
    q0 = env.q.clone().requires_grad_(True)
    qd0 = env.qd.clone().requires_grad_(True)
    default = env.default_joint_pos

    def policy(q, qd, t):  # a_t depends on theta and on the (averaged) state
        return default + theta + 0.1 * torch.tanh(torch.cat((q[:, 7:], qd), -1) @ mix.T) * (t + 1)

    def loss(states):
        return sum((w[t] * torch.cat(s, -1)).sum() for t, s in enumerate(states))

    # bundled
    out1 = tr(q0, qd0, policy(q0, qd0, 0))
    ids, dq, dqd = tr.last_offsets
    assert ids.tolist() == [0, 2]
    tr.force = torch.zeros_like(tr.force)  # no new bundle at the second step (env 1 stays nominal)
    out2 = tr(out1.q, out1.qd, policy(out1.q, out1.qd, 1))
    bundled = torch.autograd.grad(loss([(out1.q, out1.qd), (out2.q, out2.qd)]), (theta, q0, qd0))
    # separate: one E-env simulator call per branch and step, offsets as constants
    sim = env.sim
    qt0 = policy(q0, qd0, 0)
    branch = []
    for i in range(B):
        qi = q0.index_add(0, ids, dq[:, i].detach())
        qdi = qd0.index_add(0, ids, dqd[:, i].detach())
        s = sim.step(qi, qdi, qt0)
        branch.append((s.q, s.qd))

    def mean(states):
        q = torch.stack([s[0] for s in states], 1)
        qd = torch.stack([s[1] for s in states], 1)
        q_avg, qd_avg = average_branches(q, qd, q0[:, 3:7])
        nominal = torch.ones(3, dtype=torch.bool)
        nominal[ids] = False  # env 1 is nominal: all its "branches" are the same plain step
        return torch.where(nominal[:, None], q[:, 0], q_avg), torch.where(nominal[:, None], qd[:, 0], qd_avg)

    x1 = mean(branch)
    qt1 = policy(*x1, 1)
    x2 = mean([(s.q, s.qd) for s in (sim.step(q, qd, qt1) for q, qd in branch)])
    separate = torch.autograd.grad(loss([x1, x2]), (theta, q0, qd0))
    torch.testing.assert_close(out2.q, x2[0], rtol=0, atol=1e-12)
    for a, b in zip(bundled, separate, strict=True):
        assert float(b.abs().max()) > 0
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9 * float(b.abs().max()))


def test_h1_gradient_is_branch_average_of_separate_sensitivities(setup):
    """H = 1: d(w . x_bar)/d(q_target) = (1/B) sum_i d(w . x^(i))/d(q_target), each from its own rollout."""
    env, _, state = setup
    env.load_state_dict(state)
    B = 4
    tr = BundledTransition(_bcg(num_branches=B, horizon=1, sigma_p=0.02, sigma_v=0.05), env, seed=4)
    tr.force = torch.tensor([[0.0, 600.0], [0.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    qt = env.q[:, 7:].clone().requires_grad_(True)
    w = torch.randn(3, 71, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    w[:, 3:7] = 0.0
    out = tr(env.q, env.qd, qt)
    (g_bundled,) = torch.autograd.grad((w * torch.cat((out.q, out.qd), -1)).sum(), qt)
    ids, dq, dqd = tr.last_offsets
    per_branch = []
    for i in range(B):
        s = env.sim.step(env.q.index_add(0, ids, dq[:, i]), env.qd.index_add(0, ids, dqd[:, i]), qt)
        (g,) = torch.autograd.grad((w * torch.cat((s.q, s.qd), -1)).sum(), qt)
        per_branch.append(g)
    g_sep = torch.stack(per_branch).mean(0)
    torch.testing.assert_close(g_bundled, g_sep, rtol=1e-10, atol=1e-10 * float(g_sep.abs().max()))
    assert float((per_branch[0] - per_branch[1])[0].abs().max()) > 0  # the branches really differ


# ---------------------------------------------------------------------------------------------
# config, CLI, runner


def test_bad_bcg_values_are_one_line_errors():
    bad = [("num_branches", 0), ("horizon", 0), ("sigma_p", -0.01), ("damping", 0.0)]
    bad += [(f, v) for f in ("max_dq", "max_dqd") for v in (0.0, -0.1, "nan", "inf")]
    for field, value in bad:
        cfg = tiny_cfg("bcg.enabled=true", f"bcg.{field}={value}")
        with pytest.raises(BcgdError, match=f"bcg.{field} must"):
            cfg.validate()
    cfg = tiny_cfg("bcg.enabled=true", "bcg.max_dq=0.1", "bcg.max_dqd=0.5").validate()
    assert (cfg.bcg.max_dq, cfg.bcg.max_dqd) == (0.1, 0.5)
    assert tiny_cfg("bcg.max_dq=0.1", "bcg.max_dq=none").validate().bcg.max_dq is None
    code = "import sys; from bcg_deploy.cli import main; sys.argv = ['bcgd', *sys.argv[1:]]; main()"
    args = ["train", "dance", "--bundle", "--branches", "0", "--iterations", "1"]
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "bcg.num_branches must be >= 1" in res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    res = subprocess.run([sys.executable, "-c", code, "train", "--bundle", "--bcg-max-dqd", "-1", "--iterations", "1"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 2
    assert res.stderr.strip() == "error: bcg.max_dqd must be finite and > 0 (rad/s) or none, got -1.0"
    res = subprocess.run([sys.executable, "-c", code, "train", "--branches", "4", "--tau", "300", "--iterations", "1"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 2 and res.stderr.strip() == (
        "error: --branches, --tau: options of SHAC + BCG, but this run is plain SHAC; add --bundle"
    )


def test_cli_options_reach_the_config():
    from bcg_deploy.training.run import plan_run

    bcg = {"enabled": True, "num_branches": 4, "horizon": 3, "sigma_p": 0.02, "sigma_v": 0.01, "tau": 300.0,
           "max_dq": 0.1, "max_dqd": 0.5}  # fmt: skip
    cfg = plan_run("dance", None, None, None, None, None, None, None, None, None, None, None, [], None, bcg)
    b = cfg.bcg
    assert (b.enabled, b.num_branches, b.horizon, b.sigma_p, b.sigma_v, b.tau) == (True, 4, 3, 0.02, 0.01, 300.0)
    assert (b.max_dq, b.max_dqd) == (0.1, 0.5)
    cfg = plan_run("dance", None, None, None, None, None, None, None, None, None, None, None, [], None,
                       {"enabled": False})  # fmt: skip
    assert not cfg.bcg.enabled and cfg.bcg.num_branches == 10 and cfg.bcg.tau == 400.0


def test_each_method_defaults_to_its_paper_batch(tmp_path):
    """Plain SHAC by default at the paper's 128 envs; ``--bundle`` at its 64 unless ``--envs`` or ``--set``."""
    from bcg_deploy.training.run import plan_run

    def cfg(envs=None, bundle=None, overrides=()):
        return plan_run("dance", None, None, None, envs, None, None, None, None, None, tmp_path / "r", None,
                            list(overrides), None, {"enabled": bundle})  # fmt: skip

    plain = cfg()
    assert not plain.bcg.enabled and plain.env.num_envs == 128
    assert cfg(bundle=True).env.num_envs == 64
    assert cfg(bundle=False).env.num_envs == 128
    assert cfg(envs=32, bundle=True).env.num_envs == 32
    assert cfg(bundle=True, overrides=["env.num_envs=16"]).env.num_envs == 16
    assert cfg(overrides=["bcg.enabled=true"]).env.num_envs == 64


def test_bcg_options_need_a_bcg_run(tmp_path):
    """BCG's options on plain SHAC or PPO are one-line errors naming them, not silently ignored."""
    from bcg_deploy.training.run import plan_run

    def cfg(algo="shac", **bcg):
        bcg = {"enabled": None, "num_branches": None, "tau": None, **bcg}
        return plan_run("dance", None, None, None, None, None, None, None, None, None, tmp_path / "r", None,
                            [], None, bcg, algo=algo)  # fmt: skip

    with pytest.raises(BcgdError, match=r"^--branches, --tau: options of SHAC \+ BCG, but this run is plain SHAC"):
        cfg(num_branches=4, tau=300.0)
    assert cfg(enabled=True, num_branches=4).bcg.num_branches == 4
    with pytest.raises(BcgdError, match=r"^--bundle: SHAC \+ BCG, but this run is PPO \(--algo ppo\)$"):
        cfg("ppo", enabled=True)
    with pytest.raises(BcgdError, match=r"^--tau: SHAC \+ BCG, but this run is PPO"):
        cfg("ppo", tau=300.0)
    assert not cfg("ppo").bcg.enabled


def test_runner_logs_bundles_and_resumes_exactly(tmp_path, tiny_motion):
    over = ("bcg.enabled=true", "bcg.num_branches=3", "bcg.tau=100", "sim.kappa=50", "runner.iterations=3")
    full = Trainer(tiny_cfg(f"runner.out_dir={tmp_path / 'a'}", "runner.save_every=1", *over), motion=tiny_motion)
    full.run()
    part = Trainer(tiny_cfg(f"runner.out_dir={tmp_path / 'b'}", "runner.stop_at=2", *over), motion=tiny_motion)
    part.run()
    Trainer(tiny_cfg(f"runner.out_dir={tmp_path / 'b'}", *over), resume=tmp_path / "b" / "run.pt").run()
    a, b = read_metrics(tmp_path / "a"), read_metrics(tmp_path / "b")
    assert sum(r["bcg_starts"] for r in a) > 0 and all(r["bcg_row_overhead"] >= 0 for r in a)
    timing = {"time_s", "iterations_per_s", "env_steps_per_s", "bcg_time_s", "bcg_param_uploads"}  # not state
    assert [{k: v for k, v in r.items() if k not in timing} for r in a] == [
        {k: v for k, v in r.items() if k not in timing} for r in b
    ]


def test_generator_state_of_another_device_type_seeds_deterministically(setup):
    """A BCG checkpoint from a CPU run resumed on CUDA (or back): no error, a reproducible stream."""
    env, _, state = setup
    env.load_state_dict(state)
    a = BundledTransition(_bcg(), env, seed=1)
    saved = a.state_dict()
    assert saved["generator_device"] == "cpu"
    foreign = {**saved, "generator_device": "cuda"}
    draws = []
    for _ in range(2):
        b = BundledTransition(_bcg(), env, seed=2)
        b.load_state_dict(foreign)
        draws.append(torch.randn(4, generator=b.generator, dtype=torch.float64))
    assert torch.equal(draws[0], draws[1])
    b.load_state_dict(saved)
    assert torch.equal(b.generator.get_state(), a.generator.get_state())
