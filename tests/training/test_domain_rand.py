"""Domain randomisation draws stay inside METHOD.md section 6's ranges; 'off' gives nominal values."""

from __future__ import annotations

import torch

from bcg_deploy.training.config import DomainRandCfg
from bcg_deploy.training.env import domain_rand as dr


def test_ranges():
    torch.manual_seed(0)
    c = DomainRandCfg()
    p = dr.sample_params(c, 500, 30, 29, "cpu")
    checks = [
        (p.friction, 0.3, 1.6), (p.base_mass_add, -3, 3), (p.link_mass_scale, 0.8, 1.2),
        (p.link_com_offset, -0.03, 0.03), (p.kp_scale, 0.8, 1.2), (p.kd_scale, 0.8, 1.2),
        (p.armature_scale, 0.75, 1.25), (p.joint_friction_scale, 0.5, 1.5), (p.default_joint_offset, -0.01, 0.01),
    ]  # fmt: skip
    for x, lo, hi in checks:
        assert x.min() >= lo and x.max() <= hi and x.max() - x.min() > 0.8 * (hi - lo)
    assert set(p.action_latency.tolist()) == {0, 1}
    push = dr.sample_push(c, 2000, "cpu")
    half = torch.tensor([0.5, 0.5, 0.2, 0.52, 0.52, 0.78], dtype=torch.float64)
    assert (push.abs() <= half).all() and (push.abs().amax(0) > 0.95 * half).all()
    steps = dr.sample_push_interval(c, 2000, 0.02, "cpu")
    assert steps.min() >= 50 and steps.max() <= 150
    r = dr.sample_reset_noise(c, 2000, 29, "cpu")
    assert (r["pos"].abs() <= torch.tensor([0.05, 0.05, 0.01], dtype=torch.float64)).all()
    assert (r["rpy"].abs() <= torch.tensor([0.1, 0.1, 0.2], dtype=torch.float64)).all()
    assert r["joints"].abs().max() <= 0.1


def test_ranges_cover_whole_body_tracking():
    """whole_body_tracking's tracking_env_cfg.py (cd65172) EventCfg: friction static 0.3-1.6 / dynamic 0.3-1.2,
    joint default offsets +/-0.01 rad, torso_link CoM x +/-2.5, y +/-5, z +/-5 cm, pushes every 1-3 s with
    its VELOCITY_RANGE; our draws cover each (restitution: its terrain's is 0 under "multiply", so 0)."""
    torch.manual_seed(1)
    c = DomainRandCfg()
    torso = 7
    p = dr.sample_params(c, 4000, 30, 29, "cpu", torso_index=torso)
    assert p.friction.min() < 0.31 and p.friction.max() > 1.59
    com = p.link_com_offset[:, torso]
    assert (com.abs().amax(0) > torch.tensor([0.029, 0.049, 0.049], dtype=torch.float64)).all()
    assert (com.abs().amax(0) <= torch.tensor([0.03, 0.05, 0.05], dtype=torch.float64)).all()
    others = torch.cat([p.link_com_offset[:, :torso], p.link_com_offset[:, torso + 1 :]], dim=1)
    assert others.abs().max() <= 0.03
    assert p.default_joint_offset.abs().max() <= 0.01 and p.default_joint_offset.abs().max() > 0.0099
    half = torch.tensor([0.5, 0.5, 0.2, 0.52, 0.52, 0.78], dtype=torch.float64)
    assert (dr.sample_push(c, 4000, "cpu").abs().amax(0) > 0.99 * half).all()
    assert tuple(c.push_interval_s) == (1.0, 3.0)


def test_reset_scale_widens_the_same_draws():
    torch.manual_seed(3)
    box = dr.sample_reset_noise(DomainRandCfg(), 500, 29, "cpu")
    torch.manual_seed(3)
    wide = dr.sample_reset_noise(DomainRandCfg(reset_scale=1.5), 500, 29, "cpu")
    for k in ("pos", "rpy", "joints"):
        torch.testing.assert_close(wide[k], 1.5 * box[k], rtol=1e-12, atol=0)
    half = torch.tensor([0.15, 0.15, 0.3], dtype=torch.float64)
    assert (wide["rpy"].abs() <= half + 1e-12).all() and (wide["rpy"].abs().amax(0) > 0.95 * half).all()


def test_off_is_nominal_and_reset_rows_only_touch_episode_terms():
    off = dr.sample_params(DomainRandCfg(enabled=False), 4, 30, 29, "cpu")
    assert (off.kp_scale == 1).all() and (off.action_latency == 0).all() and (off.link_com_offset == 0).all()
    torch.manual_seed(1)
    p = dr.sample_params(DomainRandCfg(), 4, 30, 29, "cpu")
    kp = p.kp_scale.clone()
    new = dr.sample_params(DomainRandCfg(), 2, 30, 29, "cpu")
    dr.assign_rows(p, new, torch.tensor([1, 3]), dr.RESET_FIELDS)
    assert torch.equal(p.kp_scale, kp)  # physical parameters are start-up draws
    assert torch.equal(p.default_joint_offset[[1, 3]], new.default_joint_offset)
