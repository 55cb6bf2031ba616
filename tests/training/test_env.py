"""ImitationEnv on the real differentiable simulator: reference consistency, action mapping, falls,
time-outs, non-finite isolation."""

from __future__ import annotations

import pytest
import torch

from bcg_deploy.robots import load_robot
from bcg_deploy.training.env.add import ADD
from bcg_deploy.training.env.imitation import ImitationEnv, SimTransition

from .conftest import tiny_cfg


def make_env(motion, *overrides, dtype="float64"):
    cfg = tiny_cfg(f"sim.dtype={dtype}", *overrides)
    env = ImitationEnv(cfg, load_robot("g1"), motion)
    env.add = ADD(env.feature_dim, cfg.add).to(env.dtype)
    return env


@pytest.fixture(scope="module")
def env(tiny_motion):
    torch.manual_seed(0)
    e = make_env(tiny_motion, "env.num_envs=3", "domain_rand.enabled=false")
    e.reset()
    return e


class RecordingTransition(SimTransition):
    """The real simulator step, remembering the PD targets it was given."""

    def __call__(self, q, qd, q_target):
        self.last_target = q_target.detach().clone()
        return super().__call__(q, qd, q_target)


def test_reference_state_has_zero_residual(env):
    frames = torch.tensor([0, 17, 58])
    q, qd = env.reference_state(frames)
    m = env.motion
    torch.testing.assert_close(q[:, 7:], torch.as_tensor(m.joint_pos[frames.numpy()]))
    f, body_pos = env.features(q, qd)
    # our torch FK of the reference qpos reproduces the clip's MuJoCo body positions and features
    torch.testing.assert_close(body_pos, torch.as_tensor(m.body_pos_w[frames.numpy()]), atol=1e-5, rtol=0)
    torch.testing.assert_close(f, env.ref_features[frames], atol=1e-5, rtol=0)
    assert env.feature_dim == f.shape[1] == 3 + 6 + 6 * 29 + 15 + 3 + 3 + 29


def test_action_maps_through_scale_and_default_pose(env):
    env.reset()
    rec = RecordingTransition(env.sim)
    env.transition = rec
    try:
        a = torch.linspace(-0.9, 0.9, 29, dtype=env.dtype).expand(3, 29)
        env.step(a)
    finally:
        env.transition = SimTransition(env.sim)
    want = env.default_joint_pos + env.action_scale * a  # DR off: no offset, no latency
    torch.testing.assert_close(rec.last_target, want)


def test_fall_terminates_and_resets(env):
    env.reset()
    q = env.q.clone()
    q[1, 2] = 0.2  # root below the 0.3 m fall height
    env.q = q
    frame_before = env.frame.clone()
    out = env.step(torch.zeros(3, 29, dtype=env.dtype))
    assert out.terminated.tolist() == [False, True, False] and out.done[1] and not out.timeout[1]
    assert out.obs_before_reset[1, 0] < 0.3  # root-height term of the terminal observation
    assert env.q[1, 2] > 0.5 and env.episode_len[1] == 0  # reset to a reference state
    assert (env.frame[[0, 2]] == frame_before[[0, 2]] + 1).all()


def test_straying_from_the_reference_terminates_only_when_enabled(env):
    """``env.max_tracking_error``: an env displaced 0.8 m from its reference ends (counted as strayed, not
    as a fall) at a 0.5 m limit; the default (None) leaves it running."""
    for limit, want in ((None, [False, False, False]), (0.5, [False, True, False])):
        env.cfg.env.max_tracking_error = limit
        try:
            env.reset()
            q = env.q.clone()
            q[1, 0] += 0.8  # the whole robot 0.8 m along x: every body is 0.8 m off
            env.q = q
            out = env.step(torch.zeros(3, 29, dtype=env.dtype))
        finally:
            env.cfg.env.max_tracking_error = None
        assert out.terminated.tolist() == want and out.info["strayed"].tolist() == want
        assert not out.info["fell"].any() and out.info["tracking_error"][1] > 0.7


def test_time_out_at_clip_end(env):
    env.reset()
    env.frame = torch.tensor([env.num_frames - 2, 5, 10])
    out = env.step(torch.zeros(3, 29, dtype=env.dtype))
    assert out.timeout.tolist() == [True, False, False] and not out.terminated[0]


def test_nan_state_is_isolated(env):
    env.reset()
    env.detach()
    env.inject_nan(0)
    a = torch.zeros(3, 29, dtype=env.dtype, requires_grad=True)
    out = env.step(a)
    assert out.info["diverged"].tolist() == [True, False, False]
    assert out.terminated[0] and out.reward[0] == 0 and torch.isfinite(out.reward).all()
    assert torch.isfinite(out.obs).all() and torch.isfinite(env.q).all()
    (out.reward.sum() + out.obs.sum()).backward()
    assert torch.isfinite(a.grad).all() and a.grad[1:].abs().sum() > 0


def test_domain_randomisation_reaches_the_simulator(tiny_motion):
    torch.manual_seed(1)
    e = make_env(tiny_motion, "env.num_envs=2", dtype="float32")
    applied = e.sim_params_applied
    assert applied["act_kp"] and applied["act_kd"] and applied["dof_armature"]
    assert (e.params.kp_scale >= 0.8).all() and (e.params.kp_scale <= 1.2).all()
    assert set(e.params.action_latency.tolist()) <= {0, 1}
    kp = e.sim.model.act_kp.numpy()
    torch.testing.assert_close(
        torch.as_tensor(kp, dtype=torch.float64),
        torch.as_tensor(e.robot.kp) * e.params.kp_scale,
        rtol=1e-6,
        atol=1e-6,
    )


def test_actor_noise_is_per_term_uniform(env):
    obs = env.observe()[:1].detach()
    torch.manual_seed(0)
    noisy = env.noisy(obs.expand(400, -1))
    d = noisy - obs
    scale = env.cfg.env.obs_noise_scale  # training's margin over the levels (1.5 by default)
    n = env.obs_module.noise_vector.to(d.dtype) * scale
    assert (d.abs() <= n + 1e-12).all()
    sl = env.obs_module.term_slices()
    assert (d[:, sl["ref_body_rot"]] == 0).all()  # reference terms carry no sensor noise
    # METHOD.md section 6 levels reach the right terms (the spread fills most of U(-n, n))
    for term, level in (("root_rot", 0.05), ("root_lin_vel", 0.5), ("root_ang_vel", 0.2), ("body_rot", 0.01),
                        ("joint_vel", 0.5), ("key_pos", 0.01), ("ref_root_pos", 0.25)):  # fmt: skip
        assert abs(float(d[:, sl[term]].abs().max()) - scale * level) < 0.02 * scale * level


class _BrokenSim:
    """A simulator whose parameter upload fails the way a kernel/NVRTC error would (not a rejection)."""

    def __init__(self, sim, exc):
        self.sim, self.exc = sim, exc
        self.num_envs, self.types, self.torch_device = sim.num_envs, sim.types, sim.torch_device

    def set_env_params(self, **params):
        raise self.exc

    def step(self, q, qd, q_target):
        return self.sim.step(q, qd, q_target)


def test_parameter_errors_are_not_swallowed(env):
    from bcg_deploy.errors import BcgdError
    from bcg_deploy.training.env.simulator import apply_params_to_sim

    with pytest.raises(RuntimeError, match="launch failed"):
        apply_params_to_sim(_BrokenSim(env.sim, RuntimeError("launch failed")), env.robot, env.params)
    # A parameter the simulator rejects (BcgdError) is reported as not applied, never raised.
    applied = apply_params_to_sim(_BrokenSim(env.sim, BcgdError("no such parameter")), env.robot, env.params)
    assert not any(applied.values())


def test_fixed_shape_steps_read_nothing_back(tiny_motion):
    """The CUDA stepping (fixed shapes: E draws per reset/push, no host reads) on CPU: no sync site in
    ``ImitationEnv.step``, and resets still land on the reference with fresh bookkeeping."""
    from bcg_deploy.training.parallel.syncs import SyncCounter

    torch.manual_seed(0)
    e = make_env(tiny_motion, "env.num_envs=4", "env.fall_height=5.0", "domain_rand.push_interval_s=0.02,0.02")
    e.fixed_shapes = True
    e.reset()
    a = torch.zeros(4, 29, dtype=e.dtype, requires_grad=True)
    e.step(a)  # warm-up (simulator buffers)
    with SyncCounter("trace") as sc:
        out = e.step(a)
    assert sc.count == 0, sc.summary()
    assert out.done.all() and (e.episode_len == 0).all()  # fall_height 5 m: every env fell and was reset
    q_ref, _ = e.reference_state(e.frame)
    assert (e.q[:, 7:] - q_ref[:, 7:]).abs().max() < 0.2  # reset joint noise only
    (out.reward.sum() + out.obs_before_reset.sum()).backward()
    assert torch.isfinite(a.grad).all() and a.grad.abs().sum() > 0


@pytest.mark.parametrize("fixed_shapes", [False, True])
def test_reset_at_given_start_frames_keeps_the_random_streams(tiny_motion, fixed_shapes):
    """``reset(start_frames)`` puts each env on the reference at its frame, and takes the same draws as a
    random reset (the reset noise and per-episode parameters are those of the same seed)."""
    starts = torch.tensor([0, 29, 58])
    states = {}
    for given in (None, starts):
        torch.manual_seed(0)
        e = make_env(tiny_motion, "env.num_envs=3")  # domain randomisation on: reset noise and parameters
        e.fixed_shapes = fixed_shapes
        e.reset(start_frames=given)
        states[given is None] = (e.frame.clone(), e.q.clone(), e.params.friction.clone())
    frame, q, friction = states[False]
    assert frame.tolist() == starts.tolist()
    q_ref, _ = e.reference_state(starts)
    assert 0 < (q[:, 7:] - q_ref[:, 7:]).abs().max() <= 0.1 + 1e-12  # the reset joint noise, +/-0.1 rad
    torch.testing.assert_close(friction, states[True][2])  # the same per-episode draws as a random reset
    assert states[True][0].tolist() != starts.tolist()


def test_reset_start_frames_must_fit_the_clip(env):
    with pytest.raises(ValueError, match=r"shape \(2,\); expected \(3,\)"):
        env.reset(start_frames=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"must lie in \[0, 58\]"):
        env.reset(start_frames=torch.tensor([0, 1, 59]))


@pytest.mark.parametrize("adaptive", [False, True])
def test_first_frame_share_starts_that_share_of_resets_at_frame_0(tiny_motion, adaptive):
    """``env.first_frame_share``: the share is drawn after the phases, so an env it leaves alone keeps the phase
    that share 0 gives it (and share 0 draws nothing more); 1 starts every reset at the first frame, still
    perturbed by the reset noise; a share in between starts about that share there."""

    def frames(share: float, envs: int) -> tuple[torch.Tensor, torch.Tensor]:
        torch.manual_seed(0)
        e = make_env(tiny_motion, f"env.num_envs={envs}", f"env.first_frame_share={share}",
                     f"env.adaptive_start={str(adaptive).lower()}")  # fmt: skip
        e.reset()
        return e.frame.clone(), e.q.clone()

    f0, _ = frames(0.0, 64)
    assert int((f0 == 0).sum()) < 8  # share 0: frame 0 no likelier than any other of the clip's 58
    f1, q1 = frames(1.0, 8)
    ref = make_env(tiny_motion, "env.num_envs=8")
    q_ref, _ = ref.reference_state(torch.zeros(8, dtype=torch.long))
    assert f1.tolist() == [0] * 8 and 0 < (q1[:, 7:] - q_ref[:, 7:]).abs().max() <= 0.1 + 1e-12
    half, _ = frames(0.5, 64)
    assert 16 <= int((half == 0).sum()) <= 48 and bool(((half == 0) | (half == f0)).all())


def test_first_frame_share_must_be_a_fraction(tiny_motion):
    from bcg_deploy.errors import BcgdError

    with pytest.raises(BcgdError, match=r"env.first_frame_share must be in \[0, 1\]"):
        tiny_cfg("env.first_frame_share=1.5").validate()
